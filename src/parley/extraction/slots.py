"""Who may read a document now: at most ``capacity`` reads at once in all, at most
``per_owner`` of them for one owner, and background reads (knowledge ingestion) never
in the last free slot, so a chat's attachment always has one to wait for.

A read that cannot start waits in line. When a slot frees, the line is walked in order
and each waiter that may start (its owner under its share, the slot not the last for a
background read) starts: one owner's queue of documents never holds back another
owner's. A waiter gives up after its ``wait`` (``Overloaded``: 429 when its owner
already holds its share, else 503), or when it is cancelled.

What does not belong here: the processes that do the reading (``pool.py``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from parley.errors import Overloaded


@dataclass(slots=True)
class _Waiter:
    owner: str
    background: bool
    granted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Slots:
    def __init__(self, capacity: int, per_owner: int) -> None:
        self.capacity = capacity
        self.per_owner = min(per_owner, capacity)
        self.running: Counter[str] = Counter()
        self._total = 0
        self._line: list[_Waiter] = []

    @property
    def busy(self) -> int:
        return self._total

    async def acquire(self, owner: str, *, background: bool, wait: float | None) -> None:
        """Take a slot for ``owner``; wait at most ``wait`` seconds (None: as long as it
        takes). Release it with ``release(owner)``."""
        if self._may_start(owner, background):  # (every waiter in line may not start)
            self._take(owner)
            return
        waiter = _Waiter(owner, background)
        self._line.append(waiter)
        try:
            async with asyncio.timeout(wait):
                await asyncio.shield(waiter.granted)
        except BaseException as exc:
            if waiter.granted.done():  # granted as the wait ended: hand the slot on
                self.release(owner)
            else:
                self._line.remove(waiter)
                self._dispatch()
            if isinstance(exc, TimeoutError):
                raise self._refusal(owner, wait) from None
            raise

    def release(self, owner: str) -> None:
        self._total -= 1
        self.running[owner] -= 1
        if self.running[owner] <= 0:
            del self.running[owner]
        self._dispatch()

    def _may_start(self, owner: str, background: bool) -> bool:
        room = self.capacity - 1 if background and self.capacity > 1 else self.capacity
        return self._total < room and self.running[owner] < self.per_owner

    def _take(self, owner: str) -> None:
        self._total += 1
        self.running[owner] += 1

    def _dispatch(self) -> None:
        for waiter in list(self._line):
            if self._total >= self.capacity:
                return
            if self._may_start(waiter.owner, waiter.background):
                self._line.remove(waiter)
                self._take(waiter.owner)
                waiter.granted.set_result(None)

    def _refusal(self, owner: str, wait: float | None) -> Overloaded:
        if self.running[owner] >= self.per_owner:
            error = Overloaded(
                f"{self.per_owner} of your documents are being read, your most at once; "
                "try again when one is done",
                retry_after=5,
                code="too_many_documents",
            )
            error.status, error.type = 429, "rate_limit_error"
            return error
        return Overloaded(
            f"every document reader is busy and none came free within {wait:g} s; "
            "try again shortly",
            retry_after=5,
            code="documents_busy",
        )
