"""The load generator: a small HTTP/1.1 client that times and checks every streamed frame.

Raw asyncio streams with keep-alive, so the client costs little next to the servers it
measures. For a streamed reply it records the time to the first content frame, the
gaps between content frames, and whether the frames were exactly the mock's: every
``t<i>`` in order, multi-byte text intact, the usage chunk when asked for, ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson

from parley.bench.mock import content


@dataclass(slots=True)
class Result:
    status: int = 0
    ttft: float | None = None
    total: float = 0.0
    gaps: list[float] = field(default_factory=list)
    frames: int = 0
    valid: bool = False
    error: str | None = None
    new_connection: bool = False

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.valid


class Connection:
    """One keep-alive connection; requests on it run one after another."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.opened = 0

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._writer.is_closing():
            self.opened += 1
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 20
            )
        return self._reader, self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def chat(
        self,
        body: bytes,
        *,
        stream: bool,
        chunks: int,
        path: str = "/v1/chat/completions",
        headers: str = "authorization: Bearer bench\r\n",
        include_usage: bool = True,
    ) -> Result:
        result = Result()
        start = time.perf_counter()
        opened = self.opened
        try:
            reader, writer = await self._open()
            result.new_connection = self.opened > opened
            writer.write(
                (
                    f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\n"
                    f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
                    f"{headers}\r\n"
                ).encode()
                + body
            )
            status, response_headers = await _read_head(reader)
            result.status = status
            if response_headers.get("transfer-encoding") == "chunked":
                body_bytes = await _read_chunked(
                    reader, result, start, stream, chunks, include_usage
                )
                if not stream and status == 200:
                    reply = orjson.loads(body_bytes)
                    text = reply["choices"][0]["message"]["content"]
                    result.ttft = time.perf_counter() - start
                    result.valid = text == "".join(content(i) for i in range(chunks))
            else:
                length = int(response_headers.get("content-length", "0"))
                data = await reader.readexactly(length)
                result.ttft = time.perf_counter() - start
                if status == 200:
                    reply = orjson.loads(data)
                    text = reply["choices"][0]["message"]["content"]
                    result.valid = text == "".join(content(i) for i in range(chunks))
            if response_headers.get("connection", "").lower() == "close":
                self.close()
        except (OSError, asyncio.IncompleteReadError, ValueError, KeyError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"[:200]
            self.close()
        result.total = time.perf_counter() - start
        return result


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _read_chunked(
    reader: asyncio.StreamReader,
    result: Result,
    start: float,
    stream: bool,
    chunks: int,
    include_usage: bool,
) -> bytes:
    """Read a chunked body; a stream's frames are checked as they come. Returns the body."""
    raw = bytearray()
    buffer = b""
    expected = 0
    last: float | None = None
    usage_seen = False
    done = False
    broken = False
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            break
        data = await reader.readexactly(size + 2)
        now = time.perf_counter()
        if not stream:
            raw += data[:-2]
            continue
        buffer += data[:-2]
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            if not frame.startswith(b"data: ") and b"\ndata: " in frame:
                frame = frame[frame.index(b"\ndata: ") + 1 :]  # after an id or a ping line
            if not frame.startswith(b"data: "):
                continue  # keep-alive comments
            payload = frame[6:]
            result.frames += 1
            if payload == b"[DONE]":
                done = True
                continue
            if done:
                broken = True
            message = orjson.loads(payload)
            if "error" in message:
                result.error = str(message["error"])[:200]
                broken = True
                continue
            if message.get("usage"):
                usage_seen = True  # OpenAI sends it with no choices, LiteLLM with an empty delta
            for choice in message.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if not text:
                    continue
                if text != content(expected):
                    broken = True
                expected += 1
                if result.ttft is None:
                    result.ttft = now - start
                elif last is not None:
                    result.gaps.append(now - last)
                last = now
    if stream:
        result.valid = (
            not broken and done and expected == chunks and (usage_seen or not include_usage)
        )
    return bytes(raw)


def request_body(model: str, *, stream: bool, extra: dict[str, object] | None = None) -> bytes:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": "Count for me, please."}],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra or {})
    return orjson.dumps(body)


async def closed_loop(
    make: Callable[[Connection], Awaitable[Result]],
    host: str,
    port: int,
    *,
    concurrency: int,
    duration: float | None = None,
    requests: int | None = None,
) -> list[Result]:
    """``concurrency`` workers, each sending one request after another on its connection."""
    results: list[Result] = []
    deadline = time.perf_counter() + duration if duration is not None else None
    remaining = [requests if requests is not None else 1 << 60]

    async def worker() -> None:
        connection = Connection(host, port)
        try:
            while remaining[0] > 0 and (deadline is None or time.perf_counter() < deadline):
                remaining[0] -= 1
                results.append(await make(connection))
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


async def open_loop(
    make: Callable[[Connection], Awaitable[Result]],
    host: str,
    port: int,
    *,
    rate: float,
    duration: float,
    max_in_flight: int = 4000,
) -> tuple[list[Result], int]:
    """Start requests at a fixed rate whatever the server does. Returns (results, not sent)."""
    idle: list[Connection] = []
    results: list[Result] = []
    tasks: set[asyncio.Task[None]] = set()
    skipped = 0

    async def one() -> None:
        connection = idle.pop() if idle else Connection(host, port)
        results.append(await make(connection))
        idle.append(connection)

    start = time.perf_counter()
    count = int(rate * duration)
    for index in range(count):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(tasks) >= max_in_flight:
            skipped += 1
            continue
        task = asyncio.ensure_future(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    for connection in idle:
        connection.close()
    return results, skipped


async def hold_streams(
    host: str,
    port: int,
    body: bytes,
    *,
    count: int,
    chunks: int,
    opened: asyncio.Event,
    headers: str,
) -> list[Result]:
    """Open ``count`` streams at once (for memory per open stream)."""
    connections = [Connection(host, port) for _ in range(count)]
    tasks = [
        asyncio.ensure_future(c.chat(body, stream=True, chunks=chunks, headers=headers))
        for c in connections
    ]
    await asyncio.sleep(0)
    opened.set()
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for connection in connections:
            with contextlib.suppress(Exception):
                connection.close()
