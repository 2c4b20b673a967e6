"""Browser sessions: the hash of a signed-in browser's cookie and the key it stands for.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column(
            "key_id",
            sa.String(40),
            sa.ForeignKey("api_keys.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_web_sessions_expires", "web_sessions", ["expires_at"])
    op.create_index("ix_web_sessions_key", "web_sessions", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_web_sessions_key", "web_sessions")
    op.drop_index("ix_web_sessions_expires", "web_sessions")
    op.drop_table("web_sessions")
