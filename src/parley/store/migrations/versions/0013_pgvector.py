"""On PostgreSQL, chunks' vectors in a pgvector column: ``kb_chunks.vec``.

The vector search on PostgreSQL is pgvector's (``knowledge/pgvector.py``): exact where
the planner finds it cheaper (a small base), an HNSW index (cosine) over the vectors of
one size otherwise. The column is ``vector`` without a size, since bases of different
embedding models live in one table; each size gets an HNSW index of its own, over
``vec::vector(n)``, created when a base of that size is first searched.

``kb_chunks.embedding`` (little-endian float32) stays the record on both engines: SQLite
searches it in memory, and an export reads it. Existing rows are copied here a batch at
a time. Nothing happens on SQLite.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-08
"""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BATCH = 1_000


def vector_text(blob: bytes) -> str:
    """pgvector's text form of little-endian float32 bytes (a copy: a migration never
    changes with the code)."""
    return "[" + ",".join(repr(float(v)) for v in np.frombuffer(blob, dtype="<f4")) + "]"


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    # the extension's own error says what is missing when the server has no pgvector
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute("ALTER TABLE kb_chunks ADD COLUMN vec vector")
    after = 0
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT id, embedding FROM kb_chunks WHERE id > :after "
                "AND embedding IS NOT NULL ORDER BY id LIMIT :n"
            ),
            {"after": after, "n": BATCH},
        ).all()
        if not rows:
            break
        conn.execute(
            sa.text("UPDATE kb_chunks SET vec = CAST(:vec AS vector) WHERE id = :id"),
            [{"id": row.id, "vec": vector_text(row.embedding)} for row in rows],
        )
        after = rows[-1].id


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE kb_chunks DROP COLUMN vec")
