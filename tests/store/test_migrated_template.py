"""The suite's databases are copies of one migrated template per test process
(``tests.support.databases``): a copy must be exactly what running every migration on
a fresh file builds, and a test's own database is never replaced."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from tests.support.databases import (
    DATABASE_FILE,
    copy_migrated_to,
    fresh_migrated_database,
    migrated_template,
)

from parley.store.database import Database

pytestmark = pytest.mark.anyio


def _contents(path: Path) -> dict[str, object]:
    """What a database holds: its schema (every table, index, trigger and view, with
    its SQL), the rows of each table (the migrations' bookkeeping included), and the
    pragmas a migration could set."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        schema = sorted(
            connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(),
            key=repr,
        )
        tables = [name for kind, name, _, _ in schema if kind == "table"]
        rows = {
            table: sorted(connection.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in tables
        }
        pragmas = {
            name: connection.execute(f"PRAGMA {name}").fetchall()
            for name in ("user_version", "application_id", "journal_mode", "auto_vacuum")
        }
        integrity = connection.execute("PRAGMA integrity_check").fetchall()
    return {"schema": schema, "rows": rows, "pragmas": pragmas, "integrity": integrity}


def test_a_copy_of_the_template_is_a_freshly_migrated_database(tmp_path: Path) -> None:
    fresh = fresh_migrated_database(tmp_path / "fresh")
    assert copy_migrated_to(tmp_path / "copy")
    copied = tmp_path / "copy" / DATABASE_FILE
    assert [p.name for p in copied.parent.iterdir()] == [DATABASE_FILE]  # no WAL beside it
    contents = _contents(copied)
    assert contents == _contents(fresh)
    assert contents["integrity"] == [("ok",)]


async def test_the_database_fixture_is_a_copy_at_the_newest_revision(database: Database) -> None:
    current, head = await database.migration_state()
    assert current == head
    template = migrated_template()
    assert template is not None  # the session named where to build it


def test_a_test_s_own_database_is_left_alone(tmp_path: Path) -> None:
    own = tmp_path / DATABASE_FILE
    own.write_bytes(b"")
    assert not copy_migrated_to(tmp_path)
    assert own.read_bytes() == b""
    wal_only = tmp_path / "wal"
    wal_only.mkdir()
    (wal_only / f"{DATABASE_FILE}-wal").write_bytes(b"")
    assert not copy_migrated_to(wal_only)
    assert not (wal_only / DATABASE_FILE).exists()
