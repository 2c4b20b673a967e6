"""Feedback on replies (Langchain-Chatchat's ``/chat/feedback``): the only SQL for it.

One row per message: its score (0-100), its reason and when it was last given; giving
feedback again replaces it (the last write wins). Feedback is given only on the owner's
own replies: another owner's message, or a message that is not a reply, is treated as
missing. Rows are deleted with their message (a foreign key), so with its conversation.

What does not belong here: the route and its checks (``api/chatchat/feedback.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.exc import IntegrityError

from parley.store.database import Database
from parley.store.schema import message_feedback as table
from parley.store.schema import messages


@dataclass(frozen=True, slots=True)
class Feedback:
    score: int
    reason: str
    time: float
    """When it was last given (seconds since the epoch)."""

    def to_json(self) -> dict[str, Any]:
        return {"score": self.score, "reason": self.reason, "time": self.time}


class FeedbackStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def give(self, owner: str, message_id: str, score: int, reason: str) -> Feedback | None:
        """Set the feedback of the owner's reply ``message_id``; None when there is no
        such reply (missing, another owner's, or not the assistant's)."""
        now = time.time()

        def transaction(conn: Connection) -> Feedback | None:
            changed = conn.execute(
                update(table)
                .where(table.c.message_id == message_id, table.c.owner == owner)
                .values(score=score, reason=reason, updated_at=now)
            )
            if not changed.rowcount:
                if not _is_reply(conn, owner, message_id):
                    return None
                conn.execute(
                    table.insert().values(
                        message_id=message_id,
                        owner=owner,
                        score=score,
                        reason=reason,
                        created_at=now,
                        updated_at=now,
                    )
                )
            return Feedback(score, reason, now)

        try:
            return await self._db.write(transaction)
        except IntegrityError:
            # another request gave the first feedback between our update and insert (its
            # row is there now), or the message was deleted meanwhile: once more decides
            return await self._db.write(transaction)

    async def for_messages(self, owner: str, message_ids: Sequence[str]) -> dict[str, Feedback]:
        """The feedback of each of these messages that has some."""
        if not message_ids:
            return {}
        statement = select(table.c.message_id, table.c.score, table.c.reason, table.c.updated_at)
        statement = statement.where(table.c.owner == owner, table.c.message_id.in_(message_ids))

        def query(conn: Connection) -> dict[str, Feedback]:
            return {row[0]: Feedback(row[1], row[2], row[3]) for row in conn.execute(statement)}

        return await self._db.read(query)


def _is_reply(conn: Connection, owner: str, message_id: str) -> bool:
    """Whether ``message_id`` is one of the owner's assistant messages."""
    found = conn.execute(
        select(messages.c.id).where(
            messages.c.id == message_id,
            messages.c.owner == owner,
            messages.c.role == "assistant",
        )
    ).first()
    return found is not None
