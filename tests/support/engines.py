"""What a test that runs on both database engines (``tests/conftest.py``'s ``database``)
uses when a case is about one engine's own machinery."""

from __future__ import annotations

import pytest

from parley.store.database import Database


def sqlite_only(database: Database, what: str) -> None:
    """Skip on PostgreSQL: ``what`` exists only on SQLite."""
    if not database.is_sqlite:
        pytest.skip(f"SQLite only: {what} (PostgreSQL has none)")
