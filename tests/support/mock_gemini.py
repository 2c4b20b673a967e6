"""A mock of Google's Gemini API on loopback: ``streamGenerateContent?alt=sse`` and
``generateContent`` (under ``/v1beta`` and ``/v1``) answer scripted parts as Gemini does
(``candidates[0].content.parts``, ``finishReason``, ``usageMetadata``), and ``GET
/v1beta/models`` lists models. The requests it received are kept (``requests``,
``paths``, ``headers``). The official ``google-genai`` SDK reads it
(tests/providers/test_gemini.py), so that it speaks Gemini's wire format, not only what
Parley's adapter expects."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.loopback import Loopback


@dataclass
class GeminiReply:
    chunks: list[list[dict[str, Any]]] = field(default_factory=list)
    """Each streamed chunk's parts."""
    finish: str = "STOP"
    status: int = 200
    error: dict[str, Any] | None = None
    blocked: str | None = None
    """A ``promptFeedback.blockReason``: the prompt refused, no candidates."""


def text(*pieces: str, thoughts: tuple[str, ...] = (), finish: str = "STOP") -> GeminiReply:
    chunks = [[{"text": t, "thought": True}] for t in thoughts] + [[{"text": p}] for p in pieces]
    return GeminiReply(chunks=chunks, finish=finish)


def call(name: str, args: dict[str, Any], *, signature: str | None = None) -> GeminiReply:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
    if signature:
        part["thoughtSignature"] = signature
    return GeminiReply(chunks=[[part]])


class MockGemini:
    def __init__(self, models: list[str] | None = None) -> None:
        self.models = models or ["gemini-2.5-flash", "gemini-3-pro-preview"]
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self._replies: deque[GeminiReply] = deque()
        self.port = 0

    def queue(self, reply: GeminiReply) -> None:
        self._replies.append(reply)

    def reset(self) -> None:
        self._replies.clear()
        self.requests.clear()
        self.paths.clear()
        self.headers.clear()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MockGemini:
        app = Starlette(
            routes=[
                Route("/{version}/models", self._models, methods=["GET"]),
                Route("/{version}/models/{action:path}", self._generate, methods=["POST"]),
            ]
        )
        self._loopback = Loopback(app)
        self.port = self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._loopback.stop()

    async def _models(self, request: Request) -> Response:
        listed = [
            {"name": f"models/{m}", "supportedGenerationMethods": ["generateContent"]}
            for m in self.models
        ]
        return JSONResponse({"models": listed})

    async def _generate(self, request: Request) -> Response:
        self.requests.append(orjson.loads(await request.body()))
        self.paths.append(request.url.path + ("?" + request.url.query if request.url.query else ""))
        self.headers.append(dict(request.headers))
        reply = self._replies.popleft() if self._replies else text("(no reply scripted)")
        if reply.error is not None:
            return JSONResponse({"error": reply.error}, status_code=reply.status)
        model = request.path_params["action"].split(":")[0]
        if request.path_params["action"].endswith(":generateContent"):
            parts = [part for chunk in reply.chunks for part in chunk]
            return JSONResponse(self._chunk(model, parts, reply.finish, last=True))
        return StreamingResponse(self._stream(model, reply), media_type="text/event-stream")

    async def _stream(self, model: str, reply: GeminiReply) -> AsyncIterator[bytes]:
        if reply.blocked:
            feedback = {"promptFeedback": {"blockReason": reply.blocked}, "modelVersion": model}
            yield b"data: " + orjson.dumps(feedback) + b"\r\n\r\n"
            return
        chunks = reply.chunks or [[]]
        for n, parts in enumerate(chunks):
            last = n == len(chunks) - 1
            data = self._chunk(model, parts, reply.finish if last else None, last=last)
            yield b"data: " + orjson.dumps(data) + b"\r\n\r\n"

    @staticmethod
    def _chunk(
        model: str, parts: list[dict[str, Any]], finish: str | None, *, last: bool
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if last:
            chunk["usageMetadata"] = {
                "promptTokenCount": 12,
                "candidatesTokenCount": 5,
                "thoughtsTokenCount": 3,
                "totalTokenCount": 20,
            }
        return chunk
