"""Each chunk's script: ``kb_chunks.script`` (``knowledge.lexical.script``: 0 Latin and
the rest, 1 CJK).

A cross-lingual embedder (multilingual-e5-small) gives a question higher cosines with
every chunk in its own language than with any in the other: the vector search compares
a chunk with the others of its script (``knowledge/vectors.py``). Existing chunks are
labelled here from their text, a batch at a time, by the rule as it was when this
migration was written (a copy: a migration never changes with the code).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BATCH = 2_000
LATIN, CJK = 0, 1
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_LETTERS = re.compile(rf"[^\W\d_{_CJK}]")


def script(text: str) -> int:
    """CJK when CJK characters are at least a fifth of the letters."""
    if text.isascii():
        return LATIN
    cjk = len(_CJK_CHAR.findall(text))
    if not cjk:
        return LATIN
    others = len(_LETTERS.findall(text))
    return CJK if cjk >= 0.2 * (cjk + others) else LATIN


def upgrade() -> None:
    # a plain ADD COLUMN: a batch copy of kb_chunks would drop its FTS5 triggers
    op.add_column(
        "kb_chunks", sa.Column("script", sa.SmallInteger, nullable=False, server_default="0")
    )
    conn = op.get_bind()
    chunks = sa.table("kb_chunks", sa.column("id", sa.Integer), sa.column("text", sa.Text))
    after = 0
    while True:
        rows = conn.execute(
            sa.select(chunks.c.id, chunks.c.text)
            .where(chunks.c.id > after)
            .order_by(chunks.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        cjk = [row.id for row in rows if script(row.text) == CJK]
        if cjk:
            conn.execute(
                sa.text("UPDATE kb_chunks SET script = :cjk WHERE id IN :ids").bindparams(
                    sa.bindparam("ids", expanding=True)
                ),
                {"cjk": CJK, "ids": cjk},
            )
        after = rows[-1].id


def downgrade() -> None:
    op.drop_column("kb_chunks", "script")  # SQLite 3.35 and later drop it in place
