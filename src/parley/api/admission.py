"""Admission control: beyond capacity, answer at once instead of queueing.

It guards the routes that start work (chat, tasks, and Parley's own MCP endpoint at
``/mcp``, whose tools search knowledge, memory and conversations).

- **The body first.** A guarded request's body is read whole, under
  ``body_timeout_seconds`` (408 after it) and ``max_body_bytes`` (413), before the
  request counts as in flight: a client sending one byte a second holds a connection,
  never a slot that others need. Bodies being read are capped at ``max_in_flight`` too.
- **In flight**, in all and per key: at most ``max_in_flight`` requests (a stream counts
  until it ends; 503 beyond), and at most ``max_in_flight_per_key`` of them for one key
  (by the presented key's hash; 429 beyond), so one key holder
  cannot take every slot. The same per-key cap holds for bodies being read.
- **Loop lag.** How late the event loop runs is the honest measure of a saturated
  single-process server: when a timer set for 50 ms fires much later, every stream is
  already slower than it should be, so new requests are turned away (503 with
  Retry-After) until the loop catches up.

Requests already admitted keep their latency; refused ones cost microseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api.auth import hash_key, presented_key
from parley.api.errors import error_response
from parley.errors import Overloaded, ParleyError, PayloadTooLarge

GUARDED = frozenset(
    {"/v1/chat/completions", "/chat/chat/completions", "/v1/tasks", "/mcp", "/mcp/"}
)
_TICK = 0.05


class RequestTimeout(ParleyError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class Admission:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_in_flight: int,
        max_loop_lag_ms: float,
        max_in_flight_per_key: int | None = None,
        max_body_bytes: int = 10 * 1024 * 1024,
        body_timeout_seconds: float = 30.0,
    ) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.max_per_key = max_in_flight_per_key or max_in_flight
        self.max_body = max_body_bytes
        self.body_timeout = body_timeout_seconds
        self.max_lag = max_loop_lag_ms / 1000
        self.in_flight = 0
        self.reading = 0
        self.per_key: Counter[str] = Counter()
        self.reading_per_key: Counter[str] = Counter()
        self.lag = 0.0
        self._monitor: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in GUARDED:
            await self.app(scope, receive, send)
            return
        if self._monitor is None and self.max_lag > 0:
            self._monitor = asyncio.get_running_loop().create_task(self._watch_lag())
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await self._read_body(scope, receive)
            except ParleyError as refused:
                await _refuse(refused, scope, receive, send)
                return
            if body is None:  # the client left while sending it
                return
            receive = _replay(body, receive)
        who = _bucket(scope)
        refusal = self._refusal(scope, who)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        self.in_flight += 1
        self.per_key[who] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            _release(self.per_key, who)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when the client disconnected; raises the refusal."""
        declared = HTTPConnection(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            raise PayloadTooLarge(f"request body larger than {self.max_body} bytes")
        who = _bucket(scope)
        if self.reading >= self.max_in_flight:
            raise Overloaded("too many request bodies arriving; try again shortly", retry_after=1)
        if who and self.reading_per_key[who] >= self.max_per_key:
            raise _per_key(self.max_per_key, "request bodies arriving")
        self.reading += 1
        self.reading_per_key[who] += 1
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body:
                        raise PayloadTooLarge(f"request body larger than {self.max_body} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {self.body_timeout:g} s"
            ) from None
        finally:
            self.reading -= 1
            _release(self.reading_per_key, who)

    def _refusal(self, scope: Scope, who: str) -> Overloaded | None:
        # Generations whose client left keep running (on_disconnect: continue): they
        # count too, or connecting and leaving in a loop would start unbounded work.
        state = getattr(scope["app"].state, "parley", None) if "app" in scope else None
        running = state.service.running if state is not None else 0
        if max(self.in_flight, running) >= self.max_in_flight:
            return Overloaded(
                f"too many requests in flight ({self.max_in_flight}); try again shortly",
                retry_after=1,
            )
        if who and self.per_key[who] >= self.max_per_key:
            return _per_key(self.max_per_key, "requests in flight")
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


def _per_key(limit: int, what: str) -> Overloaded:
    error = Overloaded(
        f"this key has {limit} {what}, its most; try again when one ends",
        retry_after=1,
        code="too_many_in_flight",
    )
    error.status, error.type = 429, "rate_limit_error"
    return error


def _release(counts: Counter[str], who: str) -> None:
    counts[who] -= 1
    if counts[who] <= 0:
        del counts[who]


def _bucket(scope: Scope) -> str:
    """Whose in-flight count a request adds to: the presented key, hashed ("" without
    one: keyless access exists only while no key does, for the machine's one user)."""
    key = presented_key(HTTPConnection(scope))
    return hash_key(key) if key else ""


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read already, then whatever the client sends next
    (its disconnect, which streaming responses watch for)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(refusal: ParleyError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer ``refusal`` and close the connection: the rest of the body is not read."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message["headers"], (b"connection", b"close")]}
        await send(message)

    await error_response(refusal)(scope, receive, closing)
