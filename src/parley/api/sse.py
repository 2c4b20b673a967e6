"""Server-Sent Events out: the chunk encoder and a raw ASGI streaming response.

``ChunkEncoder`` pre-encodes everything in a chunk that does not change, so a text
delta costs one small ``orjson.dumps`` and two byte concatenations. ``EventStream``
watches for the client going away while it streams (not only when a write fails), so a
disconnect is noticed at once even while the upstream is silent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from parley.messages import Usage

# Langchain-Chatchat agent status numbers
STATUS_LLM_START = 1
STATUS_LLM_NEW_TOKEN = 2
STATUS_LLM_END = 3
STATUS_ERROR = -1

KEEPALIVE = b": ping\n\n"
DONE = b"data: [DONE]\n\n"


def usage_to_openai(usage: Usage) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_input_tokens:
        wire["prompt_tokens_details"] = {"cached_tokens": usage.cached_input_tokens}
    if usage.reasoning_tokens:
        wire["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return wire


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


class ChunkEncoder:
    """Encodes ``chat.completion.chunk`` frames for one response."""

    def __init__(
        self,
        *,
        completion_id: str,
        created: int,
        model: str,
        parley: dict[str, Any],
        message_id: str,
        include_usage: bool,
    ) -> None:
        head = orjson.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
            }
        )
        self._prefix = b"data: " + head[:-1] + b',"choices":[{"index":0,"delta":'
        self._parley = parley
        self._message_id = orjson.dumps(message_id)
        self._usage_null = b',"usage":null' if include_usage else b""
        self._head = head
        self._tails: dict[tuple[int, bytes], bytes] = {}

    def _tail(self, status: int, finish: bytes) -> bytes:
        key = (status, finish)
        tail = self._tails.get(key)
        if tail is None:
            tail = (
                b',"logprobs":null,"finish_reason":'
                + finish
                + b"}]"
                + self._usage_null
                + b',"parley":'
                + orjson.dumps(self._parley)
                + b',"status":'
                + str(status).encode()
                + b',"message_type":1,"message_id":'
                + self._message_id
                + b"}\n\n"
            )
            self._tails[key] = tail
        return tail

    def delta(self, delta: dict[str, Any], status: int = STATUS_LLM_NEW_TOKEN) -> bytes:
        return self._prefix + orjson.dumps(delta) + self._tail(status, b"null")

    def finish(self, finish_reason: str, extra: dict[str, Any] | None = None) -> bytes:
        if extra:
            self._parley = {**self._parley, **extra}
            self._tails.clear()
        return self._prefix + b"{}" + self._tail(STATUS_LLM_END, orjson.dumps(finish_reason))

    def usage(self, usage: Usage) -> bytes:
        return (
            b"data: "
            + self._head[:-1]
            + b',"choices":[],"usage":'
            + orjson.dumps(usage_to_openai(usage))
            + b',"parley":'
            + orjson.dumps(self._parley)
            + b',"message_id":'
            + self._message_id
            + b"}\n\n"
        )

    def error(self, message: str, type_: str, code: str | None) -> bytes:
        payload = {
            "error": {"message": message, "type": type_, "param": None, "code": code},
            "parley": self._parley,
            "status": STATUS_ERROR,
            "message_id": orjson.loads(self._message_id),
        }
        return b"data: " + orjson.dumps(payload) + b"\n\n"


class EventStream(Response):
    """A 200 ``text/event-stream`` response fed by an async iterator of frames.

    ``on_close(disconnected)`` runs once when streaming ends, telling whether the
    client went away first.
    """

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        on_close: Callable[[bool], None],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._frames = frames
        self._on_close = on_close
        self._raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = False
        streaming = asyncio.current_task()
        assert streaming is not None

        async def watch() -> None:
            nonlocal disconnected
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected = True
                    streaming.cancel()
                    return

        await send({"type": "http.response.start", "status": 200, "headers": self._raw_headers})
        watcher = asyncio.create_task(watch())
        try:
            async for frame in self._frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not disconnected:
                raise
            streaming.uncancel()
        except OSError:
            disconnected = True
        finally:
            watcher.cancel()
            await _close(self._frames)
            self._on_close(disconnected)


async def _close(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        await aclose()
