"""``python -m parley.bench.compare``: two checkouts side by side (here the same one
twice, in the smoke profile)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import parley
from parley.bench.compare import FIGURES

SRC = Path(parley.__file__).resolve().parent.parent


def test_two_checkouts_are_measured_side_by_side() -> None:
    command = [sys.executable, "-m", "parley.bench.compare", str(SRC), str(SRC)]
    command += ["--rounds", "2", "--profile", "smoke", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    rounds = [json.loads(line.split(" ", 1)[1]) for line in lines[:-1]]
    assert [set(r) for r in rounds] == [{"before", "after"}] * 2
    medians = json.loads(lines[-1])
    assert set(medians) == set(FIGURES)
    for sides in medians.values():
        assert set(sides) == {"before", "after"}
        assert all(math.isfinite(value) for value in sides.values())
    assert medians["4_cpu_s_per_1000"]["after"] > 0
