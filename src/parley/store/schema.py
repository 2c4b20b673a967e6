"""Table definitions (SQLAlchemy Core). Migrations in ``migrations/`` must match them.

Times are float seconds since the epoch (UTC), the same on SQLite and PostgreSQL.
Message parts are JSON (see ``messages.parts_to_json``). Every row has an ``owner``.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, ForeignKey, Index, MetaData, String, Table, Text, text

metadata = MetaData()

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("title", Text, nullable=True),
    Column("head_id", String(40), nullable=True),
    Column("meta", JSON, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_conversations_owner_updated", "owner", "updated_at"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("owner", String(200), nullable=False),
    Column("parent_id", String(40), nullable=True),
    Column("role", String(16), nullable=False),
    Column("parts", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("model", String(256), nullable=True),
    Column("usage", JSON, nullable=True),
    Column("finish_reason", String(32), nullable=True),
    Column("error", JSON, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_messages_conversation", "conversation_id", "created_at"),
    # only rows still streaming (crash recovery at start-up): tiny, rarely touched
    Index(
        "ix_messages_streaming",
        "status",
        sqlite_where=text("status = 'streaming'"),
        postgresql_where=text("status = 'streaming'"),
    ),
)
