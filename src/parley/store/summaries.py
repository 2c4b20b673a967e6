"""Rolling context summaries: the only SQL for them.

A summary covers an exact prefix of a conversation's branch (``covers``: message ids,
oldest first) and replaces those messages in what the model is sent. Rows are never
changed but to mark one reverted; every summary made stays in the history.

- The *current* summary is the newest one not reverted. ``revert`` marks it reverted,
  so the one before it (if any, not reverted) is current again.
- ``save`` writes a summary only while its ``covers`` is still exactly the start of the
  conversation's current branch, checked inside the writing transaction (the branch is
  re-read there): a summary of a conversation that was edited, switched or cut while it
  was being written is dropped (``save`` returns None).
- Every read and write is scoped by ``owner``: another owner's conversation has no
  summaries and cannot get any (``LookupError``, as for a missing one).
- Deleting a conversation deletes its summaries: the foreign key cascades (SQLite runs
  with ``PRAGMA foreign_keys=ON``; see ``database.py``).

``StoredSummary`` is this layer's row type; the planner's ``SummaryRecord``
(``conversations/rolling.py``) sits above the store, so ``save`` takes anything with the
record's fields (``SummaryFields``) and ``conversations/outgoing.py`` turns rows back into
records. What does not belong here: deciding when to summarise, or what
(``conversations/rolling.py``, ``conversations/outgoing.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Connection, bindparam, select, update

from parley.store.branches import load_tree
from parley.store.database import Database
from parley.store.schema import summaries

HISTORY_LIMIT = 100
"""The most rows ``history`` returns (newest first)."""


class SummaryFields(Protocol):
    """What ``SummaryStore.save`` reads from a record (``SummaryRecord`` has it all)."""

    @property
    def id(self) -> str: ...
    @property
    def covers(self) -> tuple[str, ...]: ...
    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> int: ...
    @property
    def created_at(self) -> float: ...
    @property
    def instructions(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class StoredSummary:
    id: str
    conversation_id: str
    covers: tuple[str, ...]
    """The ids of the branch prefix it replaces, oldest first."""
    text: str
    tokens: int
    """The estimate of ``text``, counted against the context threshold."""
    instructions: str | None
    """The user's instructions, for a manual compaction."""
    model: str
    """The public name of the model that wrote it."""
    created_at: float
    reverted_at: float | None = None


class SummaryStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def current(self, owner: str, conversation_id: str) -> StoredSummary | None:
        """The newest summary not reverted (None: none, or no such conversation)."""
        found = await self.active(owner, conversation_id, limit=1)
        return found[0] if found else None

    async def active(
        self, owner: str, conversation_id: str, *, limit: int = 20
    ) -> list[StoredSummary]:
        """The summaries not reverted, newest first (the current one first)."""
        values = {"b_conversation": conversation_id, "b_owner": owner, "b_limit": limit}
        return await self._db.read(lambda conn: _rows(conn, _ACTIVE, values))

    async def history(
        self, owner: str, conversation_id: str, *, limit: int = HISTORY_LIMIT
    ) -> list[StoredSummary]:
        """Every summary, reverted ones too, newest first."""
        statement = _select(owner, conversation_id).limit(limit)
        return await self._db.read(lambda conn: _rows(conn, statement))

    async def save(
        self, owner: str, conversation_id: str, record: SummaryFields, model: str
    ) -> StoredSummary | None:
        """Save ``record`` as the current summary, written by ``model`` (a public name).

        Only while ``record.covers`` is still exactly the start of the current branch,
        checked in the writing transaction: otherwise nothing is written and the answer
        is None. Raises LookupError when the conversation is missing or someone else's,
        ValueError for an empty ``covers``.
        """
        if not record.covers:
            raise ValueError("a summary covers at least one message")
        row = StoredSummary(
            id=record.id,
            conversation_id=conversation_id,
            covers=tuple(record.covers),
            text=record.text,
            tokens=record.tokens,
            instructions=record.instructions,
            model=model,
            created_at=record.created_at,
        )

        def transaction(conn: Connection) -> StoredSummary | None:
            branch = _branch_ids(conn, owner, conversation_id)
            if tuple(branch[: len(row.covers)]) != row.covers:
                return None
            conn.execute(
                summaries.insert().values(
                    id=row.id,
                    conversation_id=conversation_id,
                    owner=owner,
                    covers=list(row.covers),
                    text=row.text,
                    tokens=row.tokens,
                    instructions=row.instructions,
                    model=row.model,
                    created_at=row.created_at,
                    reverted_at=None,
                )
            )
            return row

        return await self._db.write(transaction)

    async def revert(self, owner: str, conversation_id: str) -> StoredSummary | None:
        """Mark the current summary reverted; the answer is the summary current now (the
        newest one left not reverted), or None. Nothing to revert: nothing changes."""

        def transaction(conn: Connection) -> StoredSummary | None:
            active = _rows(
                conn,
                _select(owner, conversation_id).where(summaries.c.reverted_at.is_(None)).limit(2),
            )
            if not active:
                return None
            conn.execute(
                update(summaries)
                .where(summaries.c.id == active[0].id, summaries.c.owner == owner)
                .values(reverted_at=time.time())
            )
            return active[1] if len(active) > 1 else None

        return await self._db.write(transaction)


def _select(owner: str, conversation_id: str) -> Any:
    return (
        select(summaries)
        .where(summaries.c.conversation_id == conversation_id, summaries.c.owner == owner)
        .order_by(summaries.c.created_at.desc(), summaries.c.id.desc())
    )


_ACTIVE = (
    select(summaries)
    .where(
        summaries.c.conversation_id == bindparam("b_conversation"),
        summaries.c.owner == bindparam("b_owner"),
        summaries.c.reverted_at.is_(None),
    )
    .order_by(summaries.c.created_at.desc(), summaries.c.id.desc())
    .limit(bindparam("b_limit"))
)
"""Built once: it runs on every turn of a stored conversation."""


def _rows(
    conn: Connection, statement: Any, values: dict[str, Any] | None = None
) -> list[StoredSummary]:
    return [_summary(row._mapping) for row in conn.execute(statement, values or {}).all()]


def _summary(row: Any) -> StoredSummary:
    return StoredSummary(
        id=row["id"],
        conversation_id=row["conversation_id"],
        covers=tuple(row["covers"]),
        text=row["text"],
        tokens=row["tokens"],
        instructions=row["instructions"],
        model=row["model"],
        created_at=row["created_at"],
        reverted_at=row["reverted_at"],
    )


def _branch_ids(conn: Connection, owner: str, conversation_id: str) -> Sequence[str]:
    """The ids of the current branch, oldest first. LookupError: no such conversation."""
    tree = load_tree(conn, owner, conversation_id)
    return [row["id"] for row in tree.path_to(tree.head)]
