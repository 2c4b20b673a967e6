"""``Idempotency-Key``: a request sent again with its key gets the first one's answer,
never a second run (the IETF draft's header, as Stripe and others honour it).

Every ``POST`` and ``PATCH`` that carries the header is covered (but for ``NOT_COVERED``:
``/mcp``, whose JSON-RPC has ids of its own, and the answers that hold a secret). Keys
belong to the API key that sent them (keyless loopback use has one scope), are 1 to 255
visible ASCII characters, and live ``ttl_seconds`` (24 h):

- **First use**: the request runs and its response is recorded as it is sent.
- **The same key and request while it runs** joins it: the response from its first
  byte, then live to its end (a stream is followed as it is generated).
- **After it ended**: the recorded status, headers and body again, with
  ``Idempotent-Replayed: true``, across restarts.
- **The same key with another request** (method, path, query, content type or body):
  422 ``idempotency_key_reused``.
- **Still running in another process**: 409 ``idempotency_key_in_use`` with
  ``Retry-After`` (the SDKs retry it). **Cut off by a restart** (the turn itself is saved
  as interrupted): 409 ``idempotency_key_interrupted``, not to be retried.

What is kept: a complete response with a status under 500 other than 401, 403, 408,
409, 425, 429 and 499; after any other outcome the key is forgotten and a retry runs
again, as clients expect of a server error or a refusal. A response over
``max_response_bytes`` is answered once and then as 409 ``idempotency_response_too_large``.

The first client leaving does not end the recording: the response is produced to its
end for whoever sends the key again (the generation goes on, even a stateless one that
``server.on_disconnect: auto`` would otherwise cancel: a client sending a key means to
come back for it). With ``server.on_disconnect: cancel`` the client leaving cancels as
usual, and the key is forgotten with the incomplete response.

What does not belong here: the rows (``store/idempotency.py``); who the caller is
(``api/auth.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Literal

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api.errors import error_response
from parley.api.replies import MESSAGE_HEADER
from parley.api.resume import resumed
from parley.errors import (
    AuthenticationFailed,
    Conflict,
    InvalidRequest,
    ParleyError,
    PayloadTooLarge,
    PermissionDenied,
    Unprocessable,
)
from parley.store.idempotency import IdempotencyStore, Record, StoredResponse

log = logging.getLogger(__name__)

HEADER = "idempotency-key"
MESSAGE_HEADER_BYTES = MESSAGE_HEADER.encode()

METHODS = frozenset({"POST", "PATCH"})
NOT_COVERED = frozenset({"/mcp", "/mcp/", "/v1/session", "/v1/keys"})
"""``/mcp``: JSON-RPC has ids of its own. A session's or a new key's answer holds a secret
that is stored nowhere in the clear (``api/session.py``, ``api/keys.py``)."""
NOT_KEPT = frozenset({401, 403, 408, 409, 425, 429, 499})
MAX_KEY_CHARS = 255
PURGE_SECONDS = 600.0
_IN_MEMORY = 1024 * 1024
_CHUNK = 64 * 1024
_REPLAYED = (b"idempotent-replayed", b"true")


class Idempotency:
    def __init__(
        self,
        app: ASGIApp,
        *,
        ttl_seconds: float,
        max_body_bytes: int,
        max_response_bytes: int,
        cancel_on_disconnect: bool,
    ) -> None:
        self.app = app
        self.ttl = ttl_seconds
        self.max_body = max_body_bytes
        self.max_response = max_response_bytes
        self.cancel_on_disconnect = cancel_on_disconnect
        self._running: dict[tuple[str, str], Recording] = {}
        self._settling: dict[tuple[str, str], asyncio.Event] = {}
        """Keys whose row is being written or released (but for a whole response kept,
        which a retry joins): a retry waits, then looks again."""
        self._next_purge = 0.0
        self._noting: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _presented(scope)
        state = None if key is None else getattr(scope["app"].state, "parley", None)
        if key is None or state is None:
            await self.app(scope, receive, send)
            return
        try:
            caller = await state.auth.caller(HTTPConnection(scope))  # before all else
            _check(key)
            body = await _Body.read(scope, receive, self.max_body)
        except (AuthenticationFailed, PermissionDenied):
            await self.app(scope, receive, send)  # the route refuses it as usual
            return
        except ParleyError as refused:
            await error_response(refused)(scope, receive, send)
            return
        if body is None:  # the client left while sending it
            return
        try:
            ident = (caller.key_id, key)
            request = _Request(scope, body.receive(receive), receive, send, caller.owner)
            await self._answer(state.idempotency, ident, body.fingerprint, request)
        finally:
            body.close()

    async def _answer(
        self, store: IdempotencyStore, ident: tuple[str, str], fingerprint: str, request: _Request
    ) -> None:
        while True:
            settling = self._settling.get(ident)
            if settling is not None:
                await settling.wait()
                continue
            recording = self._running.get(ident)
            if recording is not None:
                if recording.fingerprint != fingerprint:
                    await request.refuse(_reused())
                    return
                if await recording.follow(request.send, request.client_receive):
                    return
                continue  # it ended before it began: look again
            recording = Recording(fingerprint)
            self._running[ident] = recording  # no await since the look: one per key
            try:
                await self._purge(store)
                held = await store.claim(*ident, fingerprint, self.ttl)
            except BaseException:
                self._forget(ident, recording)
                raise
            if held is None:
                await self._run(store, ident, recording, request)
                return
            self._forget(ident, recording)
            await _answer_held(held, fingerprint, request)
            return

    async def _run(
        self,
        store: IdempotencyStore,
        ident: tuple[str, str],
        recording: Recording,
        request: _Request,
    ) -> None:
        forward = _forwarding(request.send)

        async def recorded(message: Message) -> None:
            recording.add(message, self.max_response)
            if message["type"] == "http.response.start":
                self._note_stream(store, ident, request.scope, message)
            await forward(message)

        receive = request.app_receive if self.cancel_on_disconnect else _deaf(request.app_receive)
        try:
            await self.app(request.scope, receive, recorded)
        except asyncio.CancelledError:
            self._forget(ident, recording)  # shutting down: the row is interrupted at start
            raise
        except BaseException:
            await self._settle(store, ident, recording, None)
            raise
        await self._settle(store, ident, recording, recording.outcome(self.max_response))

    async def _settle(
        self,
        store: IdempotencyStore,
        ident: tuple[str, str],
        recording: Recording,
        kept: StoredResponse | None,
    ) -> None:
        """Record the outcome, then let this process's entry go. A retry arriving before
        the row is written must not find it still running (409 in use: on PostgreSQL a
        write takes long enough for a client to come back): it joins the recording
        when the whole response is kept, else waits for the row to be written (or to
        go) and reads it."""
        if kept is not None and recording.state == "ended":
            try:
                await _keep(store, ident, kept)
            finally:
                self._forget(ident, recording)
            return
        settled = asyncio.Event()
        self._settling[ident] = settled
        self._forget(ident, recording)
        try:
            await _keep(store, ident, kept)
        finally:
            del self._settling[ident]
            settled.set()

    def _note_stream(
        self, store: IdempotencyStore, ident: tuple[str, str], scope: Scope, start: Message
    ) -> None:
        """With other instances: the reply this request streams goes into its key's row,
        for a retry sent elsewhere to join (``_answer_held``)."""
        if not scope["app"].state.parley.cluster.shared:
            return
        for name, value in start.get("headers", ()):
            if name == MESSAGE_HEADER_BYTES:
                task = asyncio.create_task(store.streaming(*ident, value.decode("latin-1")))
                self._noting.add(task)
                task.add_done_callback(self._noting.discard)
                return

    def _forget(self, ident: tuple[str, str], recording: Recording) -> None:
        recording.close()
        if self._running.get(ident) is recording:
            del self._running[ident]

    async def _purge(self, store: IdempotencyStore) -> None:
        now = time.monotonic()
        if now >= self._next_purge:
            self._next_purge = now + PURGE_SECONDS
            await store.purge()


@dataclass(frozen=True, slots=True)
class _Request:
    scope: Scope
    app_receive: Receive
    """The body read already, then the client's messages."""
    client_receive: Receive
    send: Send
    owner: str

    async def refuse(self, error: ParleyError, *, retry: bool = False) -> None:
        response = error_response(error)
        response.headers["x-should-retry"] = "true" if retry else "false"
        await response(self.scope, self.app_receive, self.send)


class Recording:
    """A response as it is sent, for requests that join it while it runs."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.state: Literal["open", "ended", "too_large", "closed"] = "open"
        self._messages: list[Message] = []
        self._size = 0
        self._changed = asyncio.Event()

    def add(self, message: Message, limit: int) -> None:
        if self.state != "open":
            return
        if message["type"] == "http.response.body":
            self._size += len(message.get("body", b""))
            if self._size > limit:
                self.state = "too_large"
                self._notify()
                return
            if not message.get("more_body", False):
                self.state = "ended"
        elif message["type"] != "http.response.start":
            return
        self._messages.append(message)
        self._notify()

    def close(self) -> None:
        """No more messages: what has not ended now never will."""
        if self.state == "open":
            self.state = "closed"
            self._notify()

    def outcome(self, limit: int) -> StoredResponse | None:
        """The response to keep, or None when the key is to be forgotten."""
        if self.state == "too_large":
            return _stored(_too_large(limit))
        if self.state != "ended" or not self._messages:
            return None
        start = self._messages[0]
        if start["status"] >= 500 or start["status"] in NOT_KEPT:
            return None
        headers = tuple(
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in start["headers"]
        )
        body = b"".join(m.get("body", b"") for m in self._messages[1:])
        return StoredResponse(start["status"], headers, body)

    async def follow(self, send: Send, receive: Receive) -> bool:
        """Send the response from its start and on to its end (or until this client
        leaves); False when it closed before it began."""
        gone = asyncio.ensure_future(_disconnected(receive))
        sent = 0
        try:
            while True:
                for message in self._messages[sent:]:
                    await send(_marked(message) if sent == 0 else message)
                    sent += 1
                if self.state == "ended" or gone.done():
                    return True
                if self.state != "open":
                    if not sent:
                        return False
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return True
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait({changed, gone}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
        finally:
            gone.cancel()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class _Body:
    """A request body read whole (spooled to disk past 1 MiB), and its fingerprint: what
    makes two requests the same (method, path, query, content type and body, a multipart
    body's boundary aside: clients draw a new one for every attempt). It is hashed as it
    arrives, so a large upload is never hashed in one go on the event loop."""

    def __init__(self, file: IO[bytes], fingerprint: str) -> None:
        self._file = file
        self.fingerprint = fingerprint

    @classmethod
    async def read(cls, scope: Scope, receive: Receive, limit: int) -> _Body | None:
        """The body, or None when the client left while sending it."""
        hasher, normaliser = _hashers(scope)
        file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY)  # noqa: SIM115
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                file.close()
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                file.close()
                raise PayloadTooLarge(f"request body larger than {limit} bytes")
            file.write(chunk)
            normaliser.feed(chunk)
            if not message.get("more_body", False):
                normaliser.end()
                file.seek(0)
                return cls(file, hasher.hexdigest())

    def receive(self, then: Receive) -> Receive:
        """The body again, in chunks, then whatever the client sends next."""
        done = False

        async def replayed() -> Message:
            nonlocal done
            if done:
                return await then()
            chunk = self._file.read(_CHUNK)
            more = bool(self._file.read(1))
            if more:
                self._file.seek(-1, 1)
            done = not more
            return {"type": "http.request", "body": chunk, "more_body": more}

        return replayed

    def close(self) -> None:
        self._file.close()


class _Normaliser:
    """Feeds a hash with a body in which every ``marker`` reads the same, however the
    body is cut into chunks."""

    def __init__(self, hasher: hashlib._Hash, marker: bytes | None) -> None:
        self._hasher = hasher
        self._marker = marker
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        if self._marker is None:
            self._hasher.update(chunk)
            return
        parts = (self._tail + chunk).split(self._marker)
        for part in parts[:-1]:
            self._hasher.update(part)
            self._hasher.update(b"\0boundary\0")
        last = parts[-1]
        keep = len(self._marker) - 1  # the start of a marker this chunk cuts
        self._hasher.update(last[: max(0, len(last) - keep)])
        self._tail = last[max(0, len(last) - keep) :]

    def end(self) -> None:
        self._hasher.update(self._tail)
        self._tail = b""


def _hashers(scope: Scope) -> tuple[hashlib._Hash, _Normaliser]:
    """A hash of the request's method, path, query and content type, and the normaliser
    that feeds it the body."""
    content_type = HTTPConnection(scope).headers.get("content-type", "")
    kind, _, params = content_type.partition(";")
    kind = kind.strip().lower()
    boundary = _boundary(params) if kind.startswith("multipart/") else None
    head = b"\n".join(
        [
            scope["method"].encode(),
            scope["path"].encode("utf-8", "surrogateescape"),
            scope.get("query_string", b""),
            (kind if boundary else content_type.lower()).encode("latin-1", "replace"),
            b"",
        ]
    )
    hasher = hashlib.sha256(head)
    marker = b"--" + boundary.encode("latin-1", "replace") if boundary else None
    return hasher, _Normaliser(hasher, marker)


async def _answer_held(held: Record, fingerprint: str, request: _Request) -> None:
    if held.fingerprint != fingerprint:
        await request.refuse(_reused())
    elif held.response is not None:
        await _replay(held.response, request.send)
    elif held.state == "running" and held.message_id is not None:
        # streaming on another instance: joined through the reply's event log
        state = request.scope["app"].state.parley
        joined = await resumed(state, request.owner, f"{held.message_id}.0")
        await joined(request.scope, request.app_receive, request.send)
    elif held.state == "running":
        in_use = Conflict(
            "a request with this Idempotency-Key is still running; try again shortly",
            param="Idempotency-Key",
            code="idempotency_key_in_use",
            retry_after=1,
        )
        await request.refuse(in_use, retry=True)
    else:
        interrupted = Conflict(
            "the request first sent with this Idempotency-Key was cut off by a server "
            "restart; what it saved is kept (an interrupted reply shows in its "
            "conversation). Send it again with a new key to run it again",
            param="Idempotency-Key",
            code="idempotency_key_interrupted",
        )
        await request.refuse(interrupted)


async def _replay(response: StoredResponse, send: Send) -> None:
    headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in response.headers]
    await send(
        {"type": "http.response.start", "status": response.status, "headers": [*headers, _REPLAYED]}
    )
    body = response.body
    for start in range(0, max(1, len(body)), _CHUNK):
        chunk = body[start : start + _CHUNK]
        await send(
            {"type": "http.response.body", "body": chunk, "more_body": start + _CHUNK < len(body)}
        )


async def _keep(
    store: IdempotencyStore, ident: tuple[str, str], kept: StoredResponse | None
) -> None:
    try:
        if kept is None:
            await store.release(*ident)
        else:
            await store.finish(*ident, kept)
    except Exception:
        log.exception("could not keep the response of an Idempotency-Key")
        await store.release(*ident)


def _presented(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope["method"] not in METHODS or scope["path"] in NOT_COVERED:
        return None
    value: bytes | None = next((v for n, v in scope["headers"] if n == b"idempotency-key"), None)
    return None if value is None else value.decode("latin-1")


def _check(key: str) -> None:
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all("!" <= c <= "~" for c in key):
        raise InvalidRequest(
            f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} visible ASCII characters",
            param="Idempotency-Key",
            code="invalid_idempotency_key",
        )


def _boundary(params: str) -> str | None:
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip() == "boundary" and value:
            return value.strip().strip('"')
    return None


def _reused() -> Unprocessable:
    return Unprocessable(
        "this Idempotency-Key was used with another request (its method, path, query or "
        "body differ); use a new key for a new request",
        param="Idempotency-Key",
        code="idempotency_key_reused",
    )


def _too_large(limit: int) -> Conflict:
    return Conflict(
        f"the response to the request first sent with this Idempotency-Key was over "
        f"{limit} bytes and was not kept",
        param="Idempotency-Key",
        code="idempotency_response_too_large",
    )


def _stored(error: ParleyError) -> StoredResponse:
    response = error_response(error)
    headers = tuple((n.decode("latin-1"), v.decode("latin-1")) for n, v in response.raw_headers)
    return StoredResponse(
        error.status, (*headers, ("x-should-retry", "false")), bytes(response.body)
    )


def _marked(start: Message) -> Message:
    """A joined response's start, saying it is a replay."""
    if start["type"] != "http.response.start":
        return start
    return {**start, "headers": [*start["headers"], _REPLAYED]}


def _forwarding(send: Send) -> Send:
    """``send``, ignoring a client that has gone (the recording goes on without it)."""
    gone = False

    async def forward(message: Message) -> None:
        nonlocal gone
        if gone:
            return
        try:
            await send(message)
        except OSError:
            gone = True

    return forward


def _deaf(receive: Receive) -> Receive:
    """``receive`` for the app: the body, then nothing (the client leaving is not told)."""
    body_done = False

    async def deaf() -> Message:
        nonlocal body_done
        if not body_done:
            message = await receive()
            body_done = not message.get("more_body", False)
            return message
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return deaf


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
