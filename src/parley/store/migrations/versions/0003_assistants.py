"""Assistants: named presets per owner (prompt, model, sampling, tools, transformers).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "assistants",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("system_prompt", sa.Text, nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("sampling", sa.JSON, nullable=False),
        sa.Column("reasoning_effort", sa.String(16), nullable=True),
        sa.Column("tools", sa.JSON, nullable=False),
        sa.Column("tool_policies", sa.JSON, nullable=False),
        sa.Column("knowledge_bases", sa.JSON, nullable=False),
        sa.Column("memory", sa.JSON, nullable=False),
        sa.Column("regex_rules", sa.JSON, nullable=False),
        sa.Column("transformers", sa.JSON, nullable=False),
        sa.Column("generate_titles", sa.Boolean, nullable=False),
        sa.Column("generate_suggestions", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("owner", "name", name="uq_assistants_owner_name"),
    )
    op.create_index("ix_assistants_owner_created", "assistants", ["owner", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_assistants_owner_created", table_name="assistants")
    op.drop_table("assistants")
