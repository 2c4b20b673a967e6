"""Probes of responsiveness, for tests that attack it (issue 17): a real server's
``/health``, and an event loop's longest pause."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable

import httpx

from tests.support.server import ParleyServer


class HealthProbe:
    """Asks ``/health`` every 50 ms on a thread of its own; ``worst`` is the slowest
    answer, in seconds (a request that did not answer at all counts as its timeout)."""

    def __init__(self, server: ParleyServer) -> None:
        self._url = f"{server.url}/health"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.worst = 0.0
        self.answers = 0

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.answers:  # probing, before the test's request goes out
            assert time.monotonic() < deadline, "/health never answered"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as http:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    http.get(self._url).raise_for_status()
                    self.answers += 1
                except httpx.HTTPError:
                    pass
                self.worst = max(self.worst, time.monotonic() - started)
                self._stop.wait(0.05)


async def longest_pause(work: Awaitable[object]) -> float:
    """The longest the event loop was held while ``work`` ran (a task ticks meanwhile)."""
    longest, last, done = 0.0, time.monotonic(), False

    async def tick() -> None:
        nonlocal longest, last
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest, last = max(longest, now - last), now
            if done:
                return

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # ticking before the work starts
    last = time.monotonic()
    try:
        await work
    finally:
        done = True
        await ticker
    return longest
