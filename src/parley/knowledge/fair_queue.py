"""The order of indexing: documents taken round-robin across owners, in upload order
within each owner, and a started document a slice at a time.

Each owner has a line of documents not yet started (oldest first) and the documents it
has started. A started document is worked on a slice at a time (``indexing.py``: one
batch of chunks embedded and written) and comes back here between slices. ``take``
hands out the next turn, to the first owner in the rotation that has one, and sends that
owner to the back of the rotation: an owner's backlog, a thousand documents or one of
half a million chunks, delays another owner's next document by at most one turn per
worker. A turn is a slice of a started document (its owner's oldest first) or the start
of the owner's next document.

Bounds, so that what is in memory stays small: an owner has at most ``per_owner``
documents started at once and all owners together at most ``started``; an owner at a
bound keeps its place in the rotation until it has a turn it may take. A started
document that is not ready for its next slice (it is being read and chunked) is not
offered until ``resume`` hands it back.

Only ids and jobs are kept here: the queue itself is the ``kb_documents`` table, and
after a restart ``Ingestor.start`` fills this again from it, oldest first.

What does not belong here: what a turn does (``ingest.py``, ``indexing.py``), the
bound on queued documents (``store/kb_documents.py``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

J = TypeVar("J")


@dataclass(frozen=True, slots=True)
class Start:
    """Start the owner's next document (it counts as started from now)."""

    owner: str
    document_id: str


@dataclass(frozen=True, slots=True)
class Resume(Generic[J]):
    """Work one slice of a started document."""

    owner: str
    job: J


Turn = Start | Resume[J]


@dataclass(slots=True)
class _Line(Generic[J]):
    waiting: deque[str] = field(default_factory=deque)
    """Documents not started, oldest first."""
    ready: deque[J] = field(default_factory=deque)
    """Started documents ready for their next slice, oldest first."""
    started: int = 0
    """Started and not finished: being prepared, ready, or in a slice."""


class FairQueue(Generic[J]):
    def __init__(self, *, per_owner: int, started: int) -> None:
        if per_owner < 1 or started < 1:
            raise ValueError("per_owner and started must be positive")
        self._per_owner = per_owner
        self._limit = started
        self._started = 0
        self._lines: OrderedDict[str, _Line[J]] = OrderedDict()
        """Owners with anything queued or started, in the rotation's order."""
        self._changed = asyncio.Event()
        self.idle = asyncio.Event()
        """Set while nothing is queued or started."""
        self.idle.set()

    def add(self, owner: str, document_id: str) -> None:
        """Queue a document at the back of its owner's line."""
        self._line(owner).waiting.append(document_id)
        self._wake()

    def resume(self, owner: str, job: J) -> None:
        """A started document is ready for its next slice (before the owner's later ones)."""
        self._line(owner).ready.appendleft(job)
        self._wake()

    def finished(self, owner: str) -> None:
        """A started document ended (indexed, failed, stopped, or never started)."""
        line = self._lines[owner]
        line.started -= 1
        self._started -= 1
        if not (line.waiting or line.ready or line.started):
            del self._lines[owner]
        self._wake()

    async def take(self) -> Start | Resume[J]:
        """The next turn; waits until there is one."""
        while True:
            turn = self._next()
            if turn is not None:
                return turn
            self._changed.clear()
            await self._changed.wait()

    def queued(self, owner: str) -> int:
        """Documents of the owner not started yet."""
        line = self._lines.get(owner)
        return len(line.waiting) if line is not None else 0

    def _next(self) -> Start | Resume[J] | None:
        for owner, line in self._lines.items():
            if line.ready:
                self._lines.move_to_end(owner)
                return Resume(owner, line.ready.popleft())
            if line.waiting and line.started < self._per_owner and self._started < self._limit:
                self._lines.move_to_end(owner)
                line.started += 1
                self._started += 1
                return Start(owner, line.waiting.popleft())
        return None

    def _line(self, owner: str) -> _Line[J]:
        line = self._lines.get(owner)
        if line is None:
            line = self._lines[owner] = _Line()
        return line

    def _wake(self) -> None:
        self._changed.set()
        if self._lines:
            self.idle.clear()
        else:
            self.idle.set()
