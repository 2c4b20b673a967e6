"""Coalescing streamed text for clients that ask for fewer, larger chunks.

A client sends ``stream_options: {"coalesce_ms": 40}`` (0 to 1,000; 0 or absent: every
delta goes out as it comes). Answer text and reasoning that arrive within that window
are joined into one chunk each; anything else (tool progress, the end, an error) first
flushes what is held, so order is kept and the final state always goes out. Nothing is
held longer than the window: a timer flushes a quiet stream.

What does not belong here: the chunk format (``sse.py``), saving (the generation saves
the whole reply whatever is coalesced).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal

Kind = Literal["content", "reasoning_content"]
WriteText = Callable[[Kind, str], Awaitable[None]]


class Coalescer:
    def __init__(self, interval_seconds: float, write_text: WriteText) -> None:
        self._interval = interval_seconds
        self._write_text = write_text
        self._held: list[tuple[Kind, str]] = []
        self._since = 0.0
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    async def add(self, kind: Kind, text: str) -> None:
        if not text:
            return
        async with self._lock:
            if not self._held:
                self._since = time.monotonic()
            if self._held and self._held[-1][0] == kind:
                self._held[-1] = (kind, self._held[-1][1] + text)
            else:
                self._held.append((kind, text))
            if time.monotonic() - self._since >= self._interval:
                await self._release()
            elif self._timer is None:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(self._interval, self._on_timer)

    async def flush(self) -> None:
        """Send what is held now (before any other event, and at the end)."""
        async with self._lock:
            await self._release()

    def close(self) -> None:
        """The stream ended (or its client left): no timer may fire after this."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            self._flushing.cancel()

    def _on_timer(self) -> None:
        self._timer = None
        self._flushing = asyncio.ensure_future(self._timed_flush())

    async def _timed_flush(self) -> None:
        try:
            await self.flush()
        except Exception:  # the client left: the sink's next write reports it
            self._held.clear()

    async def _release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, []
        for kind, text in held:
            await self._write_text(kind, text)
