"""What is PostgreSQL's own in the database layer: transactions that keep SQLite's
meaning under concurrency, a pool that survives a restart, and the statement timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from tests.support import postgres

from parley.settings import Settings
from parley.store.database import Database

pytestmark = pytest.mark.anyio


async def on_postgres(tmp_path: Path, **database: Any) -> Database:
    url = postgres.new_database()
    return Database(Settings(data_dir=tmp_path, database={"url": url, **database}))


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Database]:
    database = await on_postgres(tmp_path)
    yield database
    await database.dispose()


async def test_concurrent_read_then_write_transactions_lose_no_update(pg: Database) -> None:
    """Each reads a number and writes it plus one: at READ COMMITTED two of them read
    the same number and one update is lost; run as on SQLite, none is."""
    await pg.write(lambda conn: conn.execute(text("CREATE TABLE tally (n integer)")))
    await pg.write(lambda conn: conn.execute(text("INSERT INTO tally VALUES (0)")))

    def increment(conn: Connection) -> None:
        n = conn.execute(text("SELECT n FROM tally")).scalar_one()
        conn.execute(text("SELECT pg_sleep(0.01)"))  # others read meanwhile
        conn.execute(text("UPDATE tally SET n = :n"), {"n": n + 1})

    await asyncio.gather(*(pg.write(increment) for _ in range(6)))
    assert await pg.read(lambda conn: conn.execute(text("SELECT n FROM tally")).scalar_one()) == 6


async def test_the_pool_recovers_after_postgresql_restarts(pg: Database) -> None:
    def one(conn: Connection) -> int:
        return int(conn.execute(text("SELECT 1")).scalar_one())

    assert await pg.read(one) == 1  # a pooled connection now exists
    await asyncio.to_thread(postgres.restart)
    assert await pg.read(one) == 1  # the dead connection was replaced, not used
    assert await pg.write(one) == 1


async def test_a_statement_past_the_timeout_is_cancelled(tmp_path: Path) -> None:
    database = await on_postgres(tmp_path, statement_timeout_ms=100)
    try:
        with pytest.raises(DBAPIError, match="statement timeout"):
            await database.read(lambda conn: conn.execute(text("SELECT pg_sleep(2)")))
        assert await database.read(lambda conn: conn.execute(text("SELECT 2")).scalar_one()) == 2
    finally:
        await database.dispose()


async def test_instances_starting_together_migrate_one_after_the_other(tmp_path: Path) -> None:
    url = postgres.empty_database()
    databases = [Database(Settings(data_dir=tmp_path, database={"url": url})) for _ in range(3)]
    try:
        await asyncio.gather(*(database.migrate() for database in databases))
        current, head = await databases[0].migration_state()
        assert current == head
    finally:
        for database in databases:
            await database.dispose()
