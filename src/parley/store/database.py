"""The database engine: creation, SQLite pragmas, and migrations at start-up.

SQLite runs in WAL mode. ``synchronous`` defaults to NORMAL: in WAL mode a commit is
durable against a crash of Parley itself (the WAL is written before the commit
returns); only a power loss or OS crash can lose the last commits, never corrupt the
file. FULL also fsyncs the WAL on every commit, for machines where that matters. Set
``database.sqlite_synchronous`` to choose.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from parley.settings import Settings

MIGRATIONS = Path(__file__).parent / "migrations"
WRITE_OPTION = "parley_write"


@asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A transaction that will write: on SQLite it begins IMMEDIATE."""
    async with engine.connect() as connection:
        await connection.execution_options(**{WRITE_OPTION: True})
        async with connection.begin():
            yield connection


def create_engine(settings: Settings) -> AsyncEngine:
    url = settings.database_url
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url, echo=settings.database.echo, connect_args={"timeout": 30})
        synchronous = settings.database.sqlite_synchronous
        busy_timeout = settings.database.busy_timeout_ms

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            # We emit BEGIN ourselves (below), so that writes can take the lock up front.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _begin(connection: Connection) -> None:
            # A write transaction takes the write lock at BEGIN: a deferred transaction
            # that reads first and writes later can fail with SQLITE_BUSY at once when
            # another writer committed in between, whatever the busy timeout.
            options = connection.get_execution_options()
            if options.get("isolation_level") == "AUTOCOMMIT":
                return
            connection.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_OPTION) else "BEGIN")

        return engine
    return create_async_engine(url, echo=settings.database.echo, pool_pre_ping=True)


def _upgrade(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


@asynccontextmanager
async def autocommit(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for one atomic statement, without BEGIN and COMMIT round trips."""
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        yield connection


async def migrate(engine: AsyncEngine) -> None:
    """Apply every pending migration."""
    async with write_transaction(engine) as connection:
        await connection.run_sync(_upgrade)
