"""Knowledge documents number their indexing runs.

``kb_documents.run`` is the number of a document's latest indexing run (0: never
indexed since this migration). Every write of a run checks it in its own transaction,
so that a run whose document was deleted, replaced or queued again meanwhile writes
nothing more (``store/kb_documents.py``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # SQLite adds a NOT NULL column with a default in place; PostgreSQL fills existing
    # rows from the default
    with op.batch_alter_table("kb_documents") as batch:
        batch.add_column(sa.Column("run", sa.Integer, nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    with op.batch_alter_table("kb_documents") as batch:
        batch.drop_column("run")
