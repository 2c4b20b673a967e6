"""MCP servers added over the admin API, and the MCP servers an assistant uses.

``mcp_servers`` holds one row per server added over ``/v1/mcp/servers`` (its settings
as JSON, secrets included: see ``store/mcp_servers.py``). ``assistants.mcp_servers`` is
the list of server names an assistant's requests get; existing assistants get ``[]``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_servers",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    # SQLite adds a NOT NULL column in place when it has a default (no table copy);
    # PostgreSQL fills existing rows from the default.
    with op.batch_alter_table("assistants") as batch:
        batch.add_column(
            sa.Column("mcp_servers", sa.JSON, nullable=False, server_default=sa.text("'[]'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("assistants") as batch:
        batch.drop_column("mcp_servers")
    op.drop_table("mcp_servers")
