"""Knowledge bases, their documents, chunks and lexical index; the embedding cache;
memories; citations.

SQLite: the lexical index is an FTS5 table over ``kb_chunks.terms`` (external content,
kept in step by triggers, so a cascade delete of a document or knowledge base removes its
index entries too), and one over ``memories.terms``. PostgreSQL: GIN indexes on
``to_tsvector('simple', terms)``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

FTS_TABLES = ("kb_chunks", "memories")


def upgrade() -> None:
    op.create_table(
        "knowledge_bases",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("embedding_model", sa.String(200), nullable=False),
        sa.Column("dimensions", sa.Integer, nullable=True),
        sa.Column("chunk_size", sa.Integer, nullable=False),
        sa.Column("chunk_overlap", sa.Integer, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("deleting", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("owner", "name", name="uq_knowledge_bases_owner_name"),
    )
    op.create_table(
        "kb_documents",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "kb_id",
            sa.String(40),
            sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("filename", sa.String(500), nullable=False),
        sa.Column("content_type", sa.String(200), nullable=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("chunks_total", sa.Integer, nullable=True),
        sa.Column("chunks_done", sa.Integer, nullable=False),
        sa.Column("pages", sa.Integer, nullable=True),
        sa.Column("title", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_kb_documents_kb_created", "kb_documents", ["kb_id", "created_at"])
    op.create_index("ix_kb_documents_status", "kb_documents", ["status"])
    op.create_table(
        "kb_chunks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "document_id",
            sa.String(40),
            sa.ForeignKey("kb_documents.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kb_id", sa.String(40), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("terms", sa.Text, nullable=False),
        sa.Column("page", sa.Integer, nullable=True),
        sa.Column("section", sa.Text, nullable=True),
        sa.Column("text_hash", sa.String(64), nullable=False),
        sa.Column("embedding", sa.LargeBinary, nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_kb_chunks_kb", "kb_chunks", ["kb_id"])
    op.create_index("ix_kb_chunks_document", "kb_chunks", ["document_id", "ordinal"])
    op.create_table(
        "embedding_cache",
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("text_hash", sa.String(64), primary_key=True),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "memories",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("assistant_id", sa.String(40), nullable=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("terms", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("embedding_model", sa.String(200), nullable=True),
        sa.Column("embedding", sa.LargeBinary, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_memories_owner_assistant", "memories", ["owner", "assistant_id"])
    op.create_table(
        "citations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "message_id",
            sa.String(40),
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("chunk_id", sa.Integer, nullable=True),
        sa.Column("document_id", sa.String(40), nullable=True),
        sa.Column("kb_id", sa.String(40), nullable=True),
        sa.Column("title", sa.Text, nullable=True),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("excerpt", sa.Text, nullable=False),
        sa.Column("page", sa.Integer, nullable=True),
        sa.Column("section", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_citations_message", "citations", ["message_id", "rank"])

    if op.get_bind().dialect.name == "sqlite":
        for table in FTS_TABLES:
            _sqlite_fts(table)
    else:
        for table in FTS_TABLES:
            op.execute(
                f"CREATE INDEX ix_{table}_terms ON {table} USING gin (to_tsvector('simple', terms))"
            )


def _sqlite_fts(table: str) -> None:
    """An external-content FTS5 table ``{table}_fts`` over ``{table}.terms`` (rowid =
    the row's rowid), and the triggers that keep it in step."""
    fts = f"{table}_fts"
    # unicode61 splits on anything but letters and digits; the terms column already
    # holds CJK text as character pairs, space-separated (knowledge/lexical.py)
    op.execute(
        f"CREATE VIRTUAL TABLE {fts} USING fts5(terms, content='{table}', "
        f"content_rowid='rowid', tokenize='unicode61 remove_diacritics 2')"
    )
    op.execute(
        f"CREATE TRIGGER {table}_fts_insert AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, terms) VALUES (new.rowid, new.terms); END"
    )
    op.execute(
        f"CREATE TRIGGER {table}_fts_delete AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, terms) VALUES ('delete', old.rowid, old.terms); END"
    )
    op.execute(
        f"CREATE TRIGGER {table}_fts_update AFTER UPDATE OF terms ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, terms) VALUES ('delete', old.rowid, old.terms); "
        f"INSERT INTO {fts}(rowid, terms) VALUES (new.rowid, new.terms); END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in FTS_TABLES:
            for event in ("insert", "delete", "update"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_fts_{event}")
            op.execute(f"DROP TABLE IF EXISTS {table}_fts")
    for table in ("citations", "memories", "embedding_cache", "kb_chunks", "kb_documents"):
        op.drop_table(table)
    op.drop_table("knowledge_bases")
