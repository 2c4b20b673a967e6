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
    ``prepare(n)`` (the best of three each, ``prepare`` untimed): about ``factor`` when
    the work is linear, ``factor ** 2`` when it is quadratic."""
    return _best(prepare(n * factor), run) / _best(prepare(n), run)


def _best(work: T, run: Callable[[T], object]) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        run(work)
        times.append(time.perf_counter() - started)
    return min(times)
