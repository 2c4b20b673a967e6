"""Temporary knowledge bases: ``knowledge_bases.expires_at``.

A base with an expiry is temporary (Langchain-Chatchat's file chat,
``knowledge/temporary.py``): left out of the listings and deleted once the time has
passed. Existing bases keep null: permanent.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.add_column(sa.Column("expires_at", sa.Float, nullable=True))
    op.create_index("ix_knowledge_bases_expires", "knowledge_bases", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_knowledge_bases_expires", "knowledge_bases")
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.drop_column("expires_at")
