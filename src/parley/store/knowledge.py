"""Knowledge bases: the only SQL for ``knowledge_bases``; ``KnowledgeStore`` also
carries the documents' operations (``kb_documents.py``, mixed in).

Each public method is one transaction scoped by ``owner``: another owner's knowledge
base or document is missing (``LookupError``), exactly like one that does not exist. A
knowledge base is named by its id (``kb_...``) or its name.

Every change to what is searchable (a document ready, a document or base deleted)
bumps the base's ``version``, which is how every instance knows its in-memory vectors
are stale. A base being deleted is marked ``deleting`` and renamed to its id (names
never start with ``kb_``): hidden from every query at once, its name free again, while
its chunks are purged in the background.

A base with an ``expires_at`` is temporary (Langchain-Chatchat's file chat,
``knowledge/temporary.py``): left out of ``bases`` (the listings), found by id like any
other, and deleted once expired by whoever sweeps (``expired``).

What does not belong here: files on disk and the ingestion queue (``knowledge/``),
chunks (``knowledge/index.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, and_, delete, false, func, or_, select, true, update
from sqlalchemy.exc import IntegrityError

from parley.errors import Conflict
from parley.ids import new_id
from parley.store.database import Database
from parley.store.kb_documents import Document, DocumentOps, DocumentStatus, _bump
from parley.store.schema import kb_documents, knowledge_bases

__all__ = ["Document", "DocumentStatus", "KnowledgeBase", "KnowledgeStore"]

ID_PREFIX = "kb_"
_LIVE = knowledge_bases.c.deleting == false()


@dataclass(frozen=True, slots=True)
class KnowledgeBase:
    id: str
    owner: str
    name: str
    description: str
    embedding_model: str
    """"" until the first vector is written."""
    dimensions: int | None
    chunk_size: int
    chunk_overlap: int
    version: int
    created_at: float
    updated_at: float
    documents: int = 0
    """Counted when listed or read: all documents, whatever their status."""
    chunks: int = 0
    """Chunks of ready documents."""
    expires_at: float | None = None
    """When a temporary base is due for deletion; None: a permanent base."""


class KnowledgeStore(DocumentOps):
    def __init__(self, database: Database) -> None:
        self._db = database

    # --- knowledge bases ---------------------------------------------------------------

    async def create(
        self,
        owner: str,
        name: str,
        *,
        description: str = "",
        chunk_size: int,
        chunk_overlap: int,
        expires_at: float | None = None,
    ) -> KnowledgeBase:
        """``Conflict`` when the owner already has a knowledge base by this name.
        ``expires_at`` makes it temporary from its first moment (never listed)."""
        now = time.time()
        values = {
            "id": new_id("kb"),
            "owner": owner,
            "name": name,
            "description": description,
            "embedding_model": "",
            "dimensions": None,
            "chunk_size": chunk_size,
            "chunk_overlap": chunk_overlap,
            "version": 0,
            "created_at": now,
            "updated_at": now,
            "expires_at": expires_at,
        }

        def transaction(conn: Connection) -> None:
            conn.execute(knowledge_bases.insert().values(**values))

        try:
            await self._db.write(transaction)
        except IntegrityError:
            raise _name_taken(name) from None
        return KnowledgeBase(**values)  # type: ignore[arg-type]

    async def get(self, owner: str, reference: str) -> KnowledgeBase:
        """By id or name, with its counts. ``LookupError``: not the owner's."""

        def query(conn: Connection) -> KnowledgeBase:
            row = conn.execute(
                select(knowledge_bases).where(knowledge_bases.c.owner == owner, _ref(reference))
            ).first()
            if row is None:
                raise LookupError(reference)
            return _with_counts(conn, [_base(row._mapping)])[0]

        return await self._db.read(query)

    async def resolve(self, owner: str, references: Sequence[str]) -> list[KnowledgeBase]:
        """The owner's knowledge bases named (id or name), in the order given, without
        counts; ``LookupError`` naming the first that is missing."""
        if not references:
            return []

        def query(conn: Connection) -> list[KnowledgeBase]:
            rows = conn.execute(
                select(knowledge_bases).where(
                    knowledge_bases.c.owner == owner,
                    _LIVE,
                    or_(
                        knowledge_bases.c.id.in_(references),
                        knowledge_bases.c.name.in_(references),
                    ),
                )
            ).all()
            found = [_base(row._mapping) for row in rows]
            chosen: dict[str, KnowledgeBase] = {}
            for reference in references:
                match = next((b for b in found if reference in (b.id, b.name)), None)
                if match is None:
                    raise LookupError(reference)
                chosen.setdefault(match.id, match)
            return list(chosen.values())

        return await self._db.read(query)

    async def resolve_existing(self, owner: str, ids: Sequence[str]) -> list[KnowledgeBase]:
        """The owner's knowledge bases among ``ids`` that still exist, in that order."""
        if not ids:
            return []

        def query(conn: Connection) -> list[KnowledgeBase]:
            rows = conn.execute(
                select(knowledge_bases).where(
                    knowledge_bases.c.owner == owner,
                    knowledge_bases.c.id.in_(list(ids)),
                    _LIVE,
                )
            )
            found = {row.id: _base(row._mapping) for row in rows}
            return [found[i] for i in ids if i in found]

        return await self._db.read(query)

    async def bases(
        self, owner: str, *, limit: int, after: str | None = None
    ) -> list[KnowledgeBase]:
        """Newest first, with counts; ``after``: the last id of the previous page.
        Permanent bases only: temporary ones are a file chat's, not the owner's library."""
        table = knowledge_bases.c
        statement = select(knowledge_bases).where(
            table.owner == owner, _LIVE, table.expires_at.is_(None)
        )
        if after is not None:
            pivot = (
                select(table.created_at)
                .where(table.id == after, table.owner == owner)
                .scalar_subquery()
            )
            statement = statement.where(
                or_(table.created_at < pivot, and_(table.created_at == pivot, table.id < after))
            )
        statement = statement.order_by(table.created_at.desc(), table.id.desc()).limit(limit)

        def query(conn: Connection) -> list[KnowledgeBase]:
            return _with_counts(conn, [_base(r._mapping) for r in conn.execute(statement)])

        return await self._db.read(query)

    async def update(
        self, owner: str, reference: str, *, name: str | None, description: str | None
    ) -> KnowledgeBase:
        values: dict[str, Any] = {"updated_at": time.time()}
        if name is not None:
            values["name"] = name
        if description is not None:
            values["description"] = description

        def transaction(conn: Connection) -> str:
            found = conn.execute(
                select(knowledge_bases.c.id).where(
                    knowledge_bases.c.owner == owner, _ref(reference)
                )
            ).scalar()
            if found is None:
                raise LookupError(reference)
            conn.execute(
                update(knowledge_bases).where(knowledge_bases.c.id == found).values(**values)
            )
            return str(found)

        try:
            kb_id = await self._db.write(transaction)
        except IntegrityError:
            raise _name_taken(name or "") from None
        return await self.get(owner, kb_id)

    async def set_expiry(self, owner: str, kb_id: str, expires_at: float) -> None:
        """Move a temporary base's expiry (a permanent base stays permanent).
        ``LookupError``: not the owner's live temporary base."""

        def transaction(conn: Connection) -> None:
            changed = conn.execute(
                update(knowledge_bases)
                .where(
                    knowledge_bases.c.id == kb_id,
                    knowledge_bases.c.owner == owner,
                    knowledge_bases.c.expires_at.is_not(None),
                    _LIVE,
                )
                .values(expires_at=expires_at)
            ).rowcount
            if not changed:
                raise LookupError(kb_id)

        await self._db.write(transaction)

    async def expired(self, now: float, *, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` live temporary bases expired at ``now``, as (owner, id),
        the longest expired first."""
        table = knowledge_bases.c
        statement = (
            select(table.owner, table.id)
            .where(table.expires_at <= now, _LIVE)
            .order_by(table.expires_at, table.id)
            .limit(limit)
        )

        def query(conn: Connection) -> list[tuple[str, str]]:
            return [(str(owner), str(kb_id)) for owner, kb_id in conn.execute(statement)]

        return await self._db.read(query)

    async def set_embedding_model(self, kb_id: str, model: str, dimensions: int) -> bool:
        """Record the base's embedding model if it has none yet; whether ``model`` is
        (now) the base's model."""

        def transaction(conn: Connection) -> bool:
            conn.execute(
                update(knowledge_bases)
                .where(knowledge_bases.c.id == kb_id, knowledge_bases.c.embedding_model == "")
                .values(embedding_model=model, dimensions=dimensions)
            )
            current = conn.execute(
                select(knowledge_bases.c.embedding_model).where(knowledge_bases.c.id == kb_id)
            ).scalar()
            return bool(current == model)

        return await self._db.write(transaction)

    async def reset_embedding_model(self, owner: str, kb_id: str) -> None:
        """Forget the base's model (before every document is indexed again)."""

        def transaction(conn: Connection) -> None:
            conn.execute(
                update(knowledge_bases)
                .where(knowledge_bases.c.id == kb_id, knowledge_bases.c.owner == owner)
                .values(embedding_model="", dimensions=None, version=knowledge_bases.c.version + 1)
            )

        await self._db.write(transaction)

    async def mark_base_deleting(self, owner: str, reference: str) -> tuple[str, list[str]]:
        """Hide the base's documents from search at once (status ``deleting``); the
        base's id and its documents' ids. ``LookupError``: not the owner's."""

        def transaction(conn: Connection) -> tuple[str, list[str]]:
            kb_id = conn.execute(
                select(knowledge_bases.c.id).where(
                    knowledge_bases.c.owner == owner, _ref(reference)
                )
            ).scalar()
            if kb_id is None:
                raise LookupError(reference)
            documents = conn.execute(
                select(kb_documents.c.id).where(kb_documents.c.kb_id == kb_id)
            ).scalars()
            ids = [str(d) for d in documents]
            conn.execute(
                update(kb_documents)
                .where(kb_documents.c.kb_id == kb_id)
                .values(status="deleting", updated_at=time.time())
            )
            # hidden at once, and its name is free again (a name never starts with kb_)
            conn.execute(
                update(knowledge_bases)
                .where(knowledge_bases.c.id == kb_id)
                .values(deleting=True, name=kb_id)
            )
            _bump(conn, str(kb_id))
            return str(kb_id), ids

        return await self._db.write(transaction)

    async def deleting_bases(self) -> list[str]:
        """Bases whose deletion a crash interrupted."""

        def query(conn: Connection) -> list[str]:
            rows = conn.execute(
                select(knowledge_bases.c.id).where(knowledge_bases.c.deleting == true())
            )
            return [str(r) for r in rows.scalars()]

        return await self._db.read(query)

    async def delete_base_row(self, kb_id: str) -> None:
        """The base row and what is left below it (after ``purge_chunks``)."""

        def transaction(conn: Connection) -> None:
            conn.execute(delete(knowledge_bases).where(knowledge_bases.c.id == kb_id))

        await self._db.write(transaction)


def _ref(reference: str) -> Any:
    """The live base named ``reference`` (an id or a name)."""
    if reference.startswith(ID_PREFIX):
        return and_(knowledge_bases.c.id == reference, _LIVE)
    return and_(knowledge_bases.c.name == reference, _LIVE)


def _name_taken(name: str) -> Conflict:
    return Conflict(
        f"a knowledge base named {name!r} already exists",
        param="name",
        code="knowledge_base_exists",
    )


def _base(row: Any) -> KnowledgeBase:
    return KnowledgeBase(
        id=row["id"],
        owner=row["owner"],
        name=row["name"],
        description=row["description"],
        embedding_model=row["embedding_model"],
        dimensions=row["dimensions"],
        chunk_size=row["chunk_size"],
        chunk_overlap=row["chunk_overlap"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
    )


def _with_counts(conn: Connection, bases: list[KnowledgeBase]) -> list[KnowledgeBase]:
    if not bases:
        return bases
    ids = [b.id for b in bases]
    documents: dict[str, int] = dict(
        conn.execute(
            select(kb_documents.c.kb_id, func.count())
            .where(kb_documents.c.kb_id.in_(ids), kb_documents.c.status != "deleting")
            .group_by(kb_documents.c.kb_id)
        ).all()
    )
    chunks: dict[str, int] = dict(
        conn.execute(
            select(kb_documents.c.kb_id, func.coalesce(func.sum(kb_documents.c.chunks_done), 0))
            .where(kb_documents.c.kb_id.in_(ids), kb_documents.c.status == "ready")
            .group_by(kb_documents.c.kb_id)
        ).all()
    )
    return [
        replace(b, documents=int(documents.get(b.id, 0)), chunks=int(chunks.get(b.id, 0)))
        for b in bases
    ]
