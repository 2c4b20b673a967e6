"""The assistant repository: owner scoping, names, partial updates, pages; and the
migrations build exactly the tables ``schema.py`` describes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection
from tests.support import postgres

from parley.errors import Conflict
from parley.settings import Settings
from parley.store.assistants import Assistant, AssistantMemory, AssistantStore, RegexRule
from parley.store.database import Database
from parley.store.schema import metadata

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(database: Database) -> AssistantStore:
    return AssistantStore(database)


@pytest.fixture(params=["sqlite", "postgresql"])
async def migrated_from_scratch(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Database]:
    """A database every migration ran on (not a copy of the suite's template), on
    each engine."""
    url = postgres.empty_database() if request.param == "postgresql" else None
    database = Database(Settings(data_dir=tmp_path, database={"url": url}))
    await database.migrate()
    yield database
    await database.dispose()


@pytest.mark.filterwarnings("ignore:Did not recognize type 'vector'")
async def test_the_migrations_match_the_schema(migrated_from_scratch: Database) -> None:
    def differences(conn: Connection) -> list[object]:
        def include_name(name: str | None, type_: str, parents: object) -> bool:
            # the FTS5 tables (and their shadow tables) are made by hand in 0005, and
            # on PostgreSQL its GIN indexes over to_tsvector; pgvector's column (0013,
            # a type SQLAlchemy does not know) and its HNSW indexes, made at run time
            if type_ == "table" and name is not None and "_fts" in name:
                return False
            if type_ == "column" and name == "vec":
                return False
            by_hand = ("ix_kb_chunks_vec_", "ix_kb_chunks_terms", "ix_memories_terms")
            return not (type_ == "index" and name and name.startswith(by_hand))

        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": include_name}
        )
        return list(compare_metadata(context, metadata))

    assert await migrated_from_scratch.read(differences) == []


async def test_create_and_read_back_every_field(store: AssistantStore) -> None:
    created = await store.create(
        "alice",
        {
            "name": "coder",
            "description": "writes code",
            "system_prompt": "You write Python.",
            "model": "fast",
            "sampling": {"temperature": 0.1, "stop": ["END"]},
            "reasoning_effort": "high",
            "tools": ("web_fetch",),
            "tool_policies": {"mcp__*": "ask"},
            "knowledge_bases": ("kb_1", "kb_2"),
            "memory": AssistantMemory(enabled=True, retrieval=True, scope="global"),
            "regex_rules": (RegexRule("foo", "bar", ("assistant",), True),),
            "transformers": {"time_reminder": True, "lorebook": [{"keywords": ["x"]}]},
            "generate_titles": False,
        },
    )
    assert created.id.startswith("asst_")
    assert created.owner == "alice"
    assert created.created_at == created.updated_at > 0
    assert await store.get("alice", created.id) == created
    assert await store.get("alice", "coder") == created
    assert await store.get_by_name("alice", "coder") == created
    assert created.memory.scope == "global"
    assert created.regex_rules[0].roles == ("assistant",)
    assert created.generate_suggestions is True


async def test_defaults(store: AssistantStore) -> None:
    created = await store.create("alice", {"name": "plain"})
    assert created == Assistant(
        id=created.id,
        owner="alice",
        name="plain",
        created_at=created.created_at,
        updated_at=created.updated_at,
    )
    assert await store.get("alice", "plain") == created


async def test_another_owner_sees_nothing(store: AssistantStore) -> None:
    mine = await store.create("alice", {"name": "shared name"})
    for attempt in (
        store.get("bob", mine.id),
        store.get("bob", "shared name"),
        store.get_by_name("bob", "shared name"),
        store.update("bob", mine.id, {"description": "taken over"}),
        store.delete("bob", mine.id),
    ):
        with pytest.raises(LookupError):
            await attempt
    assert await store.list("bob", limit=10) == []
    # names are unique per owner only
    theirs = await store.create("bob", {"name": "shared name"})
    assert theirs.id != mine.id
    assert (await store.get("alice", mine.id)).description == ""


async def test_names_are_unique_per_owner(store: AssistantStore) -> None:
    first = await store.create("alice", {"name": "a"})
    second = await store.create("alice", {"name": "b"})
    with pytest.raises(Conflict) as caught:
        await store.create("alice", {"name": "a"})
    assert caught.value.status == 409
    assert caught.value.param == "name"
    with pytest.raises(Conflict):
        await store.update("alice", second.id, {"name": "a"})
    assert (await store.get("alice", second.id)).name == "b"
    # renaming to its own name is no conflict; the writer still works after a conflict
    assert (await store.update("alice", first.id, {"name": "a"})).name == "a"
    assert [a.name for a in await store.list("alice", limit=10)] == ["b", "a"]


async def test_update_changes_only_what_is_given(store: AssistantStore) -> None:
    created = await store.create(
        "alice", {"name": "a", "system_prompt": "keep", "sampling": {"temperature": 1.0}}
    )
    updated = await store.update(
        "alice", "a", {"model": "fast", "memory": AssistantMemory(enabled=True)}
    )
    assert updated.id == created.id
    assert (updated.model, updated.memory.enabled) == ("fast", True)
    assert (updated.system_prompt, updated.sampling) == ("keep", {"temperature": 1.0})
    assert updated.updated_at >= created.updated_at
    assert updated.created_at == created.created_at
    assert await store.update("alice", created.id, {}) == updated
    cleared = await store.update("alice", created.id, {"model": None, "name": "renamed"})
    assert cleared.model is None
    assert await store.get("alice", "renamed") == cleared
    with pytest.raises(LookupError):
        await store.get("alice", "a")
    with pytest.raises(ValueError, match="not editable"):
        await store.update("alice", created.id, {"owner": "bob"})


async def test_delete_by_id_or_name(store: AssistantStore) -> None:
    first = await store.create("alice", {"name": "one"})
    await store.create("alice", {"name": "two"})
    assert await store.delete("alice", first.id) == first.id
    assert await store.delete("alice", "two")
    assert await store.list("alice", limit=10) == []
    with pytest.raises(LookupError):
        await store.delete("alice", first.id)


async def test_pages_run_newest_first(store: AssistantStore) -> None:
    names = [f"n{i}" for i in range(7)]
    for name in names:
        await store.create("alice", {"name": name})
    await store.create("bob", {"name": "other"})
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await store.list("alice", limit=3, after=after)
        seen += [a.name for a in page]
        if len(page) < 3:
            break
        after = page[-1].id
    assert seen == names[::-1]
