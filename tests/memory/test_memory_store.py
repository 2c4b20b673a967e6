"""The memory repository: owner and scope are conditions of every query, the FTS5 index
follows inserts, edits and deletes, CJK text is searchable, vectors are kept per model,
and the limits hold."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import Connection, text

from parley.errors import InvalidRequest
from parley.memory import store as store_module
from parley.memory.store import (
    GLOBAL,
    MAX_TEXT_CHARS,
    Memory,
    MemoryLimitReached,
    MemoryStore,
    assistant_of,
)
from parley.store.database import Database
from tests.support.assistants import own_assistants
from tests.support.engines import sqlite_only

pytestmark = pytest.mark.anyio

ASSISTANT = "asst_0000000000000000000000aa"
OTHER_ASSISTANT = "asst_0000000000000000000000bb"


@pytest.fixture
async def store(database: Database) -> MemoryStore:
    await own_assistants(database, "alice", ASSISTANT, OTHER_ASSISTANT)
    return MemoryStore(database)


async def _remember(
    store: MemoryStore, text: str, *, owner: str = "alice", assistant_id: str | None = None
) -> Memory:
    return await store.create(owner, text, assistant_id=assistant_id, source="api")


def _unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


async def _fts_rowids(database: Database, term: str) -> list[int]:
    """Rows of ``memories_fts`` matching ``term``, read straight from the index."""

    def query(conn: Connection) -> list[int]:
        rows = conn.execute(
            text("SELECT rowid FROM memories_fts WHERE memories_fts MATCH :term"),
            {"term": f'"{term}"'},
        ).all()
        return sorted(int(row.rowid) for row in rows)

    return await database.read(query)


async def _rowid(database: Database, memory_id: str) -> int:
    def query(conn: Connection) -> int:
        return int(
            conn.execute(text("SELECT rowid FROM memories WHERE id = :id"), {"id": memory_id})
            .one()
            .rowid
        )

    return await database.read(query)


async def _fts_is_consistent(database: Database) -> None:
    """FTS5's own check of an external-content index against its table."""

    def check(conn: Connection) -> None:
        conn.execute(text("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')"))

    await database.write(check)


async def test_create_and_read_back(store: MemoryStore) -> None:
    created = await store.create(
        "alice",
        "  The user prefers metric units.  ",
        assistant_id=ASSISTANT,
        source="tool",
        conversation_id="conv_1",
    )
    assert created.id.startswith("mem_")
    assert created.text == "The user prefers metric units."  # stripped
    assert (created.owner, created.assistant_id, created.scope) == ("alice", ASSISTANT, ASSISTANT)
    assert (created.source, created.conversation_id) == ("tool", "conv_1")
    assert created.embedding_model is None
    assert created.created_at == created.updated_at > 0
    assert await store.get("alice", created.id) == created
    assert await store.get("alice", created.id, scope=ASSISTANT) == created
    plain = await _remember(store, "global fact")
    assert (plain.assistant_id, plain.scope) == (None, GLOBAL)


async def test_another_owner_never_sees_or_changes_a_memory(store: MemoryStore) -> None:
    mine = await store.create(
        "alice",
        "alice keeps a secret recipe",
        assistant_id=None,
        source="api",
        embedding_model="m",
        vector=_unit(1, 0),
    )
    for attempt in (
        store.get("bob", mine.id),
        store.get("bob", mine.id, scope=GLOBAL),
        store.update("bob", mine.id, "bob was here"),
        store.delete("bob", mine.id),
        store.delete("bob", mine.id, scope=GLOBAL),
    ):
        with pytest.raises(LookupError):
            await attempt
    assert await store.list("bob", limit=10) == []
    assert await store.list("bob", limit=10, scope=GLOBAL) == []
    assert await store.search("bob", GLOBAL, "secret recipe", limit=10) == []
    found, matrix = await store.vectors("bob", GLOBAL, "m")
    assert (found, matrix.size) == ([], 0)
    assert await store.unembedded("bob", GLOBAL, "other", limit=10) == []
    assert await store.set_vectors("bob", "m2", [(mine, _unit(0, 1))]) == 0
    assert await store.delete_all("bob", GLOBAL) == 0
    # bob's own memory with the same words does not reach alice either
    theirs = await _remember(store, "bob keeps a secret recipe", owner="bob")
    assert [m.id for m, _ in await store.search("alice", GLOBAL, "secret", limit=10)] == [mine.id]
    assert [m.id for m, _ in await store.search("bob", GLOBAL, "secret", limit=10)] == [theirs.id]
    assert await store.get("alice", mine.id) == mine


async def test_scopes_filter_every_query(store: MemoryStore) -> None:
    own = await _remember(store, "tea without sugar", assistant_id=ASSISTANT)
    other = await _remember(store, "tea with lemon", assistant_id=OTHER_ASSISTANT)
    shared = await _remember(store, "tea in the morning")

    assert [m.id for m in await store.list("alice", limit=10, scope=ASSISTANT)] == [own.id]
    assert [m.id for m in await store.list("alice", limit=10, scope=GLOBAL)] == [shared.id]
    assert {m.id for m in await store.list("alice", limit=10)} == {own.id, other.id, shared.id}
    assert [m.id for m, _ in await store.search("alice", ASSISTANT, "tea", limit=10)] == [own.id]
    assert [m.id for m, _ in await store.search("alice", GLOBAL, "tea", limit=10)] == [shared.id]

    with pytest.raises(LookupError):
        await store.get("alice", own.id, scope=GLOBAL)
    with pytest.raises(LookupError):
        await store.delete("alice", own.id, scope=OTHER_ASSISTANT)
    assert await store.delete_all("alice", OTHER_ASSISTANT) == 1
    assert {m.id for m in await store.list("alice", limit=10)} == {own.id, shared.id}
    assert await store.delete("alice", own.id, scope=ASSISTANT) == own.id
    assert [m.id for m in await store.list("alice", limit=10)] == [shared.id]


def test_a_scope_is_global_or_an_assistant_id() -> None:
    assert assistant_of(GLOBAL) is None
    assert assistant_of(ASSISTANT) == ASSISTANT
    for bad in ("", "Researcher", "asst_" + "x" * 40):
        with pytest.raises(ValueError, match="not a memory scope"):
            assistant_of(bad)


async def test_the_index_follows_edits_and_deletes(store: MemoryStore, database: Database) -> None:
    sqlite_only(database, "FTS5's external-content index and the triggers that keep it")
    memory = await _remember(store, "The blue notebook is in the drawer")
    rowid = await _rowid(database, memory.id)
    assert await _fts_rowids(database, "notebook") == [rowid]

    updated = await store.update("alice", memory.id, "The red folder is on the shelf")
    assert updated.text == "The red folder is on the shelf"
    assert updated.updated_at >= memory.updated_at
    assert await _fts_rowids(database, "notebook") == []
    assert await _fts_rowids(database, "folder") == [rowid]
    assert [m.id for m, _ in await store.search("alice", GLOBAL, "notebook", limit=5)] == []
    assert [m.id for m, _ in await store.search("alice", GLOBAL, "folder", limit=5)] == [memory.id]
    await _fts_is_consistent(database)

    await store.delete("alice", memory.id)
    assert await _fts_rowids(database, "folder") == []
    await _remember(store, "one")
    await _remember(store, "two", assistant_id=ASSISTANT)
    assert await store.delete_all("alice", ASSISTANT) == 1
    assert await _fts_rowids(database, "two") == []
    await _fts_is_consistent(database)


async def test_chinese_text_is_found_by_a_chinese_query(store: MemoryStore) -> None:
    tea = await _remember(store, "用户喜欢喝绿茶，不加糖。")
    await _remember(store, "用户住在上海。")
    await _remember(store, "The user likes green tea.")
    assert [m.id for m, _ in await store.search("alice", GLOBAL, "绿茶", limit=5)] == [tea.id]
    liked = await store.search("alice", GLOBAL, "喜欢什么茶", limit=5)  # shares 喜欢
    assert [m.id for m, _ in liked] == [tea.id]
    assert await store.search("alice", GLOBAL, "咖啡", limit=5) == []


async def test_search_ranks_and_ignores_query_syntax(store: MemoryStore) -> None:
    both = await _remember(store, "Rust and Python are the user's languages")
    one = await _remember(store, "Python 3.11 is installed on the laptop")
    await _remember(store, "The user cycles to work")
    found = await store.search("alice", GLOBAL, "python rust", limit=5)
    assert [m.id for m, _ in found] == [both.id, one.id]
    assert found[0][1] > found[1][1]
    # FTS5 operators and quotes in the query are plain words
    assert await store.search("alice", GLOBAL, 'NEAR("python" OR) * ^', limit=5) != []
    assert await store.search("alice", GLOBAL, "   ", limit=5) == []
    assert await store.search("alice", GLOBAL, "python", limit=0) == []


async def test_pages_run_newest_first(store: MemoryStore) -> None:
    made = [await _remember(store, f"fact number {i}") for i in range(5)]
    await _remember(store, "bob's", owner="bob")
    seen: list[str] = []
    after: str | None = None
    while True:
        rows = await store.list("alice", limit=2, after=after)
        seen += [m.id for m in rows]
        if len(rows) < 2:
            break
        after = rows[-1].id
    assert seen == [m.id for m in reversed(made)]


async def test_remembering_the_same_text_twice_keeps_one(store: MemoryStore) -> None:
    first = await _remember(store, "The user is vegetarian")
    again = await _remember(store, "  The user is vegetarian ")
    elsewhere = await _remember(store, "The user is vegetarian", assistant_id=ASSISTANT)
    assert again == first
    assert elsewhere.id != first.id
    assert len(await store.list("alice", limit=10)) == 2


async def test_text_limits(store: MemoryStore) -> None:
    with pytest.raises(InvalidRequest, match="must not be empty"):
        await _remember(store, "  \n ")
    with pytest.raises(InvalidRequest) as caught:
        await _remember(store, "x" * (MAX_TEXT_CHARS + 1))
    assert caught.value.code == "memory_too_long"
    assert (await _remember(store, "x" * MAX_TEXT_CHARS)).text == "x" * MAX_TEXT_CHARS
    memory = await _remember(store, "short")
    with pytest.raises(InvalidRequest):
        await store.update("alice", memory.id, "")


async def test_an_owner_has_a_memory_limit(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_MEMORIES", 2)
    await _remember(store, "one")
    await _remember(store, "two", assistant_id=ASSISTANT)
    with pytest.raises(MemoryLimitReached) as caught:
        await _remember(store, "three")
    assert caught.value.status == 409
    assert "full" in caught.value.message
    assert await _remember(store, "one") is not None  # an existing text is no new memory
    assert (await _remember(store, "bob's first", owner="bob")).owner == "bob"  # per owner
    assert len(await store.list("alice", limit=10)) == 2


async def test_vectors_are_kept_per_model(store: MemoryStore) -> None:
    a = await store.create(
        "alice", "a", assistant_id=None, source="api", embedding_model="m1", vector=_unit(1, 0)
    )
    b = await store.create(
        "alice", "b", assistant_id=None, source="api", embedding_model="m1", vector=_unit(1, 1)
    )
    c = await store.create(
        "alice", "c", assistant_id=None, source="api", embedding_model="m2", vector=_unit(0, 1)
    )
    d = await _remember(store, "d")
    await store.create(
        "alice", "e", assistant_id=ASSISTANT, source="api", embedding_model="m1", vector=_unit(1)
    )
    assert a.embedding_model == "m1"

    found, matrix = await store.vectors("alice", GLOBAL, "m1")
    assert [m.id for m in found] == [b.id, a.id]  # newest first
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(matrix, np.stack([_unit(1, 1), _unit(1, 0)]))
    assert [m.id for m in (await store.vectors("alice", GLOBAL, "m2"))[0]] == [c.id]
    assert [m.id for m in await store.unembedded("alice", GLOBAL, "m1", limit=10)] == [d.id, c.id]
    assert [m.id for m in (await store.vectors("alice", GLOBAL, "m1", limit=1))[0]] == [b.id]

    # an edit drops the old vector unless it brings a new one
    edited = await store.update("alice", a.id, "a, edited")
    assert edited.embedding_model is None
    assert [m.id for m in (await store.vectors("alice", GLOBAL, "m1"))[0]] == [b.id]
    renewed = await store.update(
        "alice", b.id, "b, edited", embedding_model="m1", vector=_unit(2, 1)
    )
    assert renewed.embedding_model == "m1"
    np.testing.assert_allclose((await store.vectors("alice", GLOBAL, "m1"))[1], [_unit(2, 1)])

    # vectors made for a text that has changed since are not stored
    stale = await store.set_vectors("alice", "m1", [(a, _unit(1, 0)), (edited, _unit(0, 1))])
    assert stale == 1
    assert (await store.get("alice", a.id)).embedding_model == "m1"

    # deleting a memory deletes its vector
    await store.delete("alice", b.id)
    assert [m.id for m in (await store.vectors("alice", GLOBAL, "m1"))[0]] == [a.id]


async def test_a_vector_is_one_row(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="one non-empty row"):
        await store.create(
            "alice",
            "x",
            assistant_id=None,
            source="api",
            embedding_model="m",
            vector=np.zeros((2, 2), dtype=np.float32),
        )
