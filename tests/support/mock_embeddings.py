"""A real OpenAI-compatible ``/v1/embeddings`` endpoint on loopback, for the embedder's
tests and for servers that embed through it (``knowledge.embedder: openai``).

Each test may set ``handler`` (the answer to a request body) and ``delay`` (seconds
before answering, or a function of the request body giving them); ``requests`` and
``headers`` are what it received.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.loopback import Loopback

Handler = Callable[[dict[str, Any]], Response]


def good_answer(body: dict[str, Any], width: int = 8, *, honour_format: bool = True) -> Response:
    """Deterministic vectors (not unit length), listed in reverse order of index: base64
    float32 when ``encoding_format`` asks for it (as OpenAI does), else lists of numbers."""
    base64_wanted = honour_format and body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(body["input"]):
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
        vector = np.random.default_rng(seed).normal(size=width) * 3
        embedding: Any = (
            base64.b64encode(vector.astype("<f4").tobytes()).decode()
            if base64_wanted
            else vector.tolist()
        )
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    return JSONResponse({"object": "list", "model": body["model"], "data": data[::-1], "usage": {}})


class Endpoint:
    """``POST /v1/embeddings`` on loopback; each test sets ``handler``."""

    def __init__(self) -> None:
        self.handler: Handler = good_answer
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.delay: float | Callable[[dict[str, Any]], float] = 0.0
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _embeddings(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        delay = self.delay(body) if callable(self.delay) else self.delay
        if delay:
            await asyncio.sleep(delay)
        return self.handler(body)

    def __enter__(self) -> Endpoint:
        app = Starlette(routes=[Route("/v1/embeddings", self._embeddings, methods=["POST"])])
        self._loopback = Loopback(app)
        self.port = self._loopback.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._loopback.stop()
