"""Install ``examples/interceptor-package`` for real (pip, its entry point and all) into a
folder of its own, so tests can put it on ``sys.path`` or ``PYTHONPATH`` without
touching the test environment's site-packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE_PACKAGE = Path(__file__).resolve().parents[2] / "examples" / "interceptor-package"


def install_example_package(target: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",  # hatchling is a dev dependency: no download
            "--target",
            str(target),
            str(EXAMPLE_PACKAGE),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target
