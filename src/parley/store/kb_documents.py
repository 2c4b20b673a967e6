"""The documents of knowledge bases, which are also their ingestion jobs: the SQL for
``kb_documents`` (mixed into ``KnowledgeStore`` as ``DocumentOps``, like the branch
operations of the conversation store).

A document's ``status`` moves queued -> indexing -> ready (or failed / cancelled), and
``deleting`` while it is being removed; only a ready document's chunks are searched.
Every change to what is searchable bumps its base's ``version`` in the same
transaction. Chunks are deleted a batch per transaction (``purge_chunks``): SQLite
writes run on the event loop.

Each time a document starts indexing it gets a new run number (``run``). Every write of
an indexing run (its chunks, its progress, its end) is made in a transaction that first
checks, with ``is_current_run``, that the document still exists, is still indexing and
is still that run's: a run whose document was deleted, replaced, cancelled or queued
again meanwhile writes nothing more, whichever process runs it.

What does not belong here: knowledge bases themselves (``store/knowledge.py``), chunks'
own SQL (``knowledge/index.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, and_, delete, func, or_, select, update

from parley.errors import Conflict, Overloaded, RateLimited
from parley.store.database import Database
from parley.store.schema import kb_chunks, kb_documents, knowledge_bases

DocumentStatus = Literal["queued", "indexing", "ready", "failed", "cancelled", "deleting"]
PENDING: tuple[DocumentStatus, ...] = ("queued", "indexing")
PURGE_BATCH = 16
"""Chunks deleted per transaction (``Database.write_in_background``, paced): with the
FTS5 trigger a chunk costs 0.05-0.3 ms, and SQLite writes run on the event loop."""
QUEUE_RETRY_SECONDS = 30
OWNER_QUEUE_FULL = "too_many_queued_documents"


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    kb_id: str
    owner: str
    filename: str
    content_type: str | None
    size: int
    sha256: str
    status: DocumentStatus
    error: str | None
    chunks_total: int | None
    chunks_done: int
    pages: int | None
    title: str | None
    created_at: float
    updated_at: float


class DocumentOps:
    _db: Database

    async def add_document(
        self,
        owner: str,
        kb_id: str,
        *,
        document_id: str,
        filename: str,
        content_type: str | None,
        size: int,
        sha256: str,
        max_pending: int,
        max_per_owner: int,
    ) -> Document:
        """A queued document. ``Overloaded`` (retry later) when ``max_pending`` documents
        are already waiting or being indexed, server-wide; ``RateLimited`` when
        ``max_per_owner`` of the owner's are."""
        now = time.time()
        values = {
            "id": document_id,
            "kb_id": kb_id,
            "owner": owner,
            "filename": filename,
            "content_type": content_type,
            "size": size,
            "sha256": sha256,
            "status": "queued",
            "error": None,
            "chunks_total": None,
            "chunks_done": 0,
            "pages": None,
            "title": None,
            "created_at": now,
            "updated_at": now,
        }

        def transaction(conn: Connection) -> None:
            _check_room(conn, owner, max_pending, max_per_owner)
            live = conn.execute(
                select(knowledge_bases.c.id).where(
                    knowledge_bases.c.id == kb_id, knowledge_bases.c.deleting.is_(False)
                )
            ).first()
            if live is None:
                raise LookupError(kb_id)  # deleted while the file was uploading
            conn.execute(kb_documents.insert().values(**values))
            conn.execute(
                update(knowledge_bases).where(knowledge_bases.c.id == kb_id).values(updated_at=now)
            )

        await self._db.write(transaction)
        return Document(**values)  # type: ignore[arg-type]

    async def document(self, owner: str, kb_id: str, document_id: str) -> Document:
        """``LookupError``: not one of the owner's documents in this base."""

        def query(conn: Connection) -> Document:
            row = conn.execute(
                select(kb_documents).where(
                    kb_documents.c.id == document_id,
                    kb_documents.c.kb_id == kb_id,
                    kb_documents.c.owner == owner,
                    kb_documents.c.status != "deleting",
                )
            ).first()
            if row is None:
                raise LookupError(document_id)
            return _document(row._mapping)

        return await self._db.read(query)

    async def pending_count(self, owner: str | None = None) -> int:
        """Documents waiting or being indexed: the owner's, or server-wide."""

        def query(conn: Connection) -> int:
            return _pending(conn, owner)

        return await self._db.read(query)

    async def document_by_id(self, document_id: str) -> Document | None:
        """Any owner's (the ingestion worker's view)."""

        def query(conn: Connection) -> Document | None:
            row = conn.execute(select(kb_documents).where(kb_documents.c.id == document_id))
            found = row.first()
            return None if found is None else _document(found._mapping)

        return await self._db.read(query)

    async def documents(
        self,
        owner: str,
        kb_id: str,
        *,
        limit: int,
        after: str | None = None,
        filename: str | None = None,
    ) -> list[Document]:
        """Oldest first (the upload order); ``after``: the last id of the previous page."""
        table = kb_documents.c
        statement = select(kb_documents).where(
            table.owner == owner, table.kb_id == kb_id, table.status != "deleting"
        )
        if filename is not None:
            statement = statement.where(table.filename == filename)
        if after is not None:
            pivot = (
                select(table.created_at)
                .where(table.id == after, table.owner == owner)
                .scalar_subquery()
            )
            statement = statement.where(
                or_(table.created_at > pivot, and_(table.created_at == pivot, table.id > after))
            )
        statement = statement.order_by(table.created_at, table.id).limit(limit)
        return await self._db.read(
            lambda conn: [_document(r._mapping) for r in conn.execute(statement)]
        )

    async def status_counts(self, owner: str, kb_id: str) -> dict[str, int]:
        def query(conn: Connection) -> dict[str, int]:
            rows = conn.execute(
                select(kb_documents.c.status, func.count())
                .where(
                    kb_documents.c.owner == owner,
                    kb_documents.c.kb_id == kb_id,
                    kb_documents.c.status != "deleting",
                )
                .group_by(kb_documents.c.status)
            )
            return {str(status): int(count) for status, count in rows}

        return await self._db.read(query)

    async def pending(self) -> list[tuple[str, str]]:
        """(owner, document id) of the documents to (re)index after a restart, oldest
        first; those left ``indexing`` by a crash are queued again (their partial chunks
        are purged by the worker)."""

        def transaction(conn: Connection) -> list[tuple[str, str]]:
            conn.execute(
                update(kb_documents)
                .where(kb_documents.c.status == "indexing")
                .values(status="queued", chunks_done=0, updated_at=time.time())
            )
            rows = conn.execute(
                select(kb_documents.c.owner, kb_documents.c.id)
                .where(kb_documents.c.status == "queued")
                .order_by(kb_documents.c.created_at, kb_documents.c.id)
            )
            return [(str(owner), str(document_id)) for owner, document_id in rows]

        return await self._db.write(transaction)

    async def deleting(self) -> list[tuple[str, str]]:
        """(kb id, document id) of deletions a crash interrupted."""

        def query(conn: Connection) -> list[tuple[str, str]]:
            rows = conn.execute(
                select(kb_documents.c.kb_id, kb_documents.c.id).where(
                    kb_documents.c.status == "deleting"
                )
            )
            return [(str(kb), str(doc)) for kb, doc in rows]

        return await self._db.read(query)

    async def start_indexing(self, document_id: str) -> int | None:
        """queued -> indexing under a new run number, which is returned; None when the
        document is no longer queued (cancelled, deleted) and must not be indexed."""

        def transaction(conn: Connection) -> int | None:
            result = conn.execute(
                update(kb_documents)
                .where(kb_documents.c.id == document_id, kb_documents.c.status == "queued")
                .values(
                    status="indexing",
                    error=None,
                    chunks_done=0,
                    run=kb_documents.c.run + 1,
                    updated_at=time.time(),
                )
            )
            if not result.rowcount:
                return None
            run = conn.execute(select(kb_documents.c.run).where(kb_documents.c.id == document_id))
            return int(run.scalar_one())

        return await self._db.write(transaction)

    async def progress(
        self,
        document_id: str,
        run: int,
        *,
        chunks_done: int,
        chunks_total: int | None = None,
        pages: int | None = None,
        title: str | None = None,
    ) -> bool:
        """Record the progress of indexing ``run``; False when the document is no longer
        that run's (cancelled, deleted, queued again): the run then stops."""
        values: dict[str, Any] = {"chunks_done": chunks_done, "updated_at": time.time()}
        if chunks_total is not None:
            values["chunks_total"] = chunks_total
        if pages is not None:
            values["pages"] = pages
        if title is not None:
            values["title"] = title[:500]

        def transaction(conn: Connection) -> bool:
            result = conn.execute(
                update(kb_documents).where(_run_of(document_id, run)).values(**values)
            )
            return bool(result.rowcount)

        return await self._db.write(transaction)

    async def finish(
        self, document_id: str, run: int, status: DocumentStatus, *, error: str | None = None
    ) -> int | None:
        """indexing -> ready / failed, if the document is still ``run``'s; with ready,
        the base's version is bumped in the same transaction. The new version (ready) or
        None; None also when the document was no longer the run's (the run then purges
        what it wrote)."""

        def transaction(conn: Connection) -> int | None:
            kb_id = conn.execute(
                select(kb_documents.c.kb_id).where(_run_of(document_id, run)).with_for_update()
            ).scalar()
            if kb_id is None:
                return None
            conn.execute(
                update(kb_documents)
                .where(kb_documents.c.id == document_id)
                .values(status=status, error=error, updated_at=time.time())
            )
            return _bump(conn, str(kb_id)) if status == "ready" else None

        return await self._db.write(transaction)

    async def cancel(self, owner: str, kb_id: str, document_id: str) -> Document:
        """queued / indexing -> cancelled (the worker stops at its next step).
        ``LookupError``: not the owner's; ``Conflict``: not pending."""

        def transaction(conn: Connection) -> None:
            status = _status(conn, owner, kb_id, document_id)
            if status not in PENDING:
                raise Conflict(
                    f"document {document_id} is {status}, not waiting or indexing",
                    code="not_cancellable",
                )
            conn.execute(
                update(kb_documents)
                .where(kb_documents.c.id == document_id)
                .values(status="cancelled", error="cancelled by the user", updated_at=time.time())
            )

        await self._db.write(transaction)
        return await self.document(owner, kb_id, document_id)

    async def requeue(
        self, owner: str, kb_id: str, document_id: str, *, max_pending: int, max_per_owner: int
    ) -> Document:
        """A ready, failed or cancelled document queued to be indexed again (its chunks
        stop being searched now). ``Conflict`` while it is still pending; the queue's
        bounds as ``add_document``."""

        def transaction(conn: Connection) -> None:
            status = _status(conn, owner, kb_id, document_id)
            if status in PENDING:
                raise Conflict(
                    f"document {document_id} is already {status}", code="already_pending"
                )
            _check_room(conn, owner, max_pending, max_per_owner)
            conn.execute(
                update(kb_documents)
                .where(kb_documents.c.id == document_id)
                .values(status="queued", error=None, chunks_done=0, updated_at=time.time())
            )
            if status == "ready":
                _bump(conn, kb_id)

        await self._db.write(transaction)
        return await self.document(owner, kb_id, document_id)

    async def mark_document_deleting(self, owner: str, kb_id: str, document_id: str) -> None:
        """Hide the document from search at once. ``LookupError``: not the owner's."""

        def transaction(conn: Connection) -> None:
            result = conn.execute(
                update(kb_documents)
                .where(
                    kb_documents.c.id == document_id,
                    kb_documents.c.kb_id == kb_id,
                    kb_documents.c.owner == owner,
                    kb_documents.c.status != "deleting",
                )
                .values(status="deleting", updated_at=time.time())
            )
            if not result.rowcount:
                raise LookupError(document_id)
            _bump(conn, kb_id)

        await self._db.write(transaction)

    async def chunk_hashes(self, document_id: str) -> list[str]:
        """The text hashes of the document's chunks (its cached vectors' keys)."""

        def query(conn: Connection) -> list[str]:
            rows = conn.execute(
                select(kb_chunks.c.text_hash).where(kb_chunks.c.document_id == document_id)
            )
            return [str(h) for h in rows.scalars()]

        return await self._db.read(query)

    async def purge_chunks(self, document_id: str, *, run: int | None = None) -> None:
        """Delete the document's chunks (and, by trigger, their index entries) a batch
        per transaction. With ``run``: only while no later run has started (each batch
        checks it), so that a run stopping late never removes a newer run's chunks."""

        def transaction(conn: Connection) -> int:
            if run is not None:
                current = conn.execute(
                    select(kb_documents.c.run)
                    .where(kb_documents.c.id == document_id)
                    .with_for_update()
                ).scalar()
                if current != run:
                    return 0
            ids = select(kb_chunks.c.id).where(kb_chunks.c.document_id == document_id)
            result = conn.execute(
                delete(kb_chunks).where(kb_chunks.c.id.in_(ids.limit(PURGE_BATCH)))
            )
            return int(result.rowcount)

        # SQLite writes run inline on the event loop: each batch is followed by a
        # pause in proportion to it, so that other requests run between them
        while await self._db.write_in_background(transaction) == PURGE_BATCH:
            pass

    async def delete_document_row(self, document_id: str) -> None:
        def transaction(conn: Connection) -> None:
            conn.execute(delete(kb_documents).where(kb_documents.c.id == document_id))

        await self._db.write(transaction)


def is_current_run(conn: Connection, document_id: str, run: int) -> bool:
    """Whether the document still exists, is indexing and is ``run``'s: what a run's
    write checks in its own transaction before it writes (on PostgreSQL the row stays
    locked until that transaction ends, so a deletion waits for it)."""
    found = conn.execute(
        select(kb_documents.c.id).where(_run_of(document_id, run)).with_for_update()
    )
    return found.first() is not None


def _run_of(document_id: str, run: int) -> Any:
    return and_(
        kb_documents.c.id == document_id,
        kb_documents.c.status == "indexing",
        kb_documents.c.run == run,
    )


def _status(conn: Connection, owner: str, kb_id: str, document_id: str) -> str:
    """The status of the owner's document in this base; ``LookupError`` if none."""
    status = conn.execute(
        select(kb_documents.c.status).where(
            kb_documents.c.id == document_id,
            kb_documents.c.kb_id == kb_id,
            kb_documents.c.owner == owner,
            kb_documents.c.status != "deleting",
        )
    ).scalar()
    if status is None:
        raise LookupError(document_id)
    return str(status)


def _check_room(conn: Connection, owner: str, max_pending: int, max_per_owner: int) -> None:
    """``Overloaded`` when ``max_pending`` documents are already waiting or indexing,
    ``RateLimited`` when ``max_per_owner`` of the owner's are."""
    pending = _pending(conn, None)
    if pending >= max_pending:
        raise Overloaded(
            f"{pending} documents are waiting to be indexed; try again later",
            code="ingestion_queue_full",
            retry_after=QUEUE_RETRY_SECONDS,
        )
    if _pending(conn, owner) >= max_per_owner:
        raise owner_queue_full(max_per_owner)


def owner_queue_full(limit: int) -> RateLimited:
    """The refusal of a document past the owner's share of the queue."""
    return RateLimited(
        f"{limit} of your documents are already waiting to be indexed, the most one "
        f"owner may have queued (knowledge.max_queued_per_owner); try again when some "
        "are indexed",
        code=OWNER_QUEUE_FULL,
        retry_after=QUEUE_RETRY_SECONDS,
    )


def _pending(conn: Connection, owner: str | None) -> int:
    statement = select(func.count()).where(kb_documents.c.status.in_(PENDING))
    if owner is not None:
        statement = statement.where(kb_documents.c.owner == owner)
    return int(conn.execute(statement).scalar_one())


def _bump(conn: Connection, kb_id: str) -> int:
    conn.execute(
        update(knowledge_bases)
        .where(knowledge_bases.c.id == kb_id)
        .values(version=knowledge_bases.c.version + 1, updated_at=time.time())
    )
    return int(
        conn.execute(
            select(knowledge_bases.c.version).where(knowledge_bases.c.id == kb_id)
        ).scalar_one()
    )


def _document(row: Any) -> Document:
    return Document(
        id=row["id"],
        kb_id=row["kb_id"],
        owner=row["owner"],
        filename=row["filename"],
        content_type=row["content_type"],
        size=row["size"],
        sha256=row["sha256"],
        status=row["status"],
        error=row["error"],
        chunks_total=row["chunks_total"],
        chunks_done=row["chunks_done"],
        pages=row["pages"],
        title=row["title"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
