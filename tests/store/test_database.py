"""The SQLite writer: it never blocks the loop on another process's lock, and it
recovers after a failed transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from parley.settings import Settings
from parley.store import database as database_module
from parley.store.database import Database

pytestmark = pytest.mark.anyio


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(Settings(data_dir=tmp_path, database={"busy_timeout_ms": 3000}))  # type: ignore[arg-type]
    await db.migrate()
    await db.migrate()  # a second run finds nothing to do
    yield db
    await db.dispose()


def insert_key(name: str) -> Callable[[Connection], None]:
    def transaction(conn: Connection) -> None:
        conn.execute(
            text(
                "INSERT INTO api_keys (id, owner, name, key_hash, prefix, created_at) "
                "VALUES (:id, 'o', :id, :id, 'p', 0)"
            ),
            {"id": name},
        )

    return transaction


async def count(db: Database) -> int:
    return int(await db.read(lambda c: c.execute(text("SELECT count(*) FROM api_keys")).scalar()))


async def test_a_failed_transaction_leaves_the_writer_usable(database: Database) -> None:
    await database.write(insert_key("a"))
    with pytest.raises(Exception, match="UNIQUE"):
        await database.write(insert_key("a"))

    def fails_midway(conn: Connection) -> None:
        insert_key("b")(conn)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await database.write(fails_midway)
    await database.write(insert_key("c"))
    assert await count(database) == 2  # a and c; b was rolled back


async def test_another_process_holding_the_lock_does_not_block_the_loop(
    database: Database, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "parley.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.ensure_future(ticker())
    writing = asyncio.ensure_future(database.write(insert_key("x")))
    started = time.monotonic()
    await asyncio.sleep(0.5)
    assert not writing.done()
    assert ticks >= 20  # the loop kept running while the write waited
    other.execute("COMMIT")
    other.close()
    await asyncio.wait_for(writing, 5)
    ticking.cancel()
    assert time.monotonic() - started < 3
    assert await count(database) == 1


def test_rows_written_by_the_standard_library_json_still_read() -> None:
    """Older rows may hold what orjson refuses (an escaped lone surrogate); values
    orjson cannot write are written the old way."""
    from parley.store.database import _json_text, _json_value

    assert _json_value('{"t": "\\udcff"}') == {"t": "\udcff"}
    assert _json_value(_json_text({"t": "\udcff"})) == {"t": "\udcff"}
    assert _json_value(_json_text({"n": 2**70})) == {"n": 2**70}
    assert _json_text({"t": "é"}) == '{"t":"é"}'


async def test_background_writes_leave_the_loop_most_of_its_time(database: Database) -> None:
    """Indexing writes on the loop pause after each transaction in proportion to it: a
    run of them takes the loop at most ``BACKGROUND_SHARE`` of the time."""
    busy = 0.004

    def slow(name: str) -> Callable[[Connection], None]:
        def transaction(conn: Connection) -> None:
            insert_key(name)(conn)
            until = time.perf_counter() + busy  # as a batch of chunks with their FTS rows
            while time.perf_counter() < until:
                pass

        return transaction

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticking = asyncio.ensure_future(ticker())
    began = time.perf_counter()
    for n in range(25):
        await database.write_in_background(slow(f"k{n}"))
    elapsed = time.perf_counter() - began
    ticking.cancel()
    assert elapsed >= 25 * busy / database_module.BACKGROUND_SHARE * 0.9
    assert ticks >= 25  # the loop ran other work between the writes
    assert await count(database) == 25


async def test_background_writes_run_unpaced_while_no_request_is_served(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alone (indexing a folder, nobody chatting), background writes only let the loop
    run between them; paced only while ``contended`` says requests are in flight."""
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(seconds: float) -> None:
        # only the database's own pauses: the session's event loop may run other tasks
        # that sleep too (a full run once recorded a 0.1 s timer of another test's)
        if sys._getframe(1).f_globals.get("__name__") == database_module.__name__:
            pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(database_module.asyncio, "sleep", recorded)
    serving = False
    database.contended = lambda: serving
    for n in range(3):
        await database.write_in_background(insert_key(f"quiet{n}"))
    assert pauses == [0, 0, 0]
    serving = True
    await database.write_in_background(insert_key("busy"))
    assert len(pauses) == 4
    assert pauses[-1] > 0
    assert await count(database) == 4
