"""Conversation metadata: titles (generated or the user's) and follow-up suggestions.

The only SQL for them. Each public method is one transaction, scoped by ``owner``:
another owner's conversation is missing (``LookupError``), like one that does not exist.

The ``meta`` JSON column is shared with other features (``forked_from``, future keys):
every write here reads it, changes its own keys and writes the rest back unchanged,
inside the same transaction. Keys used here:

- ``title_provisional`` (``true``): the title was set by the server from the first user
  line and may be replaced by a generated one. Absent once a title is generated or the
  user renames the conversation.
- ``suggestions``: ``{"message_id": str, "items": [str, ...], "created_at": float}``,
  follow-ups for the branch whose head was ``message_id``; shown only while the head is
  still that message.

Generated titles and suggestions are written only if the conversation is still as the
generator saw it (the re-read happens in the writing transaction): a user's rename made
meanwhile wins, and suggestions for a branch that has moved on are dropped.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, select, update

from parley.store.database import Database
from parley.store.schema import conversations

TITLE_PROVISIONAL = "title_provisional"
SUGGESTIONS = "suggestions"


class ConversationMeta:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def title_state(self, owner: str, conversation_id: str) -> tuple[str | None, bool]:
        """(title, provisional). LookupError: no such conversation."""

        def query(conn: Connection) -> tuple[str | None, bool]:
            title, meta, _ = _row(conn, owner, conversation_id)
            return title, meta.get(TITLE_PROVISIONAL) is True

        return await self._db.read(query)

    async def set_generated_title(self, owner: str, conversation_id: str, title: str) -> bool:
        """Save a generated title if the title is still blank or provisional; returns
        whether it was saved. LookupError: no such conversation."""

        def transaction(conn: Connection) -> bool:
            current, meta, _ = _row(conn, owner, conversation_id)
            blank = current is None or not current.strip()
            if not blank and meta.get(TITLE_PROVISIONAL) is not True:
                return False
            meta.pop(TITLE_PROVISIONAL, None)
            _write(conn, owner, conversation_id, title=title, meta=meta, touch=True)
            return True

        return await self._db.write(transaction)

    async def set_title(self, owner: str, conversation_id: str, title: str) -> None:
        """The user's rename: it is final (a generated title never replaces it).
        LookupError: no such conversation."""

        def transaction(conn: Connection) -> None:
            _, meta, _ = _row(conn, owner, conversation_id)
            meta.pop(TITLE_PROVISIONAL, None)
            _write(conn, owner, conversation_id, title=title, meta=meta, touch=True)

        await self._db.write(transaction)

    async def set_suggestions(
        self, owner: str, conversation_id: str, message_id: str, suggestions: list[str]
    ) -> bool:
        """Save follow-ups for the branch ending at ``message_id`` if that is still the
        head; returns whether they were saved. LookupError: no such conversation."""

        def transaction(conn: Connection) -> bool:
            _, meta, head_id = _row(conn, owner, conversation_id)
            if head_id != message_id:
                return False
            meta[SUGGESTIONS] = {
                "message_id": message_id,
                "items": list(suggestions),
                "created_at": time.time(),
            }
            _write(conn, owner, conversation_id, meta=meta, touch=False)
            return True

        return await self._db.write(transaction)

    async def suggestions(self, owner: str, conversation_id: str) -> list[str]:
        """The saved follow-ups while the head is still the message they were made for,
        else []. LookupError: no such conversation."""

        def query(conn: Connection) -> list[str]:
            _, meta, head_id = _row(conn, owner, conversation_id)
            saved = meta.get(SUGGESTIONS)
            if not isinstance(saved, dict) or head_id is None:
                return []
            if saved.get("message_id") != head_id:
                return []
            items = saved.get("items")
            if not isinstance(items, list):
                return []
            return [item for item in items if isinstance(item, str)]

        return await self._db.read(query)


def _row(
    conn: Connection, owner: str, conversation_id: str
) -> tuple[str | None, dict[str, Any], str | None]:
    """(title, a copy of meta as a dict, head_id). LookupError when missing."""
    row = conn.execute(
        select(conversations.c.title, conversations.c.meta, conversations.c.head_id).where(
            conversations.c.id == conversation_id, conversations.c.owner == owner
        )
    ).first()
    if row is None:
        raise LookupError(conversation_id)
    meta = row.meta
    return row.title, dict(meta) if isinstance(meta, dict) else {}, row.head_id


def _write(
    conn: Connection,
    owner: str,
    conversation_id: str,
    *,
    meta: dict[str, Any],
    touch: bool,
    title: str | None = None,
) -> None:
    values: dict[str, Any] = {"meta": meta or None}
    if title is not None:
        values["title"] = title
    if touch:
        values["updated_at"] = time.time()
    conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.owner == owner)
        .values(values)
    )
