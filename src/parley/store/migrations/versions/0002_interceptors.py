"""Interceptors: admin keys, the audit log, usage counters for per-key limits.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=True),
        sa.Column("source", sa.String(32), nullable=True),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("message_id", sa.String(40), nullable=True),
        sa.Column("call_id", sa.String(64), nullable=True),
        sa.Column("provider", sa.String(100), nullable=True),
        sa.Column("upstream_model", sa.String(256), nullable=True),
        sa.Column("attempt", sa.Integer, nullable=True),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("cost_usd", sa.Float, nullable=True),
        sa.Column("outcome", sa.String(64), nullable=False),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("latency_ms", sa.Float, nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("detail", sa.JSON, nullable=True),
    )
    op.create_index("ix_audit_owner_at", "audit_log", ["owner", "at"])
    op.create_index("ix_audit_at", "audit_log", ["at"])
    op.create_table(
        "usage_counters",
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("period", sa.String(16), primary_key=True),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_counters")
    op.drop_table("audit_log")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("admin")
