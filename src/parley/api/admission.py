"""Admission control: beyond capacity, answer at once instead of queueing, and when the
server is saturated, turn away the keys using the most first.

Every request is counted by its *bucket* (``parley.fairness``): the presented key,
hashed, or "" for keyless loopback use (the machine's one user, while no key exists)
and for requests without a key. The ``Ledger`` shared with the streams measures the
event loop's lag and paces the keys using most of it.

Routes that start work (chat, Chatchat's knowledge and file chats, tasks, and Parley's
own MCP endpoint at ``/mcp``, whose tools search knowledge, memory and conversations)
are *guarded*:

- **The body first.** A guarded request's body is read whole, under
  ``body_timeout_seconds`` (408 after it) and ``max_body_bytes`` (413), before the
  request counts as in flight: a client sending one byte a second holds a connection,
  never a slot that others need. Bodies being read are capped at ``max_in_flight`` too,
  and at ``max_in_flight_per_key`` per key.
- **In flight**, per key and in all: at most ``max_in_flight_per_key`` for one key
  (429 ``too_many_in_flight`` beyond), and ``max_in_flight`` in all (a stream counts
  until it ends; generations whose client left count too, for their key as well:
  ``fairness.working``).
- **Saturated: the heaviest keys first.** A key is *heavy* when it has at least its
  fair share of the guarded requests in flight: ``max(4, in flight / keys in flight)``
  (the key asking counted among them). At ``max_in_flight``, a heavy key gets 429
  ``too_many_in_flight``; a light key is still admitted into a reserve of a twentieth
  more, and gets 503 beyond it. While the event loop runs more than
  ``max_loop_lag_ms`` late (a timer set for 50 ms firing much later: the honest
  measure of a saturated single-process server), a heavy key gets 429 and a light
  key is admitted, unless the loop runs five times that late (at least 0.5 s): then
  503 for all. So the key causing the load is the one refused, and the others are not
  (measured: 20 fast streams of one key made another key's chats 503 42 times in 50).
  Keyless loopback use is one user, with no one to be fair to: at either limit it gets
  503, as before; the per-key limits do not apply to it.

Other requests that present a key (conversation reads, searches, uploads, memory,
audit ...) may number ``max_other_in_flight_per_key`` per key (429 beyond; their
bodies are not read ahead): a key cannot occupy the database's reader threads or the
loop with them. ``/health``, keyless use and the web UI's page and assets are not
limited. A browser's session cookie counts as the key it was made with.

Every refusal carries Retry-After and costs microseconds; admitted requests keep
their latency.
"""

from __future__ import annotations

import asyncio

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api.auth import hash_key, presented_key
from parley.api.errors import error_response
from parley.api.webui import is_ui_path
from parley.errors import Overloaded, ParleyError, PayloadTooLarge
from parley.fairness import Ledger

GUARDED = frozenset(
    {
        "/v1/chat/completions",
        "/chat/chat/completions",
        "/chat/file_chat",
        "/v1/tasks",
        "/mcp",
        "/mcp/",
    }
)
KB_CHAT = ("/knowledge_base/", "/chat/completions")
"""Chatchat's knowledge chat, ``/knowledge_base/{mode}/{param}/chat/completions``: the
prefix and suffix of its paths, guarded too."""
UNLIMITED = frozenset({"/health", "/ready"})
FAIR_SHARE_FLOOR = 4
"""A key with fewer guarded requests in flight than this is never the heavy one."""
RESERVE_FRACTION = 20
"""Light keys may go over ``max_in_flight`` by a ``1/RESERVE_FRACTION`` of it."""
EXTREME_LAG_FACTOR = 5
EXTREME_LAG_FLOOR = 0.5
"""Light keys are admitted while the loop lag is under ``EXTREME_LAG_FACTOR`` times the
limit, and at least ``EXTREME_LAG_FLOOR`` seconds."""


def is_guarded(path: str) -> bool:
    """The path starts work: a chat (Parley's, Chatchat's and its knowledge and file
    chats), a task or ``/mcp``."""
    return path in GUARDED or (path.startswith(KB_CHAT[0]) and path.endswith(KB_CHAT[1]))


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
        max_other_in_flight_per_key: int | None = None,
        max_body_bytes: int = 10 * 1024 * 1024,
        body_timeout_seconds: float = 30.0,
        ledger: Ledger | None = None,
    ) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.reserve = max(1, max_in_flight // RESERVE_FRACTION)
        self.max_per_key = max_in_flight_per_key or max_in_flight
        self.max_other_per_key = max_other_in_flight_per_key
        self.max_body = max_body_bytes
        self.body_timeout = body_timeout_seconds
        self.max_lag = max_loop_lag_ms / 1000
        self.extreme_lag = max(EXTREME_LAG_FACTOR * self.max_lag, EXTREME_LAG_FLOOR)
        self.in_flight = 0
        self.reading = 0
        self.per_key: dict[str, int] = {}
        self.reading_per_key: dict[str, int] = {}
        self.other_per_key: dict[str, int] = {}
        self.ledger = ledger or Ledger()

    @property
    def lag(self) -> float:
        return self.ledger.lag

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.ledger.start()
        who = await _bucket(scope)
        with self.ledger.serving(who):
            if is_guarded(scope["path"]):
                await self._guarded(scope, receive, send, who)
            elif who and self.max_other_per_key and scope["path"] not in UNLIMITED:
                await self._other(scope, receive, send, who)
            else:
                await self.app(scope, receive, send)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, who: str) -> None:
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await self._read_body(scope, receive, who)
            except ParleyError as refused:
                await _refuse(refused, scope, receive, send)
                return
            if body is None:  # the client left while sending it
                return
            receive = _replay(body, receive)
        refusal = self._refusal(scope, who)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        self.in_flight += 1
        _add(self.per_key, who)
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            _release(self.per_key, who)

    async def _other(self, scope: Scope, receive: Receive, send: Send, who: str) -> None:
        limit = self.max_other_per_key
        assert limit is not None
        if self.other_per_key.get(who, 0) >= limit:
            refusal = _per_key(limit, "requests in flight")
            if scope["method"] in ("POST", "PUT", "PATCH"):
                await _refuse(refusal, scope, receive, send)  # its body is not read
            else:
                await error_response(refusal)(scope, receive, send)
            return
        _add(self.other_per_key, who)
        try:
            await self.app(scope, receive, send)
        finally:
            _release(self.other_per_key, who)

    async def _read_body(self, scope: Scope, receive: Receive, who: str) -> bytes | None:
        """The whole body, or None when the client disconnected; raises the refusal."""
        declared = HTTPConnection(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            raise PayloadTooLarge(f"request body larger than {self.max_body} bytes")
        if self.reading >= self.max_in_flight:
            raise Overloaded("too many request bodies arriving; try again shortly", retry_after=1)
        if who and self.reading_per_key.get(who, 0) >= self.max_per_key:
            raise _per_key(self.max_per_key, "request bodies arriving")
        self.reading += 1
        _add(self.reading_per_key, who)
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
        """Why a guarded request of ``who`` is not admitted now, or None: the rules of
        the module's docstring, in order."""
        # Generations whose client left may keep running (server.on_disconnect): they
        # count too, the key's and in all, or connecting and leaving in a loop would
        # start unbounded work.
        mine = max(self.per_key.get(who, 0), self.ledger.working.get(who, 0))
        if who and mine >= self.max_per_key:
            return _per_key(self.max_per_key, "requests in flight")
        load = max(self.in_flight, _running(scope))
        heavy = bool(who) and mine >= self._fair_share(who, load)
        if load >= self.max_in_flight:
            if heavy:
                return _over_share(mine, "the server is full")
            if not who or load >= self.max_in_flight + self.reserve:
                return Overloaded(
                    f"too many requests in flight ({self.max_in_flight}); try again shortly",
                    retry_after=1,
                )
        lag = self.ledger.lag
        if self.max_lag and lag > self.max_lag:
            # A lag that lasts, not a burst: opening a thousand streams at once makes the
            # loop late for a moment, and those streams should still be served.
            if heavy:
                return _over_share(mine, f"the event loop runs {lag * 1000:.0f} ms late")
            if not who or lag > self.extreme_lag:
                return Overloaded(
                    f"server saturated (event loop {lag * 1000:.0f} ms late); try again shortly",
                    retry_after=1,
                )
        return None

    def _fair_share(self, who: str, load: int) -> int:
        keys = self.per_key.keys() | self.ledger.working.keys() | {who}
        return max(FAIR_SHARE_FLOOR, -(-load // len(keys)))


def _running(scope: Scope) -> int:
    state = getattr(scope["app"].state, "parley", None) if "app" in scope else None
    return state.service.running if state is not None else 0


def _per_key(limit: int, what: str) -> Overloaded:
    return _too_many(f"this key has {limit} {what}, its most; try again when one ends")


def _over_share(count: int, why: str) -> Overloaded:
    return _too_many(
        f"this key has {count} requests in flight, more than its share while {why}; "
        "try again when one ends"
    )


def _too_many(message: str) -> Overloaded:
    error = Overloaded(message, retry_after=1, code="too_many_in_flight")
    error.status, error.type = 429, "rate_limit_error"
    return error


def _add(counts: dict[str, int], who: str) -> None:
    counts[who] = counts.get(who, 0) + 1


def _release(counts: dict[str, int], who: str) -> None:
    counts[who] -= 1
    if counts[who] <= 0:
        del counts[who]


async def _bucket(scope: Scope) -> str:
    """Whose requests a request counts among: the presented key, hashed (a browser's
    session cookie counts as its key); "" without one, for keyless loopback use
    (whatever key the client sends: with no key in existence, every caller is the
    machine's one user), and for the web UI's page and assets."""
    if is_ui_path(scope["path"]):
        return ""
    connection = HTTPConnection(scope)
    state = getattr(scope["app"].state, "parley", None) if "app" in scope else None
    if state is None:
        key = presented_key(connection)
        return hash_key(key) if key else ""
    bucket: str = await state.auth.bucket(connection)
    return bucket


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
