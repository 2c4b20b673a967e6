"""A real HTTP mock of the Anthropic Messages API, for adapter and end-to-end tests.

``MockAnthropic`` serves a Starlette app with uvicorn on a free loopback port in a
background thread. A test queues the replies to ``POST /v1/messages``, consumed in order:
an SSE stream (``queue``, ``queue_text``, ``queue_tool_use``), an HTTP error
(``queue_error``), or a stream whose connection is cut after some events (``cut_after``).
Every request received is logged in ``requests``. ``GET /v1/models`` lists ``models``.
The event builders (``message_start``, ``text_block`` ...) compose custom streams.

What does not belong here: assertions about Parley (the tests make those).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Step = dict[str, Any] | float | bytes
"""An SSE event (its ``type`` names the event), seconds to sleep, or raw bytes to write."""

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


@dataclass(frozen=True, slots=True)
class StreamReply:
    steps: tuple[Step, ...]
    cut_after: int | None = None
    """Abort the connection (no end of the chunked body) after this many events."""
    chunk_bytes: int | None = None
    """Write each event in pieces of this many bytes (splitting multi-byte characters)."""


@dataclass(frozen=True, slots=True)
class ErrorReply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


Reply = StreamReply | ErrorReply


class ConnectionCut(Exception):
    """Raised inside the streaming body: uvicorn then drops the connection mid-body."""


# --- event builders ----------------------------------------------------------------


def encode_event(event: dict[str, Any]) -> bytes:
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def message_start(
    *,
    input_tokens: int = 10,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
    model: str = "claude-mock",
) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_mock",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_read_input_tokens": cache_read_input_tokens,
                "cache_creation_input_tokens": cache_creation_input_tokens,
                "output_tokens": 1,
            },
        },
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def text_block(index: int, text: str, *, chunk: int = 4) -> list[dict[str, Any]]:
    """A text content block streamed ``chunk`` characters per delta."""
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": t},
            }
            for t in _pieces(text, chunk)
        ),
        {"type": "content_block_stop", "index": index},
    ]


def thinking_block(
    index: int, thinking: str, signature: str, *, chunk: int = 4
) -> list[dict[str, Any]]:
    start = {"type": "thinking", "thinking": "", "signature": ""}
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "thinking_delta", "thinking": t},
            }
            for t in _pieces(thinking, chunk)
        ),
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "signature_delta", "signature": signature},
        },
        {"type": "content_block_stop", "index": index},
    ]


def tool_use_block(
    index: int, id: str, name: str, arguments: str, *, chunk: int = 8
) -> list[dict[str, Any]]:
    """A tool_use block whose JSON ``arguments`` arrive ``chunk`` characters per delta."""
    start = {"type": "tool_use", "id": id, "name": name, "input": {}}
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": j},
            }
            for j in _pieces(arguments, chunk)
        ),
        {"type": "content_block_stop", "index": index},
    ]


def message_end(stop_reason: str = "end_turn", *, output_tokens: int = 5) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def error_event(
    error_type: str = "overloaded_error", message: str = "Overloaded"
) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def error_body(error_type: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": error_type, "message": message}})


# --- the server ----------------------------------------------------------------------


class MockAnthropic:
    """``with MockAnthropic() as mock:`` serves on ``mock.base_url`` until the block ends."""

    def __init__(self, *, models: Sequence[str] = ("claude-mock",)) -> None:
        self.models = list(models)
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        host, port = self._socket.getsockname()
        self.base_url = f"http://{host}:{port}"
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        config = uvicorn.Config(
            app, log_config=None, log_level="critical", lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="mock-anthropic"
        )

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("MockAnthropic did not start")
            time.sleep(0.005)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._socket.close()

    @property
    def pending(self) -> int:
        """Queued replies not yet consumed."""
        return len(self._replies)

    # --- scripting ---

    def queue(
        self, steps: Sequence[Step], *, cut_after: int | None = None, chunk_bytes: int | None = None
    ) -> None:
        self._replies.append(StreamReply(tuple(steps), cut_after, chunk_bytes))

    def queue_text(
        self,
        text: str,
        *,
        chunk: int = 4,
        thinking: str | None = None,
        signature: str = "sig-mock",
        stop_reason: str = "end_turn",
        input_tokens: int = 10,
        output_tokens: int = 5,
        cache_read_input_tokens: int = 0,
        delay: float = 0.0,
        cut_after: int | None = None,
        chunk_bytes: int | None = None,
    ) -> None:
        """A complete text reply, optionally preceded by a signed thinking block."""
        events = [
            message_start(
                input_tokens=input_tokens, cache_read_input_tokens=cache_read_input_tokens
            ),
            {"type": "ping"},
        ]
        if thinking is not None:
            events += thinking_block(0, thinking, signature, chunk=chunk)
        events += text_block(0 if thinking is None else 1, text, chunk=chunk)
        events += message_end(stop_reason, output_tokens=output_tokens)
        self.queue(_with_delay(events, delay), cut_after=cut_after, chunk_bytes=chunk_bytes)

    def queue_tool_use(
        self,
        name: str,
        arguments: dict[str, Any] | str,
        *,
        id: str = "toolu_mock",
        text: str | None = None,
        chunk: int = 8,
        input_tokens: int = 10,
        output_tokens: int = 5,
        delay: float = 0.0,
    ) -> None:
        """A reply calling one tool, optionally after some text; stop reason ``tool_use``."""
        raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        events = [message_start(input_tokens=input_tokens)]
        if text is not None:
            events += text_block(0, text, chunk=chunk)
        events += tool_use_block(0 if text is None else 1, id, name, raw, chunk=chunk)
        events += message_end("tool_use", output_tokens=output_tokens)
        self.queue(_with_delay(events, delay))

    def queue_error(
        self,
        status: int,
        *,
        error_type: str | None = None,
        message: str = "mock error",
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> None:
        """An HTTP error before any body; ``body`` overrides the Anthropic error JSON."""
        if body is None:
            body = error_body(error_type or ERROR_TYPES.get(status, "api_error"), message)
        self._replies.append(ErrorReply(status, body, dict(headers or {})))

    # --- serving ---

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        self.requests.append(
            RecordedRequest(request.method, request.url.path, dict(request.headers), body)
        )
        route = (request.method, request.url.path)
        if route == ("GET", "/v1/models"):
            data = [{"type": "model", "id": m, "display_name": m} for m in self.models]
            return JSONResponse({"data": data, "has_more": False})
        if route != ("POST", "/v1/messages"):
            return Response(error_body("not_found_error", "no such route"), 404)
        try:
            reply = self._replies.popleft()
        except IndexError:
            return Response(error_body("api_error", "MockAnthropic: no reply queued"), 500)
        if isinstance(reply, ErrorReply):
            return Response(
                reply.body, reply.status, headers=reply.headers, media_type="application/json"
            )
        return StreamingResponse(_stream(reply), media_type="text/event-stream")


def _with_delay(events: list[dict[str, Any]], delay: float) -> list[Step]:
    if not delay:
        return list(events)
    steps: list[Step] = []
    for event in events:
        steps += [event, delay]
    return steps


def _split(data: bytes, size: int | None) -> Iterator[bytes]:
    if not size:
        yield data
        return
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def _stream(reply: StreamReply) -> AsyncIterator[bytes]:
    if reply.cut_after == 0:
        raise ConnectionCut
    sent = 0
    for step in reply.steps:
        if isinstance(step, float | int):
            await asyncio.sleep(step)
            continue
        data = step if isinstance(step, bytes) else encode_event(step)
        for piece in _split(data, reply.chunk_bytes):
            yield piece
        sent += 1
        if sent == reply.cut_after:
            raise ConnectionCut
