"""How a piece of work grows with its input, for tests of complexity that must hold on
a fast machine and on a slow or busy one alike (an absolute bound does not: 1.0 s
passed here and failed on a machine half as fast)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def growth(
    prepare: Callable[[int], T], run: Callable[[T], object], n: int, factor: int = 4
) -> float:
    """How many times longer ``run`` takes on ``prepare(n * factor)`` than on
    ``prepare(n)``: about ``factor`` when the work is linear, ``factor ** 2`` when it is
    quadratic. Each size runs five times, the two interleaved (so that a busy spell of
    the machine lands on both), and the best time of each counts; ``prepare`` is untimed."""
    small, large = prepare(n), prepare(n * factor)
    best_small = best_large = float("inf")
    for _ in range(5):
        best_small = min(best_small, _time(small, run))
        best_large = min(best_large, _time(large, run))
    return best_large / best_small


def _time(work: T, run: Callable[[T], object]) -> float:
    started = time.perf_counter()
    run(work)
    return time.perf_counter() - started
