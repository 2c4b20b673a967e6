"""Fixtures the interceptor tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from parley.settings import Settings
from parley.store.audit import AuditLog
from parley.store.database import Database


@pytest.fixture
async def audit(tmp_path: Path) -> AsyncIterator[AuditLog]:
    """An audit log on a fresh SQLite database (nothing written until a flush)."""
    database = Database(Settings(data_dir=tmp_path))
    await database.migrate()
    log = AuditLog(database)
    yield log
    await log.close()
    await database.dispose()
