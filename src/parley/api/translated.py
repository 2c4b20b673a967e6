"""A chat-completions response sent in another API's shapes: the bytes the chat path
writes are translated as they pass (a stream, chunk by chunk, by a ``Translator``), or
rewritten whole (a JSON answer, and any failure). Used by the Anthropic and Responses
doors (``anthropic_messages.py``, ``responses.py``), so that every behaviour of the chat
path (keepalives, cancellation on disconnect, admission) holds behind them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send


class Translator(Protocol):
    def feed(self, data: bytes) -> bytes:
        """The translation of the next bytes of the stream (cut anywhere)."""
        ...

    def close(self) -> bytes:
        """What the stream's end adds."""
        ...


Rewrite = Callable[[int, bytes], bytes]
"""(HTTP status, the whole JSON body) -> the body to send instead."""


class Translated(Response):
    """``inner`` (a chat-completions response) sent through ``translator`` when it
    streams (status 200 and a translator given), else rewritten whole by ``rewrite``."""

    def __init__(self, inner: Response, translator: Translator | None, rewrite: Rewrite) -> None:
        self.inner = inner
        self.translator = translator
        self.rewrite = rewrite
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start: Message | None = None
        buffered: list[bytes] = []
        streaming = False

        async def relay(message: Message) -> None:
            nonlocal start, streaming
            if message["type"] == "http.response.start":
                start = message
                if self.translator is not None and message["status"] == 200:
                    streaming = True
                    await send(_with_type(message, b"text/event-stream; charset=utf-8", None))
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            more = bool(message.get("more_body", False))
            if streaming:
                assert self.translator is not None
                out = self.translator.feed(message.get("body", b""))
                if not more:
                    out += self.translator.close()
                await send({"type": "http.response.body", "body": out, "more_body": more})
                return
            buffered.append(message.get("body", b""))
            if not more:
                assert start is not None
                body = self.rewrite(start["status"], b"".join(buffered))
                await send(_with_type(start, b"application/json", len(body)))
                await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.inner(scope, receive, relay)


def _with_type(start: Message, content_type: bytes, length: int | None) -> Message:
    headers = [
        (key, value)
        for key, value in start.get("headers", [])
        if key.lower() not in (b"content-type", b"content-length")
    ]
    headers.append((b"content-type", content_type))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {**start, "headers": headers}


RESTARTED = {
    "type": "api_error",
    "code": "answer_restarted",
    "message": "the answer was restarted (a retry or a fallback model) after part of it was "
    "sent, which this API cannot take back; the whole answer is kept in the conversation",
}


PROGRESS = frozenset({"restart", "tool", "status"})
"""Extension fields of progress chunks, not of the reply."""


class ChunkTranslator:
    """A ``Translator`` of the chat path's stream: its SSE frames (cut anywhere) parsed,
    each handed to the subclass: ``_chunk`` (a ``chat.completion.chunk``; ``first`` for
    the first), ``_failed`` (the error event that ends a failed stream), ``_keepalive``
    (a comment), and ``_end`` once, at ``[DONE]`` or when the stream closes after a
    chunk without one.

    A restart that drops output already shown (a retry or a fallback model after part
    of the answer went out: ``parley.restart.clear``) ends the stream as failed
    (``RESTARTED``): these APIs have no way to take back what was sent. The answer goes
    on on the server and is kept in the conversation."""

    def __init__(self) -> None:
        self._pending = b""
        self._begun = False
        self._finished = False
        self.parley: dict[str, Any] = {}
        """Parley's extension as the chunks so far told it (ids, cost, citations, pending
        approvals...): the last event carries it."""

    def feed(self, data: bytes) -> bytes:
        self._pending += data
        out: list[bytes] = []
        while b"\n\n" in self._pending:
            frame, self._pending = self._pending.split(b"\n\n", 1)
            out += self._frame(frame)
        return b"".join(out)

    def close(self) -> bytes:
        return b"".join(self._finish()) if self._begun else b""

    def _frame(self, frame: bytes) -> list[bytes]:
        if frame.startswith((b"id:", b":")) and b"\ndata:" in frame:
            # the chat path's event id (these events have none), or a keep-alive line
            # ahead of the event: its data alone is read
            frame = frame[frame.index(b"\ndata:") + 1 :]
        elif frame.startswith(b"id:"):
            frame = frame.partition(b"\n")[2]
        if frame.startswith(b":"):
            return self._keepalive(frame)
        if not frame.startswith(b"data:"):
            return []
        payload = frame[5:].strip()
        if payload == b"[DONE]":
            return self._finish()
        chunk = orjson.loads(payload)
        if self._finished:
            return []  # after a failure: nothing more goes out
        if "error" in chunk:
            self._finished = True
            return self._failed(chunk["error"] or {})
        restart = (chunk.get("parley") or {}).get("restart")
        if isinstance(restart, dict) and restart.get("clear") and self._begun:
            self._finished = True
            return self._failed(dict(RESTARTED))
        first, self._begun = not self._begun, True
        extension = chunk.get("parley")
        if isinstance(extension, dict):
            self.parley.update(
                (key, value) for key, value in extension.items() if key not in PROGRESS
            )
        return self._chunk(chunk, first)

    def _finish(self) -> list[bytes]:
        if self._finished:
            return []
        self._finished = True
        return self._end()

    def _chunk(self, chunk: dict[str, Any], first: bool) -> list[bytes]:
        raise NotImplementedError

    def _failed(self, error: dict[str, Any]) -> list[bytes]:
        raise NotImplementedError

    def _keepalive(self, comment: bytes) -> list[bytes]:
        raise NotImplementedError

    def _end(self) -> list[bytes]:
        raise NotImplementedError
