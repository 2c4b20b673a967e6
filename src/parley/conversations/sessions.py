"""Conversation sessions: one generation per conversation at a time (Rikkahub's rule).

A session exists while a conversation is in use in this process: it holds the
conversation's generation (prepared or running) and a reference count. A new turn for
the conversation takes the session's lock, ends the generation there (it is saved as
interrupted, its client told it was superseded) and waits for its final write, then
reads the branch and registers its own generation, all before the lock is released: two
sends can never run side by side on one conversation. ``cancel`` ends the generation on
request. With no reference and no generation a session leaves memory after
``idle_seconds``.

Sessions are per process: several server processes on one database would need a shared
lock (Redis), which this module does not provide.

What does not belong here: running a generation (``generation.py``), the turn itself
(``service.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from parley.conversations.generation import Generation
from parley.errors import Conflict, ParleyError


class Superseded(Conflict):
    code = "superseded"


class Cancelled(Conflict):
    code = "cancelled"


@dataclass(slots=True)
class Session:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    generation: Generation | None = None
    refs: int = 0
    idle: asyncio.TimerHandle | None = None


Key = tuple[str, str]


class Sessions:
    def __init__(self, idle_seconds: float = 5.0) -> None:
        self._idle_seconds = idle_seconds
        self._sessions: dict[Key, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    @asynccontextmanager
    async def turn(
        self, owner: str, conversation_id: str, *, supersede: bool = True
    ) -> AsyncIterator[Session]:
        """Hold the conversation for a new turn: the generation in progress (if any) is
        superseded and awaited on entry (without ``supersede``: Conflict instead);
        register the new one before leaving."""
        key = (owner, conversation_id)
        session = self._acquire(key)
        try:
            async with session.lock:
                running = session.generation
                if not supersede and running is not None and not running.done:
                    raise Conflict(
                        "a reply is being generated in this conversation; wait for it "
                        "or cancel it first",
                        param="conversation_id",
                        code="generation_running",
                    )
                await _end(
                    session.generation,
                    Superseded(
                        "a newer message was sent to this conversation; this reply stopped",
                        param="conversation_id",
                    ),
                )
                yield session
        finally:
            self._release(key, session)

    def attach(self, owner: str, conversation_id: str, generation: Generation) -> None:
        """``generation`` is now the conversation's (inside ``turn``, or for a new
        conversation); it holds the session until it ends."""
        key = (owner, conversation_id)
        session = self._acquire(key)
        session.generation = generation

        def ended(_: Generation) -> None:
            if session.generation is generation:
                session.generation = None
            self._release(key, session)

        generation.when_done(ended)

    def generation(self, owner: str, conversation_id: str) -> Generation | None:
        """The conversation's generation, while it runs."""
        session = self._sessions.get((owner, conversation_id))
        generation = session.generation if session is not None else None
        return None if generation is None or generation.done else generation

    async def cancel(self, owner: str, conversation_id: str) -> Generation | None:
        """End the conversation's generation, if one is running; returns it."""
        session = self._sessions.get((owner, conversation_id))
        generation = session.generation if session is not None else None
        if generation is None or generation.done:
            return None
        await _end(generation, Cancelled("the reply was cancelled", param="conversation_id"))
        return generation

    def _acquire(self, key: Key) -> Session:
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = Session()
        session.refs += 1
        if session.idle is not None:
            session.idle.cancel()
            session.idle = None
        return session

    def _release(self, key: Key, session: Session) -> None:
        session.refs -= 1
        if session.refs > 0:
            return
        loop = asyncio.get_running_loop()

        def evict() -> None:
            session.idle = None
            if session.refs <= 0 and self._sessions.get(key) is session:
                del self._sessions[key]

        session.idle = loop.call_later(self._idle_seconds, evict)


async def _end(generation: Generation | None, error: ParleyError) -> None:
    if generation is None or generation.done:
        return
    generation.abort(error)
    await generation.wait()
