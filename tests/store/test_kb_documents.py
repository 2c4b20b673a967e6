"""Indexing runs of knowledge documents (``store/kb_documents.py``): each start is a new
run, and a run that is no longer its document's (cancelled and queued again, a newer run
started, deleted) can neither write, record progress, finish, nor purge the newer
run's chunks."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, func, select

from parley.store.database import Database
from parley.store.kb_documents import is_current_run
from parley.store.knowledge import KnowledgeStore
from parley.store.schema import kb_chunks, kb_documents

pytestmark = pytest.mark.anyio

OWNER = "alice"


async def queued_document(store: KnowledgeStore) -> tuple[str, str]:
    base = await store.create(OWNER, "harbours", chunk_size=1_000, chunk_overlap=100)
    document = await store.add_document(
        OWNER,
        base.id,
        document_id="doc_1",
        filename="v.txt",
        content_type=None,
        size=10,
        sha256="0" * 64,
        max_pending=10,
        max_per_owner=10,
    )
    return base.id, document.id


def write_chunk(conn: Connection, kb_id: str, document_id: str, ordinal: int) -> None:
    conn.execute(
        kb_chunks.insert().values(
            document_id=document_id,
            kb_id=kb_id,
            owner=OWNER,
            ordinal=ordinal,
            text=f"chunk {ordinal}",
            terms=f"chunk {ordinal}",
            text_hash=f"{ordinal:064d}",
        )
    )


def chunks(conn: Connection, document_id: str) -> int:
    statement = select(func.count()).where(kb_chunks.c.document_id == document_id)
    return int(conn.execute(statement).scalar_one())


async def current(database: Database, document_id: str, run: int) -> bool:
    return await database.read(lambda conn: is_current_run(conn, document_id, run))


async def test_a_superseded_run_can_no_longer_write_finish_or_purge(database: Database) -> None:
    store = KnowledgeStore(database)
    kb_id, document_id = await queued_document(store)
    first = await store.start_indexing(document_id)
    assert first is not None
    assert await store.start_indexing(document_id) is None  # already indexing
    await database.write(lambda conn: write_chunk(conn, kb_id, document_id, 0))
    assert await current(database, document_id, first)

    await store.cancel(OWNER, kb_id, document_id)
    assert not await current(database, document_id, first)
    await store.requeue(OWNER, kb_id, document_id, max_pending=10, max_per_owner=10)
    second = await store.start_indexing(document_id)
    assert second is not None
    assert second > first
    await store.purge_chunks(document_id, run=second)  # what the first run left
    await database.write(lambda conn: write_chunk(conn, kb_id, document_id, 1))

    # the first run, late: every one of its writes is refused
    assert not await current(database, document_id, first)
    assert not await store.progress(document_id, first, chunks_done=5)
    assert await store.finish(document_id, first, "ready") is None
    await store.purge_chunks(document_id, run=first)
    assert await database.read(lambda conn: chunks(conn, document_id)) == 1
    status = await database.read(
        lambda conn: conn.execute(
            select(kb_documents.c.status).where(kb_documents.c.id == document_id)
        ).scalar_one()
    )
    assert status == "indexing"

    # the second run's own
    assert await store.progress(document_id, second, chunks_done=1)
    assert await store.finish(document_id, second, "ready") is not None
    assert (await store.document(OWNER, kb_id, document_id)).chunks_done == 1


async def test_a_deleted_document_is_no_runs_any_more(database: Database) -> None:
    store = KnowledgeStore(database)
    kb_id, document_id = await queued_document(store)
    run = await store.start_indexing(document_id)
    assert run is not None
    await store.mark_document_deleting(OWNER, kb_id, document_id)
    assert not await current(database, document_id, run)
    assert not await store.progress(document_id, run, chunks_done=1)
    await store.delete_document_row(document_id)
    assert not await current(database, document_id, run)
    assert await store.finish(document_id, run, "failed", error="x") is None
