"""Two checkouts of Parley side by side: figures 1 (added time to first token), 4 (CPU
per 1,000 chunks) and 6 (requests/s at p99 <= 50 ms) of ``parley bench``, for a change
against the commit before it.

``python -m parley.bench.compare BEFORE_SRC AFTER_SRC [--rounds N]``: each ``*_SRC`` is a
checkout's ``src`` folder; both run as ``parley serve`` processes (``PYTHONPATH`` set to
their folder) on the same core, against one mock upstream, in alternating order round
after round, so that drift of the machine falls on both. ``scripts/bench-ab.sh REV``
makes the checkout of ``REV`` and runs this against the working tree.

Prints each round (with its failed requests and their errors), then the median of each
figure per side over the rounds that measured it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from parley.bench import figures
from parley.bench.figures import FULL, SMOKE, Profile
from parley.bench.rig import Rig, Service

FIGURES = {
    "1_stream_added_ms": "figure 1, stream: added median ms",
    "1_whole_added_ms": "figure 1, non-stream: added median ms",
    "4_cpu_s_per_1000": "figure 4: CPU s per 1,000 chunks",
    "6_rps": "figure 6: requests/s at p99 <= 50 ms",
}


async def _round(rig: Rig, pair: list[Service], profile: Profile) -> dict[str, dict[str, Any]]:
    first = await figures.sequential(rig, [rig.services["direct"], *pair], profile)
    cpu = await figures.cpu_per_chunk(rig, pair, profile)
    rps = await figures.requests_per_second(rig, pair, profile, parley_pass_through=False)
    return {
        s.name: {
            "1_stream_added_ms": first[s.name]["stream"]["added_median_ms"],
            "1_whole_added_ms": first[s.name]["non_stream"]["added_median_ms"],
            "4_cpu_s_per_1000": cpu[s.name]["cpu_s_per_1000_chunks"],
            "6_rps": rps[s.name]["rps_at_p99_50ms"],
            "failed": first[s.name]["stream"]["failed"]
            + first[s.name]["non_stream"]["failed"]
            + cpu[s.name]["failed"]
            + sum(level["failed"] for level in rps[s.name]["levels"]),
            "errors": sorted(
                {
                    *first[s.name]["stream"]["errors"],
                    *first[s.name]["non_stream"]["errors"],
                    *cpu[s.name]["errors"],
                    *(e for level in rps[s.name]["levels"] for e in level["errors"]),
                }
            ),
        }
        for s in pair
    }


async def compare(
    before: Path, after: Path, rounds: int, profile: Profile = FULL
) -> dict[str, dict[str, float]]:
    """The median of each figure over ``rounds`` for both sides (``before``, ``after``)."""
    rig = Rig()
    os.sched_setaffinity(0, rig.client_cores)
    seen: list[dict[str, dict[str, Any]]] = []
    try:
        rig.start_mock()
        sides = [
            rig.start_parley(name, src=src) for name, src in (("before", before), ("after", after))
        ]
        for number in range(rounds):
            pair = sides if number % 2 == 0 else sides[::-1]
            seen.append(await _round(rig, pair, profile))
            print(number, json.dumps(seen[-1]), flush=True)
    finally:
        rig.stop()
    return {
        key: {side: _median([r[side][key] for r in seen]) for side in ("before", "after")}
        for key in FIGURES
    }


def _median(values: list[Any]) -> float:
    """Of the rounds that measured the figure (a round whose requests all failed has
    none: NaN, and its failures are printed with it)."""
    measured = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(measured) if measured else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the src folder of the commit before")
    parser.add_argument("after", type=Path, help="the src folder of the change")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--profile", choices=["full", "smoke"], default="full")
    parser.add_argument("--json", action="store_true", help="the medians as JSON, last")
    args = parser.parse_args()
    profile = FULL if args.profile == "full" else SMOKE
    before, after = args.before.resolve(), args.after.resolve()
    medians = asyncio.run(compare(before, after, args.rounds, profile))
    if args.json:
        print(json.dumps(medians))
        return
    print(f"\nmedians of {args.rounds} rounds")
    for key, label in FIGURES.items():
        before, after = medians[key]["before"], medians[key]["after"]
        print(f"{label:42} before {before:9.4g}   after {after:9.4g}   ({after / before:.2f}x)")


if __name__ == "__main__":
    main()
