"""A probe of the server's responsiveness, for tests that attack it (issue 17)."""

from __future__ import annotations

import threading
import time

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
