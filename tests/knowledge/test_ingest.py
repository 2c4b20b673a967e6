"""The ingestion queue (``knowledge/ingest.py``) over a real database and real files:
resuming after a restart, cancelling mid-document, embeddings that fail or belong to
another model, the queue's bound, and deleting while indexing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from sqlalchemy import Connection, func, select

from parley.errors import Overloaded
from parley.knowledge.embeddings import HashEmbedder
from parley.knowledge.ingest import document_path
from parley.knowledge.service import KnowledgeService
from parley.knowledge.types import EmbeddingError
from parley.settings.knowledge import KnowledgeSettings
from parley.store.database import Database
from parley.store.knowledge import Document, KnowledgeBase
from parley.store.schema import kb_chunks, kb_documents
from parley.transforms.protocol import TransformContext
from tests.support.waiting import until

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

pytestmark = pytest.mark.anyio

TEXT = "\n\n".join(
    f"Paragraph {n} tells of the harbour of Velmora and its {n} lighthouses." * 6 for n in range(40)
)


class GatedEmbedder(HashEmbedder):
    """Waits at ``gate`` before each batch (so a test can act mid-document)."""

    def __init__(self) -> None:
        super().__init__(32)
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.entries = 0
        """How many batches have come to the gate."""

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.entries += 1
        self.entered.set()
        await self.gate.wait()
        return await super().embed(texts)


class FailingEmbedder(HashEmbedder):
    async def embed(self, texts: Sequence[str]) -> Vectors:
        raise EmbeddingError("the endpoint is down")


async def pieces(data: bytes) -> AsyncIterator[bytes]:
    yield data


def service(
    database: Database, tmp_path: Path, embedder: object, **settings: object
) -> KnowledgeService:
    return KnowledgeService(
        KnowledgeSettings(**settings),  # type: ignore[arg-type]
        database,
        tmp_path / "knowledge",
        embedder,  # type: ignore[arg-type]
    )


async def mid_document(
    database: Database, tmp_path: Path, **settings: object
) -> tuple[KnowledgeService, GatedEmbedder, KnowledgeBase, Document]:
    """A started service whose worker is held inside embedding the first batch of an
    uploaded document (release it with ``embedder.gate.set()``)."""
    embedder = GatedEmbedder()
    knowledge = service(database, tmp_path, embedder, **settings)
    base = await knowledge.create("alice", "harbours")
    await knowledge.start()
    document = await knowledge.upload("alice", base, "v.txt", None, pieces(TEXT.encode()))
    await asyncio.wait_for(embedder.entered.wait(), 10)
    return knowledge, embedder, base, document


async def settled(knowledge: KnowledgeService, owner: str, kb_id: str, doc_id: str) -> str:
    for _ in range(500):
        document = await knowledge.store.document(owner, kb_id, doc_id)
        if document.status not in ("queued", "indexing"):
            return document.status
        await asyncio.sleep(0.02)
    raise AssertionError("the document never settled")


def chunk_count(conn: Connection, document_id: str, *, with_vectors: bool = False) -> int:
    statement = select(func.count()).where(kb_chunks.c.document_id == document_id)
    if with_vectors:
        statement = statement.where(kb_chunks.c.embedding.is_not(None))
    return int(conn.execute(statement).scalar_one())


async def test_a_document_left_indexing_by_a_crash_is_indexed_again_after_a_restart(
    database: Database, tmp_path: Path
) -> None:
    first = service(database, tmp_path, HashEmbedder(32))
    base = await first.create("alice", "harbours")
    gate = GatedEmbedder()
    first.ingestor._embedder = gate  # the first process "crashes" mid-document
    await first.start()
    document = await first.upload("alice", base, "velmora.txt", "text/plain", pieces(TEXT.encode()))
    await asyncio.wait_for(gate.entered.wait(), 10)
    await first.close()  # the worker dies while the document is indexing
    row = await database.read(
        lambda conn: conn.execute(
            select(kb_documents.c.status).where(kb_documents.c.id == document.id)
        ).scalar_one()
    )
    assert row == "indexing"

    second = service(database, tmp_path, HashEmbedder(32))
    await second.start()
    try:
        assert await settled(second, "alice", base.id, document.id) == "ready"
        ready = await second.store.document("alice", base.id, document.id)
        stored = await database.read(lambda conn: chunk_count(conn, document.id))
        assert ready.chunks_total == ready.chunks_done == stored > 1
        assert (
            await database.read(lambda conn: chunk_count(conn, document.id, with_vectors=True))
            == stored
        )
        found = await second.search("alice", [base], "Velmora lighthouses", top_k=3)
        assert found
        assert all(r.chunk.document_id == document.id for r in found)
    finally:
        await second.close()


async def test_cancelling_mid_document_stops_and_removes_what_was_written(
    database: Database, tmp_path: Path
) -> None:
    knowledge, embedder, base, document = await mid_document(database, tmp_path)
    try:
        cancelled = await knowledge.store.cancel("alice", base.id, document.id)
        assert cancelled.status == "cancelled"
        embedder.gate.set()
        for _ in range(200):
            if await database.read(lambda conn: chunk_count(conn, document.id)) == 0:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert await database.read(lambda conn: chunk_count(conn, document.id)) == 0
        assert (await knowledge.store.document("alice", base.id, document.id)).status == "cancelled"
        assert await knowledge.search("alice", [base], "Velmora lighthouses", top_k=3) == []
        # and it can be indexed again
        await knowledge.reindex("alice", base.id, document.id)
        assert await settled(knowledge, "alice", base.id, document.id) == "ready"
    finally:
        await knowledge.close()


async def test_failing_embeddings_leave_the_document_searchable_by_words(
    database: Database, tmp_path: Path
) -> None:
    knowledge = service(database, tmp_path, FailingEmbedder(32))
    base = await knowledge.create("alice", "harbours")
    await knowledge.start()
    try:
        document = await knowledge.upload("alice", base, "v.txt", None, pieces(TEXT.encode()))
        assert await settled(knowledge, "alice", base.id, document.id) == "ready"
        ready = await knowledge.store.document("alice", base.id, document.id)
        assert ready.error is not None
        assert "embedding failed" in ready.error
        assert (
            await database.read(lambda conn: chunk_count(conn, document.id, with_vectors=True)) == 0
        )
        found = await knowledge.search("alice", [base], "Velmora lighthouses", top_k=2)
        assert len(found) == 2
    finally:
        await knowledge.close()


async def test_vectors_of_another_model_are_never_mixed_in(
    database: Database, tmp_path: Path
) -> None:
    old = service(database, tmp_path, HashEmbedder(16))
    base = await old.create("alice", "harbours")
    await old.start()
    first = await old.upload("alice", base, "a.txt", None, pieces(TEXT.encode()))
    assert await settled(old, "alice", base.id, first.id) == "ready"
    await old.close()

    new = service(database, tmp_path, HashEmbedder(32))
    await new.start()
    try:
        current = await new.store.get("alice", base.id)
        assert current.embedding_model == "hash-16"
        second = await new.upload("alice", current, "b.txt", None, pieces(b"Velmora harbour " * 50))
        assert await settled(new, "alice", base.id, second.id) == "ready"
        noted = await new.store.document("alice", base.id, second.id)
        assert noted.error is not None
        assert "hash-16" in noted.error
        assert (
            await database.read(lambda conn: chunk_count(conn, second.id, with_vectors=True)) == 0
        )
        # the query is not embedded for a base of another model: words alone still find
        results = await new.search("alice", [current], "Velmora harbour", top_k=5)
        assert {r.chunk.document_id for r in results} == {first.id, second.id}
    finally:
        await new.close()


async def test_the_queue_is_bounded(database: Database, tmp_path: Path) -> None:
    knowledge = service(database, tmp_path, None, max_queued_documents=2)
    base = await knowledge.create("alice", "harbours")
    # not started: nothing is taken off the queue
    for name in ("a.txt", "b.txt"):
        await knowledge.upload("alice", base, name, None, pieces(b"some text here"))
    with pytest.raises(Overloaded) as refused:
        await knowledge.upload("alice", base, "c.txt", None, pieces(b"more text"))
    assert refused.value.code == "ingestion_queue_full"
    files = sorted(p.name for p in (tmp_path / "knowledge" / base.id).iterdir())
    assert len(files) == 2  # the refused upload's file is not kept


async def test_deleting_a_document_while_it_is_indexed_leaves_nothing(
    database: Database, tmp_path: Path
) -> None:
    knowledge, embedder, base, document = await mid_document(database, tmp_path)
    try:
        await knowledge.delete_document("alice", base.id, document.id)
        embedder.gate.set()
        await asyncio.sleep(0.3)
        assert await database.read(lambda conn: chunk_count(conn, document.id)) == 0
        assert not document_path(tmp_path / "knowledge", base.id, document.id).exists()
        with pytest.raises(LookupError):
            await knowledge.store.document("alice", base.id, document.id)
    finally:
        await knowledge.close()


async def test_the_retriever_searches_only_the_requests_bases_of_its_owner(
    database: Database, tmp_path: Path
) -> None:
    knowledge = service(database, tmp_path, HashEmbedder(32))
    mine = await knowledge.create("alice", "mine")
    theirs = await knowledge.create("bob", "theirs")
    await knowledge.start()
    try:
        a = await knowledge.upload("alice", mine, "a.txt", None, pieces(b"Velmora harbour lights"))
        b = await knowledge.upload("bob", theirs, "b.txt", None, pieces(b"Velmora harbour lights"))
        assert await settled(knowledge, "alice", mine.id, a.id) == "ready"
        assert await settled(knowledge, "bob", theirs.id, b.id) == "ready"
        from datetime import UTC, datetime

        context = TransformContext(
            now=datetime.now(UTC), owner="alice", knowledge_bases=(mine.id, theirs.id)
        )
        snippets = await knowledge.retrieve("Velmora harbour", context)
        assert [s.document_id for s in snippets] == [a.id]
        assert np.isfinite([s.score or 0 for s in snippets]).all()
    finally:
        await knowledge.close()


async def test_deleting_a_document_drops_its_cached_vectors_and_queries_are_not_cached(
    database: Database, tmp_path: Path
) -> None:
    from parley.store.schema import embedding_cache

    def cached(conn: Connection) -> int:
        return int(conn.execute(select(func.count()).select_from(embedding_cache)).scalar_one())

    knowledge = service(database, tmp_path, HashEmbedder(32))
    base = await knowledge.create("alice", "harbours")
    await knowledge.start()
    try:
        kept = await knowledge.upload("alice", base, "k.txt", None, pieces(b"Quiet inland lakes"))
        gone = await knowledge.upload("alice", base, "g.txt", None, pieces(TEXT.encode()))
        assert await settled(knowledge, "alice", base.id, kept.id) == "ready"
        assert await settled(knowledge, "alice", base.id, gone.id) == "ready"
        before = await database.read(cached)
        assert before > 1
        await knowledge.search("alice", [base], "a question never asked before", top_k=3)
        assert await database.read(cached) == before
        await knowledge.delete_document("alice", base.id, gone.id)
        for _ in range(200):
            if await database.read(cached) == 1:
                break
            await asyncio.sleep(0.02)
        assert await database.read(cached) == 1  # only the kept document's vector
    finally:
        await knowledge.close()


async def test_a_run_superseded_by_a_reindex_writes_nothing_more(
    database: Database, tmp_path: Path
) -> None:
    knowledge, embedder, base, document = await mid_document(database, tmp_path, workers=2)
    try:
        await knowledge.store.cancel("alice", base.id, document.id)
        await knowledge.reindex("alice", base.id, document.id)  # a second worker takes it
        await until(lambda: embedder.entries == 2)  # both runs are held at the gate
        embedder.gate.set()
        assert await settled(knowledge, "alice", base.id, document.id) == "ready"
        await asyncio.sleep(0.3)  # the first run has had every chance to write
        ready = await knowledge.store.document("alice", base.id, document.id)
        stored = await database.read(lambda conn: chunk_count(conn, document.id))
        assert ready.chunks_total == ready.chunks_done == stored
    finally:
        await knowledge.close()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("never happened")


async def test_a_run_whose_document_is_deleted_meanwhile_ends_quietly(
    database: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The deletion is over (the row is gone) before the run writes its first chunks:
    those writes are dropped, not failed (they failed on the foreign key)."""
    knowledge, embedder, base, document = await mid_document(database, tmp_path)
    try:
        await knowledge.delete_document("alice", base.id, document.id)
        await eventually(lambda: gone(knowledge, document.id))
        embedder.gate.set()
        await asyncio.wait_for(knowledge.ingestor.idle.wait(), 10)
        assert await database.read(lambda conn: chunk_count(conn, document.id)) == 0
        assert errors(caplog) == []
    finally:
        await knowledge.close()


async def test_a_run_whose_base_is_deleted_meanwhile_ends_quietly(
    database: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    knowledge, embedder, base, document = await mid_document(database, tmp_path)
    try:
        await knowledge.delete("alice", base.id)
        await eventually(lambda: gone(knowledge, document.id))
        embedder.gate.set()
        await asyncio.wait_for(knowledge.ingestor.idle.wait(), 10)

        def left(conn: Connection) -> int:
            statement = select(func.count()).where(kb_chunks.c.kb_id == base.id)
            return int(conn.execute(statement).scalar_one())

        assert await database.read(left) == 0
        assert errors(caplog) == []
        again = await knowledge.create("alice", "harbours")  # its name is free
        assert await knowledge.search("alice", [again], "Velmora lighthouses", top_k=3) == []
    finally:
        await knowledge.close()


async def test_a_document_replaced_while_it_indexes_leaves_only_the_new_one_searchable(
    database: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Chatchat's override: the new file is stored, then the old one (mid-run) deleted."""
    knowledge, embedder, base, old = await mid_document(database, tmp_path)
    try:
        new_text = TEXT.replace("Velmora", "Ostrava").encode()
        new = await knowledge.upload("alice", base, "v.txt", None, pieces(new_text))
        await knowledge.delete_document("alice", base.id, old.id)
        await eventually(lambda: gone(knowledge, old.id))
        embedder.gate.set()
        assert await settled(knowledge, "alice", base.id, new.id) == "ready"
        await asyncio.wait_for(knowledge.ingestor.idle.wait(), 10)
        assert await database.read(lambda conn: chunk_count(conn, old.id)) == 0
        assert await knowledge.search("alice", [base], "Velmora", top_k=3) == []
        found = await knowledge.search("alice", [base], "Ostrava lighthouses", top_k=3)
        assert {r.chunk.document_id for r in found} == {new.id}
        assert errors(caplog) == []
    finally:
        await knowledge.close()


async def gone(knowledge: KnowledgeService, document_id: str) -> bool:
    return await knowledge.store.document_by_id(document_id) is None
