"""``idempotency_keys.message_id``: the reply a running streamed request is producing,
so that the same key sent to another instance joins its stream (through the reply's
event log, ``parley.streams``) instead of being told it is in use.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("idempotency_keys", sa.Column("message_id", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.drop_column("message_id")
