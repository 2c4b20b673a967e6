"""Heavy reads (searches) have readers of their own, taken by the waiting keys in turn:
one key's searches neither hold up another key's light reads nor queue its search
behind all of theirs. Real SQLite, real reader threads; the heavy queries wait on a gate."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy import Connection, text
from tests.support.databases import migrated_database
from tests.support.waiting import until

from parley.fairness import Ledger
from parley.settings import Settings
from parley.store.database import Database

pytestmark = pytest.mark.anyio


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    settings = Settings(data_dir=tmp_path, database={"readers": 2, "heavy_readers": 1})  # type: ignore[arg-type]
    db = await migrated_database(settings)
    yield db
    await db.dispose()


def _gated(
    gate: threading.Event, order: list[str], name: str, entered: list[str] | None = None
) -> Callable[[Connection], int]:
    def query(conn: Connection) -> int:
        if entered is not None:
            entered.append(name)  # on a heavy reader's thread, at the gate
        assert gate.wait(timeout=10)
        order.append(name)
        return int(conn.execute(text("SELECT 1")).scalar_one())

    return query


def _waiting(db: Database) -> int:
    """How many heavy reads wait for a heavy reader (``FairSlots``' queues)."""
    return sum(len(queue) for queue in db._heavy._waiting.values())


async def _read_as(
    ledger: Ledger, who: str, db: Database, query: Callable[[Connection], int]
) -> int:
    with ledger.serving(who):  # what admission control does for each request
        return await db.read(query, heavy=True)


async def test_searches_leave_the_light_readers_free(database: Database) -> None:
    gate = threading.Event()
    order: list[str] = []
    entered: list[str] = []
    ledger = Ledger()
    searches = [
        asyncio.ensure_future(
            _read_as(ledger, "a", database, _gated(gate, order, "search", entered))
        )
        for _ in range(8)
    ]
    try:
        # one search on the one heavy reader, at the gate; the other seven queued
        await until(lambda: len(entered) == 1 and _waiting(database) == 7)
        # a light read is answered while every search waits (before: 8 searches held
        # all four shared readers, and it queued behind them)
        light = await asyncio.wait_for(
            database.read(lambda c: c.execute(text("SELECT 2")).scalar_one()), timeout=5
        )
        assert light == 2
        assert order == []
    finally:
        gate.set()
    assert await asyncio.gather(*searches) == [1] * 8


async def test_another_key_s_search_waits_for_one_search_not_all(database: Database) -> None:
    gate = threading.Event()
    order: list[str] = []
    entered: list[str] = []
    ledger = Ledger()
    reads = [
        asyncio.ensure_future(
            _read_as(ledger, "a", database, _gated(gate, order, f"a{n}", entered))
        )
        for n in range(4)
    ]
    await until(lambda: entered == ["a0"] and _waiting(database) == 3)
    reads.append(asyncio.ensure_future(_read_as(ledger, "b", database, _gated(gate, order, "b"))))
    await until(lambda: _waiting(database) == 4)  # b queued behind a's three
    gate.set()
    await asyncio.gather(*reads)
    assert order == ["a0", "a1", "b", "a2", "a3"]
