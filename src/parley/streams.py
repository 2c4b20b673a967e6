"""Reply event logs: every Server-Sent Event of a streamed reply, kept while it runs and
for ``RETAIN_SECONDS`` after, so that a client that lost its connection can come back
(with ``Last-Event-ID``, to any instance) and get the rest (``api/resume.py``).

Each event carries ``id: <message id>.<n>``, n counting from 1 in the order sent. The
log holds (n, event) and, once the reply has sent its last event, an end mark.

- ``MemoryEventLog``: one instance's, in memory.
- ``RedisEventLog``: a Redis Stream per reply (``<prefix>:events:<message id>``), entry
  id ``1-<n>``, at most ``MAX_EVENTS`` entries, expiring ``RETAIN_SECONDS`` after the
  last write. Appends are batched by one writer task per reply (a network round trip
  per chunk would slow the stream), in order; a reader blocks on ``XREAD`` for what
  comes next.

What does not belong here: which events a reply has (``api/chunk_writer.py``), who may
read a log (``api/resume.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

RETAIN_SECONDS = 600.0
"""How long a finished reply's events stay for a client to come back for them."""
MAX_EVENTS = 100_000
"""At most this many events are kept per reply (the oldest go first)."""
FOLLOW_SECONDS = 1.0
"""How long a reader waits for the next event before it looks whether to go on."""


@dataclass(frozen=True, slots=True)
class Entry:
    """An event (``n`` > 0), or the end of the reply (``event`` empty)."""

    n: int
    event: bytes

    @property
    def end(self) -> bool:
        return not self.event


class EventLog(Protocol):
    def append(self, message_id: str, n: int, event: bytes) -> None:
        """Keep event ``n`` (in order; it never waits)."""
        ...

    def end(self, message_id: str) -> None:
        """The reply sent its last event."""
        ...

    async def exists(self, message_id: str) -> bool: ...

    def read(self, message_id: str, after: int) -> AsyncIterator[Entry | None]:
        """The events after ``after``, then each as it comes, until the end mark; None
        every ``FOLLOW_SECONDS`` without one (the reader may then stop)."""
        ...

    async def close(self) -> None: ...


def split_events(frame: bytes) -> list[bytes]:
    """The events of a frame written to the stream (each ends with a blank line)."""
    if frame.count(b"\n\n") <= 1:
        return [frame]
    return [part + b"\n\n" for part in frame.split(b"\n\n") if part]


def with_id(message_id: str, n: int, event: bytes) -> bytes:
    return b"id: " + f"{message_id}.{n}".encode() + b"\n" + event


def parse_event_id(value: str) -> tuple[str, int] | None:
    """(message id, n) of a ``Last-Event-ID`` this server sent; None otherwise."""
    message_id, dot, number = value.strip().rpartition(".")
    if not dot or not message_id.startswith("msg_") or not number.isdigit():
        return None
    return message_id, int(number)


@dataclass(slots=True)
class _Reply:
    events: list[bytes] = field(default_factory=list)
    ended: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    expiry: asyncio.TimerHandle | None = None


class MemoryEventLog:
    """One instance's logs, in memory."""

    def __init__(self, retain_seconds: float = RETAIN_SECONDS) -> None:
        self._retain = retain_seconds
        self._replies: dict[str, _Reply] = {}

    def _reply(self, message_id: str) -> _Reply:
        reply = self._replies.get(message_id)
        if reply is None:
            reply = self._replies[message_id] = _Reply()
        return reply

    def append(self, message_id: str, n: int, event: bytes) -> None:
        reply = self._reply(message_id)
        if n == len(reply.events) + 1 and len(reply.events) < MAX_EVENTS:
            reply.events.append(event)
        self._changed(reply)

    def end(self, message_id: str) -> None:
        reply = self._reply(message_id)
        reply.ended = True
        self._changed(reply)
        loop = asyncio.get_running_loop()
        reply.expiry = loop.call_later(self._retain, self._replies.pop, message_id, None)

    async def exists(self, message_id: str) -> bool:
        return message_id in self._replies

    async def read(self, message_id: str, after: int) -> AsyncIterator[Entry | None]:
        reply = self._replies.get(message_id)
        if reply is None:
            return
        sent = after
        while True:
            while sent < len(reply.events):
                sent += 1
                yield Entry(sent, reply.events[sent - 1])
            if reply.ended:
                yield Entry(sent + 1, b"")
                return
            changed = reply.changed
            try:
                await asyncio.wait_for(changed.wait(), FOLLOW_SECONDS)
            except TimeoutError:
                yield None

    async def close(self) -> None:
        for reply in self._replies.values():
            if reply.expiry is not None:
                reply.expiry.cancel()
        self._replies.clear()

    @staticmethod
    def _changed(reply: _Reply) -> None:
        reply.changed.set()
        reply.changed = asyncio.Event()


class RedisEventLog:
    """Logs in Redis Streams, shared by every instance."""

    def __init__(self, redis: Redis, prefix: str, retain_seconds: float = RETAIN_SECONDS) -> None:
        self._redis = redis
        self._prefix = prefix
        self._retain = int(retain_seconds)
        self._pending: dict[str, list[tuple[int, bytes]]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}

    def _key(self, message_id: str) -> str:
        return f"{self._prefix}:events:{message_id}"

    def append(self, message_id: str, n: int, event: bytes) -> None:
        self._queue(message_id, n, event)

    def end(self, message_id: str) -> None:
        self._queue(message_id, 0, b"")

    def _queue(self, message_id: str, n: int, event: bytes) -> None:
        self._pending.setdefault(message_id, []).append((n, event))
        if message_id not in self._writers:
            self._wake[message_id] = asyncio.Event()
            task = asyncio.get_running_loop().create_task(self._write(message_id))
            self._writers[message_id] = task
        self._wake[message_id].set()

    async def _write(self, message_id: str) -> None:
        """Write the reply's queued entries, a batch per round trip, until its end."""
        key = self._key(message_id)
        last = 0
        try:
            while True:
                await self._wake[message_id].wait()
                self._wake[message_id].clear()
                batch, self._pending[message_id] = self._pending[message_id], []
                pipe = self._redis.pipeline(transaction=False)
                ended = False
                for n, event in batch:
                    if event:
                        last = n
                        pipe.xadd(key, {"e": event}, id=f"1-{n}", maxlen=MAX_EVENTS)
                    else:
                        ended = True
                        pipe.xadd(key, {"end": b"1"}, id=f"1-{last + 1}", maxlen=MAX_EVENTS)
                pipe.expire(key, self._retain)
                await pipe.execute()
                if ended:
                    return
        except Exception:
            log.exception("the events of %s could not be kept in Redis", message_id)
        finally:
            self._writers.pop(message_id, None)
            self._wake.pop(message_id, None)
            self._pending.pop(message_id, None)

    async def exists(self, message_id: str) -> bool:
        return bool(await self._redis.exists(self._key(message_id)))

    async def read(self, message_id: str, after: int) -> AsyncIterator[Entry | None]:
        key = self._key(message_id)
        cursor = f"1-{after}"
        while True:
            found: Any = await self._redis.xread(
                {key: cursor}, count=500, block=_ms(FOLLOW_SECONDS)
            )
            if not found:
                if not await self._redis.exists(key):
                    return  # expired while the reader waited
                yield None
                continue
            for entry_id, fields in found[0][1]:
                cursor = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                n = int(cursor.split("-")[1])
                if b"end" in fields:
                    yield Entry(n, b"")
                    return
                yield Entry(n, fields[b"e"])

    async def close(self) -> None:
        """Let the writers finish what they hold (briefly), then stop them."""
        writers = list(self._writers.values())
        if writers:
            await asyncio.wait(writers, timeout=2)
        for task in writers:
            task.cancel()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
