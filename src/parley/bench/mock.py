"""The benchmark's mock upstream: an OpenAI-compatible server built to never be the bottleneck.

A raw asyncio protocol (no framework): it reads a request, and answers
``POST /v1/chat/completions`` with pre-encoded chunks, streamed with chunked transfer
encoding at a set interval or as fast as the socket takes them, or with one JSON body
when the request did not ask to stream. ``GET /v1/models`` lists one model;
``POST /_mock`` sets the shape of later replies (``chunks``, ``interval``); ``GET
/_mock`` reports how many requests were served.

Every content chunk is ``"t<i> "`` plus multi-byte text, so a client can check order,
loss and UTF-8 handling of every frame.

Run alone: ``python -m parley.bench.mock --port 9100``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any

import orjson

MODEL = "bench-model"
PIECE = "é世"  # multi-byte text in every chunk


def content(index: int) -> str:
    return f"t{index}{PIECE} "


def expected_text(chunks: int) -> str:
    return "".join(content(i) for i in range(chunks))


class Shape:
    """What the next replies look like (shared by all connections)."""

    def __init__(self, chunks: int = 20, interval: float = 0.0) -> None:
        self.served = 0
        self.set(chunks, interval)

    def set(self, chunks: int, interval: float) -> None:
        self.chunks = chunks
        self.interval = interval
        self.frames = _encode_frames(chunks)
        self.json_body = _encode_json(chunks)


def _frame(payload: bytes) -> bytes:
    data = b"data: " + payload + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _encode_frames(chunks: int) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return orjson.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    usage = orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": chunks, "total_tokens": 9 + chunks},
        }
    )
    frames = [_frame(chunk({"role": "assistant", "content": ""}))]
    frames += [_frame(chunk({"content": content(i)})) for i in range(chunks)]
    # the finish, the usage and [DONE] go out together, as real upstreams send them
    frames.append(_frame(chunk({}, "stop")) + _frame(usage) + _frame(b"[DONE]") + b"0\r\n\r\n")
    return frames


def _encode_json(chunks: int) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": expected_text(chunks)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 9, "completion_tokens": chunks, "total_tokens": 9 + chunks},
        }
    )


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)


def _json_response(body: bytes, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


class MockProtocol(asyncio.Protocol):
    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.paused: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()
        self.transport = None

    def pause_writing(self) -> None:
        self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.paused is not None and not self.paused.done():
            self.paused.set_result(None)
        self.paused = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.task is None or self.task.done():
            self._next_request()

    def _next_request(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if len(self.buffer) < end + 4 + length:
            return
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        method, path, _ = head.split(" ", 2)
        self.task = asyncio.ensure_future(self._answer(method, path, body))

    async def _answer(self, method: str, path: str, body: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        shape = self.shape
        if path.endswith("/chat/completions") and method == "POST":
            shape.served += 1
            request = orjson.loads(body) if body else {}
            if request.get("stream"):
                transport.write(_STREAM_HEAD)
                frames = shape.frames
                interval = shape.interval
                start = time.monotonic()
                for index, frame in enumerate(frames):
                    if interval and index > 0:
                        # a fixed schedule: lateness does not accumulate
                        delay = start + index * interval - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                    if self.transport is None:
                        return
                    transport.write(frame)
                    if self.paused is not None:
                        await self.paused
            else:
                transport.write(_json_response(shape.json_body))
        elif path.endswith("/models"):
            transport.write(_json_response(b'{"object":"list","data":[{"id":"bench-model"}]}'))
        elif path == "/_mock" and method == "POST":
            config = orjson.loads(body)
            shape.set(int(config.get("chunks", shape.chunks)), float(config.get("interval", 0)))
            transport.write(_json_response(b'{"ok":true}'))
        elif path == "/_mock":
            transport.write(_json_response(orjson.dumps({"served": shape.served})))
        else:
            transport.write(_json_response(b'{"error":{"message":"not found"}}', "404 Not Found"))
        if self.buffer:
            self._next_request()


def run_fast(main: Coroutine[Any, Any, None]) -> None:
    """asyncio.run, on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


async def serve(host: str, port: int, shape: Shape) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: MockProtocol(shape), host, port, backlog=4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.0)
    args = parser.parse_args()

    async def run() -> None:
        server = await serve(args.host, args.port, Shape(args.chunks, args.interval))
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        run_fast(run())


if __name__ == "__main__":
    main()
