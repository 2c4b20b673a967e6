"""Temporary knowledge bases (``knowledge/temporary.py``) over a real database and real
files, on a clock of the test's: expiry, the sweep and its pace, ownership, listings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Table, func, select

from parley.errors import InvalidRequest
from parley.knowledge.service import KnowledgeService
from parley.knowledge.temporary import (
    NAME_PREFIX,
    SWEEP_SECONDS,
    TemporaryBases,
    chunking_problem,
    find_temp_base,
    temporary_bases,
)
from parley.settings.knowledge import KnowledgeSettings
from parley.store.database import Database
from parley.store.schema import kb_chunks, kb_documents, knowledge_bases

pytestmark = pytest.mark.anyio

TTL = 100
START = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def knowledge(database: Database, tmp_path: Path) -> AsyncIterator[KnowledgeService]:
    service = KnowledgeService(
        KnowledgeSettings(embedder="none", temporary_ttl_seconds=TTL),
        database,
        tmp_path / "knowledge",
        None,
    )
    await service.start()
    yield service
    await service.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def temporary(knowledge: KnowledgeService, clock: Clock) -> TemporaryBases:
    return TemporaryBases(knowledge, clock=clock)


async def pieces(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def rows(database: Database, table: Table, column: Column[Any], value: str) -> int:
    statement = select(func.count()).select_from(table).where(column == value)
    return int(await database.read(lambda conn: conn.execute(statement).scalar_one()))


async def test_a_temporary_base_is_the_owners_hidden_from_listings_and_expires(
    knowledge: KnowledgeService, temporary: TemporaryBases, clock: Clock
) -> None:
    base = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    assert base.expires_at == START + TTL
    assert base.name.startswith(NAME_PREFIX)
    assert (base.chunk_size, base.chunk_overlap) == (750, 150)
    permanent = await knowledge.create("alice", "library")
    assert [b.id for b in await knowledge.store.bases("alice", limit=10)] == [permanent.id]

    found = await temporary.find("alice", base.id)
    assert found is not None
    assert found.id == base.id
    assert await temporary.find("bob", base.id) is None  # another owner's
    assert await temporary.find("alice", base.name) is None  # named by its id only
    assert await temporary.find("alice", permanent.id) is None  # not temporary
    assert await temporary.find("alice", "kb_missing") is None

    clock.now = START + TTL - 1
    assert await temporary.find("alice", base.id) is not None
    clock.now = START + TTL
    assert await temporary.find("alice", base.id) is None
    with pytest.raises(LookupError):  # deleted on the spot, not only hidden
        await knowledge.store.get("alice", base.id)
    assert (await knowledge.store.get("alice", permanent.id)).expires_at is None


async def test_renewing_moves_the_expiry_a_full_ttl_from_now(
    knowledge: KnowledgeService, temporary: TemporaryBases, clock: Clock
) -> None:
    base = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    clock.now = START + TTL - 10
    assert await temporary.renew("alice", base.id) == START + 2 * TTL - 10
    clock.now = START + TTL + 10
    assert await temporary.find("alice", base.id) is not None

    permanent = await knowledge.create("alice", "library")
    with pytest.raises(LookupError):  # a permanent base never becomes temporary
        await temporary.renew("alice", permanent.id)
    with pytest.raises(LookupError):
        await temporary.renew("bob", base.id)


async def test_the_sweep_deletes_only_expired_bases_at_most_once_a_minute(
    knowledge: KnowledgeService, temporary: TemporaryBases, clock: Clock
) -> None:
    old = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    bobs = await temporary.create("bob", chunk_size=750, chunk_overlap=150)
    clock.now = START + 50
    young = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    permanent = await knowledge.create("alice", "library")

    clock.now = START + TTL  # old and bobs expire now; young at START + 50 + TTL
    assert await temporary.sweep() == 2  # every owner's
    for owner, base in (("alice", old), ("bob", bobs)):
        with pytest.raises(LookupError):
            await knowledge.store.get(owner, base.id)
    assert (await knowledge.store.get("alice", young.id)).id == young.id
    assert (await knowledge.store.get("alice", permanent.id)).id == permanent.id

    clock.now = START + 50 + TTL  # young has expired, but the last sweep was 50 s ago
    assert await temporary.sweep() == 0
    assert (await knowledge.store.get("alice", young.id)).id == young.id
    clock.now = START + TTL + SWEEP_SECONDS
    assert await temporary.sweep() == 1
    with pytest.raises(LookupError):
        await knowledge.store.get("alice", young.id)
    assert await temporary.sweep(force=True) == 0  # nothing left to delete


async def test_a_swept_base_loses_its_documents_chunks_and_files(
    knowledge: KnowledgeService,
    temporary: TemporaryBases,
    clock: Clock,
    database: Database,
    tmp_path: Path,
) -> None:
    base = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    text = b"The lighthouse of Velmora is painted in red and white stripes."
    document = await knowledge.upload("alice", base, "velmora.txt", "text/plain", pieces(text))
    for _ in range(250):
        if (await knowledge.store.document("alice", base.id, document.id)).status == "ready":
            break
        await asyncio.sleep(0.02)
    found = await knowledge.search("alice", [base], "Velmora", top_k=3)
    assert [r.chunk.document_id for r in found] == [document.id]
    assert await rows(database, kb_chunks, kb_chunks.c.kb_id, base.id) > 0
    assert (tmp_path / "knowledge" / base.id).is_dir()

    clock.now = START + TTL + 1
    assert await temporary.sweep() == 1
    assert await knowledge.search("alice", [base], "Velmora", top_k=3) == []
    for _ in range(250):  # the rows and files are purged in the background
        if not await rows(database, knowledge_bases, knowledge_bases.c.id, base.id):
            break
        await asyncio.sleep(0.02)
    assert await rows(database, knowledge_bases, knowledge_bases.c.id, base.id) == 0
    assert await rows(database, kb_documents, kb_documents.c.kb_id, base.id) == 0
    assert await rows(database, kb_chunks, kb_chunks.c.kb_id, base.id) == 0
    assert not (tmp_path / "knowledge" / base.id).exists()


async def test_a_sweep_survives_a_base_another_request_deleted_first(
    knowledge: KnowledgeService, temporary: TemporaryBases, clock: Clock
) -> None:
    first = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    second = await temporary.create("alice", chunk_size=750, chunk_overlap=150)
    clock.now = START + TTL

    real_delete = knowledge.delete

    async def delete_racing(owner: str, reference: str) -> str:
        if reference == first.id:  # another instance's sweep got there first
            await real_delete(owner, reference)
        return await real_delete(owner, reference)

    knowledge.delete = delete_racing  # type: ignore[method-assign]
    assert await temporary.sweep() == 1  # first raced (LookupError), second deleted
    for base in (first, second):
        with pytest.raises(LookupError):
            await knowledge.store.get("alice", base.id)


async def test_creating_refuses_chunking_the_service_would_refuse(
    temporary: TemporaryBases,
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await temporary.create("alice", chunk_size=100, chunk_overlap=10)
    assert refused.value.param == "chunk_size"
    with pytest.raises(InvalidRequest) as refused:
        await temporary.create("alice", chunk_size=750, chunk_overlap=400)
    assert refused.value.param == "chunk_overlap"
    assert chunking_problem(750, 150) is None
    assert chunking_problem(50_000, 150) is not None
    assert chunking_problem(750, -1) is not None


async def test_find_temp_base_keeps_one_pace_per_service(knowledge: KnowledgeService) -> None:
    assert temporary_bases(knowledge) is temporary_bases(knowledge)
    base = await temporary_bases(knowledge).create("alice", chunk_size=750, chunk_overlap=150)
    found = await find_temp_base(knowledge, "alice", base.id)
    assert found is not None
    assert found.expires_at == base.expires_at
    assert await find_temp_base(knowledge, "bob", base.id) is None
