"""Fixtures the interceptor tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from parley.settings import Settings
from parley.store.audit import AuditLog
from tests.support.databases import migrated_database


@pytest.fixture
async def audit(tmp_path: Path) -> AsyncIterator[AuditLog]:
    """An audit log on a fresh SQLite database (nothing written until a flush)."""
    database = await migrated_database(Settings(data_dir=tmp_path))
    log = AuditLog(database)
    yield log
    await log.close()
    await database.dispose()
