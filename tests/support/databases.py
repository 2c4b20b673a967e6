"""One migrated SQLite database per test process, copied wherever a test would otherwise
migrate a fresh one: running every Alembic migration costs far more than copying the
file they leave.

``tests/conftest.py`` names the directory the template is built in (once per test
process, on first use: under pytest-xdist, once per worker). Without it (this module
used outside the suite's session) nothing is copied and databases are migrated as
before. Tests of the migrations themselves (``tests/store/test_migration*``,
``tests.support.migrations.migrate_to``) never come here: they migrate from scratch.
``tests/store/test_migrated_template.py`` checks that a copy has the very schema a fresh
migration builds."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

from parley.settings import Settings
from parley.store.database import Database

DATABASE_FILE = "parley.db"
"""The file a data dir's SQLite database is kept in (``Settings.database_url``)."""

_lock = threading.Lock()
_directory: Path | None = None
_template: Path | None = None


def use_template_directory(directory: Path | None) -> None:
    """Build the template in ``directory`` when first needed (None: copy nothing)."""
    global _directory, _template
    with _lock:
        _directory, _template = directory, None


def migrated_template() -> Path | None:
    """The template database: built by ``Database.migrate`` on its first use, then
    checkpointed, so that the one file holds all of it (no ``-wal`` or ``-shm`` beside
    it). None when no directory was named."""
    global _template
    with _lock:
        if _template is None and _directory is not None:
            _template = fresh_migrated_database(_directory)
        return _template


def fresh_migrated_database(data_dir: Path) -> Path:
    """A database migrated from scratch in ``data_dir`` by ``Database.migrate``, as the
    server does at start-up, then checkpointed into its main file; that file."""

    async def migrate() -> None:
        database = Database(Settings(data_dir=data_dir))
        try:
            await database.migrate()
        finally:
            await database.dispose()

    # in a thread of its own: the caller may be a test's running event loop
    with ThreadPoolExecutor(1, thread_name_prefix="parley-template") as pool:
        pool.submit(lambda: asyncio.run(migrate())).result()
    path = data_dir / DATABASE_FILE
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    leftovers = [p.name for p in _companions(path) if p.exists()]
    assert not leftovers, f"the migrated database left {leftovers} beside it"
    return path


def copy_migrated(settings: Settings) -> bool:
    """Put a copy of the template where ``settings`` keep their SQLite database, unless
    they name another database (``database.url``) or one is there already; whether it
    was copied."""
    if settings.database.url is not None:
        return False
    return copy_migrated_to(settings.data_dir)


def copy_migrated_to(data_dir: Path) -> bool:
    """``copy_migrated`` for the default database of ``data_dir``."""
    path = data_dir / DATABASE_FILE
    if any(p.exists() for p in (path, *_companions(path))):
        return False  # the test's own database: left as it is
    template = migrated_template()
    if template is None:
        return False
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    return True


async def migrated_database(settings: Settings) -> Database:
    """``Database(settings)``, migrated: a copy of the template where there was no
    database yet, else migrated as the server would."""
    copied = copy_migrated(settings)
    database = Database(settings)
    if not copied:
        await database.migrate()
    return database


def _companions(path: Path) -> tuple[Path, Path]:
    return path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")
