"""A chat-completions response sent in another API's shapes: the bytes the chat path
writes are translated as they pass (a stream, chunk by chunk, by a ``Translator``), or
rewritten whole (a JSON answer, and any failure). Used by the Anthropic and Responses
doors (``anthropic_messages.py``, ``responses.py``), so that every behaviour of the chat
path (keepalives, cancellation on disconnect, admission) holds behind them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

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
