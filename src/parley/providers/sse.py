"""An incremental Server-Sent Events decoder for upstream streams.

Fed raw bytes in chunks of any size (a multi-byte character or a CRLF may be split
between chunks), it yields complete events as ``(event_name, data)``. It follows the
WHATWG rules: LF, CR and CRLF end lines; ``:`` starts a comment; ``data`` lines are
joined with LF; an empty line dispatches; unknown fields are ignored.

``iter_sse`` meters the work done on each piece of the body it reads (decoding, and
whatever its consumer does with each event) under the request's key
(``parley.fairness``): a fast upstream hands over hundreds of events per read, and
without a pause between them one stream would hold the event loop for the whole batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson

from parley import fairness
from parley.errors import ProviderError


class SSEDecoder:
    __slots__ = ("_buffer", "_data", "_event", "_pending_cr")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event = b""
        self._pending_cr = False

    def feed(self, chunk: bytes) -> Iterator[tuple[str, str]]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = False
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                self._pending_cr = True
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            event = self._line(buffer[start:end])
            if event is not None:
                yield event
            start = end + 1
        self._buffer = buffer[start:]

    def flush(self) -> Iterator[tuple[str, str]]:
        """End of stream: a final event without its blank line is still dispatched."""
        if self._buffer:
            event = self._line(self._buffer)
            self._buffer = b""
            if event is not None:
                yield event
        event = self._line(b"")
        if event is not None:
            yield event

    def _line(self, line: bytes) -> tuple[str, str] | None:
        if not line:
            if not self._data:
                self._event = b""
                return None
            data = b"\n".join(self._data).decode("utf-8", errors="replace")
            name = self._event.decode("utf-8", errors="replace") or "message"
            self._data = []
            self._event = b""
            return name, data
        if line[0:1] == b":":
            return None
        field, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._event = value
        return None


async def iter_sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, str]]:
    decoder = SSEDecoder()
    meter = fairness.meter()
    async for chunk in chunks:
        meter.start()
        for event in decoder.feed(chunk):
            while meter.due():  # before the consumer's work on the event, not after
                await meter.pause()
            yield event
        meter.stop()
    for event in decoder.flush():
        yield event


def json_event(data: str, provider: str) -> dict[str, Any] | None:
    """An event's data as a JSON object; None for other JSON (skipped by the adapters).
    Malformed JSON is a ``ProviderError`` (``upstream_malformed``)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ProviderError(
            f"upstream sent malformed JSON in its stream: {data[:200]!r}",
            provider=provider,
            code="upstream_malformed",
        ) from None
    return value if isinstance(value, dict) else None
