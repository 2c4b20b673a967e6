"""Rolling context summaries: each covers an exact prefix of a conversation's branch.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "summaries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("covers", sa.JSON, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("instructions", sa.Text, nullable=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("reverted_at", sa.Float, nullable=True),
    )
    op.create_index(
        "ix_summaries_conversation_created", "summaries", ["conversation_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_summaries_conversation_created", table_name="summaries")
    op.drop_table("summaries")
