"""Admission control: beyond capacity, answer 503 at once instead of queueing.

Two limits guard the routes that start work (chat, tasks, and Parley's own MCP endpoint
at ``/mcp``, whose tools search knowledge, memory and conversations): how many such
requests may be in flight (a stream counts until it ends), and how late the event loop
may run. The loop's lateness is the honest measure of a saturated single-process server:
when a timer set for 50 ms fires much later, every stream is already slower than it
should be, so new requests are turned away (503 with Retry-After) until the loop catches
up. Requests already admitted keep their latency; refused ones cost microseconds.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from parley.api.errors import error_response
from parley.errors import Overloaded

GUARDED = frozenset(
    {"/v1/chat/completions", "/chat/chat/completions", "/v1/tasks", "/mcp", "/mcp/"}
)
_TICK = 0.05


class Admission:
    def __init__(self, app: ASGIApp, *, max_in_flight: int, max_loop_lag_ms: float) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_lag = max_loop_lag_ms / 1000
        self.in_flight = 0
        self.lag = 0.0
        self._monitor: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in GUARDED:
            await self.app(scope, receive, send)
            return
        if self._monitor is None and self.max_lag > 0:
            self._monitor = asyncio.get_running_loop().create_task(self._watch_lag())
        refusal = self._refusal(scope)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    def _refusal(self, scope: Scope) -> Overloaded | None:
        # Generations whose client left keep running (on_disconnect: continue): they
        # count too, or connecting and leaving in a loop would start unbounded work.
        state = getattr(scope["app"].state, "parley", None) if "app" in scope else None
        running = state.service.running if state is not None else 0
        if max(self.in_flight, running) >= self.max_in_flight:
            return Overloaded(
                f"too many requests in flight ({self.max_in_flight}); try again shortly",
                retry_after=1,
            )
        if self.max_lag and self.lag > self.max_lag:
            # A lag that lasts, not a burst: opening a thousand streams at once makes the
            # loop late for a moment, and those streams should still be served.
            return Overloaded(
                f"server saturated (event loop {self.lag * 1000:.0f} ms late); try again shortly",
                retry_after=1,
            )
        return None

    async def _watch_lag(self) -> None:
        """Measure how late a periodic timer fires, smoothed over a few ticks."""
        while True:
            due = time.perf_counter() + _TICK
            await asyncio.sleep(_TICK)
            late = max(0.0, time.perf_counter() - due)
            self.lag = 0.7 * self.lag + 0.3 * late
