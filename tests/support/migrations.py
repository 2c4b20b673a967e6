"""A SQLite database migrated only up to an older revision: for tests of what a later
migration does to rows written before it."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

from parley.store.database import MIGRATIONS


def migrate_to(path: Path, revision: str) -> None:
    """Create (or bring) the SQLite database at ``path`` up to ``revision``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()
