"""Conversation sessions: one generation per conversation at a time (Rikkahub's rule).

A session exists while a conversation is in use in this process: it holds the
conversation's generation (prepared or running) and a reference count. A new turn for
the conversation takes the session's lock, ends the generation there (it is saved as
interrupted, its client told it was superseded) and waits for its final write, then
reads the branch and registers its own generation, all before the lock is released: two
sends can never run side by side on one conversation. ``cancel`` ends the generation on
request. With no reference and no generation a session leaves memory after
``idle_seconds``.

Across instances (``parley.cluster``, Redis): a conversation's reply also holds a lease
that its instance renews while it runs. A new turn elsewhere finds the lease held,
signals that instance to supersede its reply and waits for the lease to go (at most
``lease_seconds`` and a margin: a dead instance's lease lapses) before it reads the
branch; a turn that must not supersede (approvals) gets the same Conflict as here.
``cancel`` on an instance not running the reply signals the one that is. Alone (no
Redis), every lease is granted at once and nothing is sent.

What does not belong here: running a generation (``generation.py``), the turn itself
(``service.py``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from parley.cluster import Alone, Cluster, Signal
from parley.conversations.generation import Generation
from parley.errors import Conflict, Overloaded, ParleyError

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
"""How often a turn waiting for another instance's lease looks again."""
RELEASE_SECONDS = 1.0
"""How long a turn that must not supersede (approvals) waits for a lease to go: the
reply that paused releases it just after it ends."""
WAIT_MARGIN = 2.0
"""Past ``lease_seconds``, how much longer a turn waits for a lease to go."""


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
    lease: str | None = None
    """The token of the cluster lease taken by ``turn`` for the generation to come."""


@dataclass(frozen=True, slots=True)
class Cancellation:
    """What ``Sessions.cancel`` did: whether a reply was running (here or on another
    instance) and was ended, and its message id when known."""

    cancelled: bool
    message_id: str | None = None


Key = tuple[str, str]


class Sessions:
    def __init__(self, idle_seconds: float = 5.0, cluster: Cluster | None = None) -> None:
        self._idle_seconds = idle_seconds
        self._sessions: dict[Key, Session] = {}
        self.cluster: Cluster = cluster or Alone()
        self._tasks: set[asyncio.Task[None]] = set()

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
                    raise _running()
                await _end(session.generation, _superseded())
                session.lease = await self._take(key, supersede=supersede)
                try:
                    yield session
                finally:
                    if session.lease is not None:  # no generation took the lease over
                        await self.cluster.release(key, session.lease)
                        session.lease = None
        finally:
            self._release(key, session)

    async def _take(self, key: Key, *, supersede: bool) -> str:
        """The conversation's cluster lease, for this instance's next generation: once
        the one held elsewhere is superseded and gone (or lapsed)."""
        token = f"{self.cluster.instance}|{secrets.token_hex(6)}"
        began = time.monotonic()
        deadline = began + self.cluster.lease_seconds + WAIT_MARGIN
        signalled = False
        while not await self.cluster.claim(key, token):
            if not supersede and time.monotonic() > began + RELEASE_SECONDS:
                raise _running()  # (a reply that just paused lets go of it meanwhile)
            if supersede and not signalled:
                await self.cluster.send(Signal("supersede", *key))
                signalled = True
            if time.monotonic() > deadline:
                raise Overloaded(
                    "another instance holds this conversation's reply; try again shortly",
                    retry_after=1,
                )
            await asyncio.sleep(POLL_SECONDS)
        return token

    def attach(self, owner: str, conversation_id: str, generation: Generation) -> None:
        """``generation`` is now the conversation's (inside ``turn``, or for a new
        conversation); it holds the session until it ends."""
        key = (owner, conversation_id)
        session = self._acquire(key)
        session.generation = generation
        token, session.lease = session.lease, None
        tagged = f"{token or self.cluster.instance}|{generation.message_id}"
        shared = self.cluster.shared
        holding = self._spawn(self._hold(key, token, tagged)) if shared else None

        def ended(_: Generation) -> None:
            if session.generation is generation:
                session.generation = None
            if holding is not None:
                holding.cancel()  # perhaps before it ran: the lease goes here
                self._spawn(self._let_go(key, token, tagged))
            self._release(key, session)

        generation.when_done(ended)

    async def _hold(self, key: Key, token: str | None, tagged: str) -> None:
        """The generation's cluster lease, ``tagged`` with its message id and renewed
        while it runs (cancelled when it ends). (A new conversation has no lease from
        ``turn``: it takes one here.)"""
        cluster = self.cluster
        try:
            if token is None:
                await cluster.claim(key, tagged)
            elif not await cluster.retag(key, token, tagged):
                log.warning("the lease of %s lapsed before its reply began", key[1])
            while True:
                await asyncio.sleep(cluster.lease_seconds / 3)
                if not await cluster.renew(key, tagged):
                    log.warning("the lease of %s was lost; taking it again", key[1])
                    await cluster.claim(key, tagged)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the lease of %s could not be kept", key[1])

    async def _let_go(self, key: Key, token: str | None, tagged: str) -> None:
        """The ended generation's lease, as ``turn`` took it or as ``_hold`` tagged it."""
        try:
            if token is not None:
                await self.cluster.release(key, token)
            await self.cluster.release(key, tagged)
        except Exception:
            log.warning("the lease of %s could not be let go; it lapses", key[1], exc_info=True)

    async def _until_gone(self, key: Key, held: str) -> None:
        """Until ``held`` no longer holds the lease (polled: Redis tells no one when a
        key goes), or its lease would have lapsed."""
        deadline = time.monotonic() + self.cluster.lease_seconds + WAIT_MARGIN
        while time.monotonic() < deadline:
            if await self.cluster.holder(key) != held:
                return
            await asyncio.sleep(POLL_SECONDS)

    def on_signal(self, signal: Signal) -> None:
        """Another instance asks this one to end a conversation's reply."""
        generation = self.generation(signal.owner, signal.conversation_id)
        if generation is None:
            return
        error = _superseded() if signal.kind == "supersede" else _cancelled()
        self._spawn(_end(generation, error))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def generation(self, owner: str, conversation_id: str) -> Generation | None:
        """The conversation's generation, while it runs."""
        session = self._sessions.get((owner, conversation_id))
        generation = session.generation if session is not None else None
        return None if generation is None or generation.done else generation

    async def cancel(self, owner: str, conversation_id: str) -> Cancellation:
        """End the conversation's reply, running here or on another instance (which is
        signalled; this waits for its lease to go)."""
        generation = self.generation(owner, conversation_id)
        if generation is not None:
            await _end(generation, _cancelled())
            return Cancellation(True, generation.message_id)
        key = (owner, conversation_id)
        held = await self.cluster.holder(key)
        if held is None:
            return Cancellation(False)
        await self.cluster.send(Signal("cancel", owner, conversation_id))
        await self._until_gone(key, held)
        parts = held.split("|")
        return Cancellation(True, parts[2] if len(parts) > 2 else None)

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


def _superseded() -> Superseded:
    return Superseded(
        "a newer message was sent to this conversation; this reply stopped",
        param="conversation_id",
    )


def _cancelled() -> Cancelled:
    return Cancelled("the reply was cancelled", param="conversation_id")


def _running() -> Conflict:
    return Conflict(
        "a reply is being generated in this conversation; wait for it or cancel it first",
        param="conversation_id",
        code="generation_running",
    )


async def _end(generation: Generation | None, error: ParleyError) -> None:
    if generation is None or generation.done:
        return
    generation.abort(error)
    await generation.wait()
