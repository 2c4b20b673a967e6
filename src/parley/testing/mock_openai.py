"""A real OpenAI-compatible upstream for tests: an HTTP server on loopback, scripted per test.

    with MockOpenAI() as upstream:          # serves http://127.0.0.1:<port>/v1
        upstream.queue_text("Hello", " there")
        ...                                 # point a provider at upstream.base_url

Tests queue replies (``queue_text``, ``queue_tool_calls``, ``queue_error``, ``queue_raw``)
and read what the server received (``requests``). Each reply streams pre-encoded SSE
bytes exactly as given, so a test can split frames at any byte, cut the connection,
or stay silent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from parley.testing.live import LiveServer


@dataclass
class Reply:
    frames: list[bytes] = field(default_factory=list)
    delay: float = 0.0
    """Seconds between frames."""
    first_delay: float = 0.0
    """Seconds before the first frame (or before the error response)."""
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    """Drop the connection (no clean end) after this many frames."""
    stall_after: int | None = None
    """Go silent for ``stall_seconds`` after this many frames."""
    stall_seconds: float = 0.0


class _Cut(Exception):
    pass


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "mock-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    return f"data: {payload}\n\n".encode()


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "mock-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def text_frames(
    pieces: list[str],
    *,
    finish: str = "stop",
    prompt_tokens: int = 11,
    reasoning: list[str] | None = None,
    done: bool = True,
) -> list[bytes]:
    frames = [sse(chunk({"role": "assistant", "content": ""}))]
    frames += [sse(chunk({"reasoning_content": r})) for r in reasoning or []]
    frames += [sse(chunk({"content": p})) for p in pieces]
    frames.append(sse(chunk({}, finish)))
    frames.append(sse(usage(prompt_tokens, len(pieces))))
    if done:
        frames.append(b"data: [DONE]\n\n")
    return frames


class MockOpenAI:
    def __init__(self, models: list[str] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.models = models or ["mock-model", "mock-large"]
        self.connections_closed = 0
        self._replies: deque[Reply] = deque()
        self._routed: list[tuple[str, Reply]] = []
        self.fallback: Reply | None = None
        """What answers when nothing is queued (None: a 500 that says so)."""
        self.refused_fields: set[str] = set()
        """Request fields answered with OpenAI's 400 ``unsupported_parameter`` (as its
        reasoning models answer ``max_tokens``)."""
        self.port = 0

    # --- scripting ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget queued replies and received requests."""
        self._replies.clear()
        self._routed.clear()
        self.requests.clear()
        self.headers.clear()
        self.refused_fields.clear()

    def queue(self, reply: Reply) -> None:
        self._replies.append(reply)

    def route_text(self, needle: str, *pieces: str) -> None:
        """Answer the next request whose body contains ``needle`` with this text (before
        the queue: for calls that race, such as a title and suggestions)."""
        self._routed.append((needle, Reply(frames=text_frames(list(pieces)))))

    def queue_text(self, *pieces: str, delay: float = 0.0, **kwargs: Any) -> None:
        self.queue(Reply(frames=text_frames(list(pieces), **kwargs), delay=delay))

    def queue_tool_calls(self, calls: list[tuple[str, str, str]], *, split: int = 7) -> None:
        """Stream tool calls (id, name, arguments), the arguments in pieces of ``split``."""
        frames = [sse(chunk({"role": "assistant", "content": None}))]
        for index, (call_id, name, arguments) in enumerate(calls):
            first = {"index": index, "id": call_id, "type": "function"}
            first["function"] = {"name": name, "arguments": ""}
            frames.append(sse(chunk({"tool_calls": [first]})))
            for start in range(0, len(arguments), split):
                piece = {
                    "index": index,
                    "function": {"arguments": arguments[start : start + split]},
                }
                frames.append(sse(chunk({"tool_calls": [piece]})))
        frames.append(sse(chunk({}, "tool_calls")))
        frames.append(sse(usage(20, 9)))
        frames.append(b"data: [DONE]\n\n")
        self.queue(Reply(frames=frames))

    def queue_error(
        self, status: int, message: str = "mock failure", headers: dict[str, str] | None = None
    ) -> None:
        body = orjson.dumps({"error": {"message": message, "type": "mock", "code": None}})
        self.queue(Reply(status=status, body=body, headers=headers or {}))

    def queue_raw(self, frames: list[bytes], **kwargs: Any) -> None:
        self.queue(Reply(frames=frames, **kwargs))

    # --- server -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> MockOpenAI:
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        self._server = LiveServer(app)
        self.port = self._server.start().port
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(timeout=10)

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        )

    async def _chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        refused = sorted(self.refused_fields & set(body))
        if refused:
            error = {
                "message": f"Unsupported parameter: '{refused[0]}' is not supported with "
                "this model.",
                "type": "invalid_request_error",
                "param": refused[0],
                "code": "unsupported_parameter",
            }
            return JSONResponse({"error": error}, status_code=400)
        raw = orjson.dumps(body).decode()
        routed = next((r for r in self._routed if r[0] in raw), None)
        if routed is not None:
            self._routed.remove(routed)
            self._replies.appendleft(routed[1])
        if not self._replies and self.fallback is None:
            return JSONResponse({"error": {"message": "no reply scripted"}}, status_code=500)
        reply = self._replies.popleft() if self._replies else self.fallback
        assert reply is not None
        if reply.first_delay and reply.status != 200:
            await asyncio.sleep(reply.first_delay)
        if reply.status != 200:
            return Response(
                reply.body,
                status_code=reply.status,
                headers=reply.headers,
                media_type="application/json",
            )
        if not body.get("stream"):
            return StreamingResponse(self._whole(reply), media_type="application/json")
        return StreamingResponse(self._frames(reply), media_type="text/event-stream")

    async def _whole(self, reply: Reply) -> AsyncIterator[bytes]:
        """A non-streaming request: the same script, as one JSON body at the end."""
        try:
            await asyncio.sleep(reply.first_delay + reply.delay * len(reply.frames))
            if reply.cut_after is not None:
                raise _Cut()
            yield collapse(reply.frames)
        finally:
            self.connections_closed += 1

    async def _frames(self, reply: Reply) -> AsyncIterator[bytes]:
        try:
            if reply.first_delay:
                await asyncio.sleep(reply.first_delay)
            for index, frame in enumerate(reply.frames):
                if reply.cut_after is not None and index >= reply.cut_after:
                    raise _Cut()
                if index and reply.delay:
                    await asyncio.sleep(reply.delay)
                if index == reply.stall_after:
                    await asyncio.sleep(reply.stall_seconds)
                yield frame
        finally:
            self.connections_closed += 1


def collapse(frames: list[bytes]) -> bytes:
    """The chat.completion a non-streaming request gets for the same scripted stream.
    Frames that do not parse come back as they are (a garbage reply stays garbage)."""
    raw = b"".join(frames).replace(b"\r\n", b"\n")
    content, reasoning, finish, usage_seen = "", "", None, None
    calls: dict[int, dict[str, Any]] = {}
    logprobs: list[Any] = []
    try:
        for block in raw.split(b"\n\n"):
            data = b"".join(
                line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")
            )
            if not data or data == b"[DONE]":
                continue
            chunk_ = orjson.loads(data)
            usage_seen = chunk_.get("usage") or usage_seen
            for choice in chunk_.get("choices") or ():
                delta = choice.get("delta") or {}
                content += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or ""
                finish = choice.get("finish_reason") or finish
                logprobs += (choice.get("logprobs") or {}).get("content") or ()
                for call in delta.get("tool_calls") or ():
                    entry = calls.setdefault(
                        len(calls) if call.get("id") and call["index"] in calls else call["index"],
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    entry["id"] += call.get("id") or ""
                    function = call.get("function") or {}
                    entry["function"]["name"] += function.get("name") or ""
                    entry["function"]["arguments"] += function.get("arguments") or ""
    except (orjson.JSONDecodeError, AttributeError, KeyError):
        return raw
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return orjson.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 1,
            "model": "mock-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish,
                    **({"logprobs": {"content": logprobs, "refusal": None}} if logprobs else {}),
                }
            ],
            **({"usage": usage_seen} if usage_seen else {}),
        }
    )


def split_every(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
