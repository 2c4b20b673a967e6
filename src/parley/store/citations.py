"""Citations saved with assistant messages: the only SQL for them.

Rows are written once, when a reply is finished, and deleted with their message (a
foreign key) or their conversation. They keep their excerpt, so a reply's sources stay
readable after the document they came from is deleted.

What does not belong here: which chunks are cited (``conversations/citations.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, delete, select

from parley.store.database import Database
from parley.store.schema import citations


@dataclass(frozen=True, slots=True)
class Citation:
    rank: int
    """The source number the model saw ([1], [2] ...)."""
    source: Literal["context", "tool"]
    chunk_id: int | None
    document_id: str | None
    kb_id: str | None
    title: str | None
    score: float | None
    excerpt: str
    page: int | None
    section: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "source": self.source,
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "knowledge_base_id": self.kb_id,
            "title": self.title,
            "score": self.score,
            "excerpt": self.excerpt,
            "page": self.page,
            "section": self.section,
        }


class CitationStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def save(
        self, owner: str, conversation_id: str, message_id: str, items: Sequence[Citation]
    ) -> None:
        """Replace the message's citations with ``items``."""
        now = time.time()
        rows = [
            {
                "message_id": message_id,
                "conversation_id": conversation_id,
                "owner": owner,
                "source": item.source,
                "rank": item.rank,
                "chunk_id": item.chunk_id,
                "document_id": item.document_id,
                "kb_id": item.kb_id,
                "title": item.title,
                "score": item.score,
                "excerpt": item.excerpt,
                "page": item.page,
                "section": item.section,
                "created_at": now,
            }
            for item in items
        ]

        def transaction(conn: Connection) -> None:
            conn.execute(delete(citations).where(citations.c.message_id == message_id))
            if rows:
                conn.execute(citations.insert(), rows)

        await self._db.write(transaction)

    async def for_messages(
        self, owner: str, message_ids: Sequence[str]
    ) -> dict[str, list[Citation]]:
        """The citations of each message that has some, in source-number order."""
        if not message_ids:
            return {}

        def query(conn: Connection) -> dict[str, list[Citation]]:
            found: dict[str, list[Citation]] = {}
            rows = conn.execute(
                select(citations)
                .where(citations.c.owner == owner, citations.c.message_id.in_(message_ids))
                .order_by(citations.c.message_id, citations.c.rank)
            )
            for row in rows:
                r = row._mapping
                found.setdefault(r["message_id"], []).append(
                    Citation(
                        rank=r["rank"],
                        source=r["source"],
                        chunk_id=r["chunk_id"],
                        document_id=r["document_id"],
                        kb_id=r["kb_id"],
                        title=r["title"],
                        score=r["score"],
                        excerpt=r["excerpt"],
                        page=r["page"],
                        section=r["section"],
                    )
                )
            return found

        return await self._db.read(query)
