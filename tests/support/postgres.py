"""A real PostgreSQL with pgvector for the suite, started by the tests themselves.

``pgserver`` (PyPI, in the dev extra) bundles PostgreSQL 16 and pgvector as a wheel, so
no system package is needed. One server per test process (under pytest-xdist, one per
worker) in a directory of its own, listening on a Unix socket only; it is stopped and
its directory removed when the process exits. One database is migrated once
(``parley_template``); every test gets a copy of it (``CREATE DATABASE ... TEMPLATE``),
as the SQLite tests get a copy of the migrated file (``tests/support/databases.py``).

Without pgserver (a checkout set up without the dev extra) the PostgreSQL cases skip
and say why.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import os
import re
import shutil
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from parley.settings import Settings
from parley.store.database import Database

TEMPLATE = "parley_template"

_lock = threading.RLock()
_server: Any = None
_template_ready = False
_numbers = itertools.count(1)


def server() -> Any:
    """This process's ``pgserver.PostgresServer``, started on first use."""
    global _server
    with _lock:
        if _server is None:
            try:
                with warnings.catch_warnings():
                    # platformdirs, at import: "XDG_RUNTIME_DIR is not set" (its socket
                    # directory is the data directory's here)
                    warnings.simplefilter("ignore")
                    import pgserver
            except ImportError:
                pytest.skip("PostgreSQL cases need pgserver: scripts/setup.sh dev installs it")
            _server = pgserver.get_server(_own_directory() / "pgdata", cleanup_mode="stop")
            _server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        return _server


def _own_directory() -> Path:
    """A directory of the server's own, outside pytest's: as root, pgserver runs
    PostgreSQL as another user, which must reach it (pytest's temporary directories
    are root's alone: ``pg_ctl restart`` and the stop at exit were refused). Removed at
    exit, after pgserver's own stop (registered later, so run first)."""
    directory = Path(tempfile.mkdtemp(prefix="parley-pg-"))
    directory.chmod(0o755)
    atexit.register(shutil.rmtree, directory, True)
    return directory


def url(database: str) -> str:
    """The SQLAlchemy URL of ``database`` on this process's server (asyncpg, the
    server's Unix socket)."""
    socket_dir = server().get_postmaster_info().socket_dir
    return f"postgresql+asyncpg://postgres@/{database}?host={socket_dir}"


def new_database() -> str:
    """The URL of a database of its own, migrated (a copy of the template)."""
    global _template_ready
    srv = server()
    with _lock:
        if not _template_ready:
            srv.psql(f"DROP DATABASE IF EXISTS {TEMPLATE};")
            srv.psql(f"CREATE DATABASE {TEMPLATE};")
            _migrate(url(TEMPLATE))
            _template_ready = True
    name = f"parley_{os.getpid()}_{next(_numbers)}"
    srv.psql(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE};")
    return url(name)


def empty_database() -> str:
    """The URL of a database of its own with nothing in it (for migration tests)."""
    name = f"parley_{os.getpid()}_{next(_numbers)}"
    server().psql(f"CREATE DATABASE {name};")
    return url(name)


def _migrate(database_url: str) -> None:
    async def migrate() -> None:
        database = Database(Settings(database={"url": database_url}))
        try:
            await database.migrate()
        finally:
            await database.dispose()

    # in a thread of its own: the caller may be a test's running event loop
    with ThreadPoolExecutor(1, thread_name_prefix="parley-pg-template") as pool:
        pool.submit(lambda: asyncio.run(migrate())).result()


def rows(database_url: str, query: str, args: tuple[Any, ...]) -> list[Any]:
    """``query`` run on ``database_url`` (``?`` placeholders, as SQLite's), its rows
    (``asyncpg.Record``: by name and by position, as ``sqlite3.Row``)."""
    import asyncpg

    numbered = iter(range(1, len(args) + 1))
    sql = re.sub(r"\?", lambda _: f"${next(numbered)}", query)
    dsn = database_url.replace("+asyncpg", "")

    async def run() -> list[Any]:
        connection = await asyncpg.connect(dsn)
        try:
            return list(await connection.fetch(sql, *args))
        finally:
            await connection.close()

    with ThreadPoolExecutor(1, thread_name_prefix="parley-pg-rows") as pool:
        return pool.submit(lambda: asyncio.run(run())).result()


def restart() -> None:
    """Stop and start this process's PostgreSQL (``pg_ctl restart``): every connection
    open to it breaks."""
    import pgserver

    srv = server()
    pgserver.pg_ctl(
        ["-w", "-m", "fast", "restart"], pgdata=srv.pgdata, user=srv.system_user, timeout=30
    )
