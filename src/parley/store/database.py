"""The database: engines, SQLite pragmas, migrations, and how transactions are run.

Repositories write each transaction as one plain function of a SQLAlchemy
``Connection`` and hand it to ``Database.write`` or ``Database.read``:

- SQLite: writes run on the event loop itself, on one connection kept open: a write
  transaction here takes 0.1-0.3 ms and never waits for another writer of this process,
  while handing it to a thread costs more under load than the write (a busy event loop
  keeps the GIL, and the writer thread waits up to the switch interval for every
  statement: measured, a backlog of seconds at 200 turns/s). Reads run on a small
  thread pool (WAL lets them proceed during a write); they are off the hot path.
  Reads that can take long (``read(..., heavy=True)``: knowledge and message searches,
  loading a base's vectors) have a pool of their own (``database.heavy_readers``),
  queued fairly by key (``parley.fairness.FairSlots``): a key's parallel searches
  cannot take the threads that conversation reads need, nor make another key's search
  wait behind all of them. On PostgreSQL the same slots bound them.
  The writer checkpoints the WAL itself every 1,000 pages (SQLite's default): a few
  milliseconds now and then, and the WAL stays small. (A checkpoint on another thread
  never completes while the writer keeps writing, and the WAL grew by 40 MB/s.)
- PostgreSQL: the same function runs through the async engine's ``run_sync``
  (asyncpg); writes at SERIALIZABLE isolation, run again on a serialization failure,
  so that they mean what they mean on SQLite, whose writes run one at a time.

Background work (indexing a document, deleting one's chunks) writes through
``write_in_background``: the same transaction, then on SQLite a pause in proportion to
it, so that a run of them keeps the event loop busy at most ``BACKGROUND_SHARE`` of
the time and the requests in between (and the reader threads, which need the GIL the
loop holds while it writes) are not slowed down; each such transaction is kept to a
millisecond or two by its caller.

SQLite runs in WAL mode. ``synchronous`` defaults to NORMAL: in WAL mode a commit is
durable against a crash of Parley itself (the WAL is written before the commit
returns); only a power loss or OS crash can lose the last commits, never corrupt the
file. FULL also fsyncs the WAL on every commit. Set ``database.sqlite_synchronous``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from parley.fairness import FairSlots
from parley.settings import Settings

MIGRATIONS = Path(__file__).parent / "migrations"


def _always() -> bool:
    return True


def _json_text(value: object) -> str:
    """JSON columns through orjson (UTF-8 kept as is); what orjson refuses (lone
    surrogates, integers past 64 bits) goes through the standard library as before."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def _json_value(text: str | bytes) -> Any:
    """Rows written by the standard library may hold what orjson refuses to read
    (escaped lone surrogates, NaN): those are read the old way."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


LOCK_WAIT_MS = 20
"""How long one write attempt on the event loop may wait for SQLite's lock."""
LOCK_RETRY_SECONDS = 0.05
BACKGROUND_SHARE = 0.25
"""The most of the event loop's time a run of background writes takes on SQLite while
requests are being served (``Database.contended``; alone, they run flat out).
Measured indexing a 50 MB text in 250,000 chunks while another key probed the server:
at 0.5 its slowest request took 207 ms and 4,300 chunks were written a second; at 0.25,
100 ms and 2,350 a second (unpaced: 231 ms, 8,300 a second, the loop 66% busy)."""
SERIALIZATION_RETRIES = 8
SERIALIZATION_BACKOFF = 0.005
RETRIED_STATES = frozenset({"40001", "40P01"})
"""PostgreSQL's serialization failure and deadlock: the transaction is run again."""
T = TypeVar("T")
log = logging.getLogger(__name__)


class Database:
    def __init__(self, settings: Settings) -> None:
        url = settings.database_url
        self.is_sqlite = url.startswith("sqlite")
        self._sync: Engine | None = None
        self._async: AsyncEngine | None = None
        self._writer: Connection | None = None
        self._busy_seconds = settings.database.busy_timeout_ms / 1000
        self._heavy = FairSlots(settings.database.heavy_readers)
        self.contended: Callable[[], bool] = _always
        """Whether requests are being served now: background writes are paced only
        then (the app wires this to the admission ledger; unwired, they always are)."""
        self._readers: ThreadPoolExecutor | None = None
        self._heavy_readers: ThreadPoolExecutor | None = None
        if self.is_sqlite:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            self._sync = _sqlite_engine(settings)
            self._readers = ThreadPoolExecutor(
                settings.database.readers, thread_name_prefix="parley-db-read"
            )
            self._heavy_readers = ThreadPoolExecutor(
                settings.database.heavy_readers, thread_name_prefix="parley-db-search"
            )
        else:
            self._async = _postgres_engine(settings)

    async def write(self, transaction: Callable[[Connection], T]) -> T:
        """Run ``transaction`` in one write transaction and commit it.

        On SQLite, when another process holds the write lock (``parley keys``, a
        backup), the loop is not blocked: each attempt waits at most ``LOCK_WAIT_MS``
        and the next one comes after a pause, for ``busy_timeout_ms`` in all.
        """
        if self._sync is None:
            return await self._write_serializable(transaction)
        deadline = time.monotonic() + self._busy_seconds
        while True:
            try:
                return self._write_inline(transaction)
            except OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(LOCK_RETRY_SECONDS)

    async def _write_serializable(self, transaction: Callable[[Connection], T]) -> T:
        """On PostgreSQL: ``transaction`` at SERIALIZABLE isolation, run again when
        PostgreSQL aborts it for a conflict with another (``SERIALIZATION_RETRIES``).
        The repositories' transactions were written for SQLite, whose writes run one at
        a time: a read, then a write that depends on it (a conversation's meta, a
        branch's head) is only safe there. READ COMMITTED, PostgreSQL's default, lost
        the title written while the suggestions were (found by the API tests on
        PostgreSQL); SERIALIZABLE keeps SQLite's meaning for every transaction."""
        assert self._async is not None
        for attempt in range(SERIALIZATION_RETRIES):
            try:
                async with self._async.connect() as connection:
                    serial = await connection.execution_options(isolation_level="SERIALIZABLE")
                    async with serial.begin():
                        return await serial.run_sync(transaction)
            except DBAPIError as exc:
                code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
                if code not in RETRIED_STATES or attempt == SERIALIZATION_RETRIES - 1:
                    raise
            await asyncio.sleep(SERIALIZATION_BACKOFF * (attempt + 1))
        raise AssertionError("unreachable")

    async def write_in_background(self, transaction: Callable[[Connection], T]) -> T:
        """``write`` for background work: on SQLite, while requests are being served,
        followed by a pause that keeps a run of such writes to ``BACKGROUND_SHARE`` of
        the event loop's time (with nobody waiting, indexing a folder goes four times
        faster unpaced)."""
        began = time.perf_counter()
        result = await self.write(transaction)
        if self._sync is None:
            return result
        if self.contended():
            spent = time.perf_counter() - began
            await asyncio.sleep(spent * (1 - BACKGROUND_SHARE) / BACKGROUND_SHARE)
        else:
            await asyncio.sleep(0)  # the loop runs between writes all the same
        return result

    def _write_inline(self, transaction: Callable[[Connection], T]) -> T:
        writer = self._writer_connection()
        try:
            writer.exec_driver_sql("BEGIN IMMEDIATE")
            result = transaction(writer)
            writer.exec_driver_sql("COMMIT")
            return result
        except BaseException:
            self._abandon(writer)
            raise

    def _abandon(self, writer: Connection) -> None:
        """After a failed write: end any open transaction; start afresh if in doubt."""
        try:
            if writer.invalidated:
                raise RuntimeError("connection invalidated")
            raw = writer.connection.driver_connection
            if raw is not None and raw.in_transaction:
                writer.exec_driver_sql("ROLLBACK")
            if writer.in_transaction():
                writer.rollback()  # SQLAlchemy's own bookkeeping
        except Exception:
            log.warning("the database writer connection is reset after an error")
            try:
                writer.invalidate()
                writer.close()
            finally:
                self._writer = None

    def _writer_connection(self) -> Connection:
        assert self._sync is not None
        if self._writer is None or self._writer.closed or self._writer.invalidated:
            self._writer = self._sync.connect()
            # The loop never waits long for the lock; write() retries with pauses.
            self._writer.exec_driver_sql(f"PRAGMA busy_timeout={LOCK_WAIT_MS}")
        return self._writer

    async def read(self, query: Callable[[Connection], T], *, heavy: bool = False) -> T:
        """Run ``query`` on a consistent snapshot; ``heavy`` for one that can take long
        (a search): it waits its key's turn for one of the few heavy readers."""
        if not heavy:
            return await self._read(query, self._readers)
        async with self._heavy.hold():
            return await self._read(query, self._heavy_readers)

    async def _read(self, query: Callable[[Connection], T], pool: ThreadPoolExecutor | None) -> T:
        if self._sync is not None:
            assert pool is not None
            engine = self._sync

            def run() -> T:
                with engine.connect() as connection:
                    connection.exec_driver_sql("BEGIN")
                    try:
                        return query(connection)
                    finally:
                        connection.exec_driver_sql("ROLLBACK")

            return await asyncio.wrap_future(pool.submit(run))
        assert self._async is not None
        async with self._async.connect() as connection:
            return await connection.run_sync(query)

    async def migrate(self) -> None:
        """Apply every pending migration.

        On SQLite, foreign keys are off while migrating: a batch migration copies and
        drops tables, and a drop would otherwise cascade to every row that refers to
        them. The keys are checked afterwards.
        """
        if self._sync is None:
            assert self._async is not None
            async with self._async.begin() as connection:
                await connection.run_sync(_upgrade_alone)
            return
        with self._sync.connect() as connection:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            try:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                _upgrade(connection)
                problems = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if problems:
                    connection.exec_driver_sql("ROLLBACK")
                    raise RuntimeError(f"migration broke foreign keys: {problems[:5]}")
                connection.exec_driver_sql("COMMIT")
            finally:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")

    async def migration_state(self) -> tuple[str | None, str]:
        """The database's revision (None before the first migration) and the newest one."""
        current = await self.read(lambda c: MigrationContext.configure(c).get_current_revision())
        head = ScriptDirectory.from_config(_config()).get_current_head()
        assert head is not None
        return current, head

    async def dispose(self) -> None:
        if self._sync is not None:
            if self._writer is not None:
                self._writer.close()
            for pool in (self._readers, self._heavy_readers):
                if pool is not None:
                    pool.shutdown(wait=True)
            self._sync.dispose()
        if self._async is not None:
            await self._async.dispose()


def _postgres_engine(settings: Settings) -> AsyncEngine:
    """PostgreSQL through asyncpg: a pool sized from the settings whose connections are
    checked before use (``pool_pre_ping``: after PostgreSQL restarts, the dead ones are
    replaced instead of failing a request), and a statement timeout."""
    database = settings.database
    server_settings = {"application_name": "parley"}
    if database.statement_timeout_ms:
        server_settings["statement_timeout"] = str(database.statement_timeout_ms)
    return create_async_engine(
        settings.database_url,
        echo=database.echo,
        pool_size=database.pool_size,
        max_overflow=database.max_overflow,
        pool_pre_ping=True,
        json_serializer=_json_text,
        json_deserializer=_json_value,
        connect_args={"server_settings": server_settings},
    )


def _sqlite_engine(settings: Settings) -> Engine:
    url = settings.database_url.replace("+aiosqlite", "")
    engine = create_engine(
        url,
        echo=settings.database.echo,
        json_serializer=_json_text,
        json_deserializer=_json_value,
        connect_args={"check_same_thread": False, "timeout": 30},
        # every reader thread and the writer hold a connection at once
        pool_size=settings.database.readers + settings.database.heavy_readers + 2,
    )
    synchronous = settings.database.sqlite_synchronous
    busy_timeout = int(settings.database.busy_timeout_ms)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        # Transactions are begun explicitly by Database.write and Database.read.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_size_limit=67108864")  # truncate a grown WAL to 64 MB
        cursor.close()

    return engine


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _upgrade_alone(connection: Connection) -> None:
    """PostgreSQL: ``_upgrade`` under a lock held to the end of the transaction, so that
    instances starting together migrate one after the other (the next finds nothing to
    do)."""
    connection.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('parley.migrate'))")
    _upgrade(connection)


def _upgrade(connection: Connection) -> None:
    config = _config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
