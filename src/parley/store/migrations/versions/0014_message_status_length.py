"""``messages.status`` holds "awaiting_approval" (17 characters): VARCHAR(32), not 16.

SQLite never enforced the length, so nothing was cut there; PostgreSQL refused every
turn that paused for approval ("value too long for type character varying(16)"), which
is how the first run of the API tests on PostgreSQL found it. On SQLite the column is
copied (a batch migration) so that the schema says what the code writes.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.alter_column(
            "status", existing_type=sa.String(16), type_=sa.String(32), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.alter_column(
            "status", existing_type=sa.String(32), type_=sa.String(16), existing_nullable=False
        )
