"""Table definitions (SQLAlchemy Core). Migrations in ``migrations/`` must match them.

Times are float seconds since the epoch (UTC), the same on SQLite and PostgreSQL.
Message parts are JSON (see ``messages.parts_to_json``). Every row has an ``owner``.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

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
    Column("admin", Boolean, nullable=False, server_default=false()),
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
    Column("status", String(32), nullable=False),  # awaiting_approval: 17 (migration 0014)
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

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("owner", String(200), nullable=False),
    Column("key_id", String(40), nullable=False),
    # model, tool, or detection (the sensitive-content filter's findings)
    Column("kind", String(16), nullable=False),
    # the model's public name, the tool's name, or the rule that matched
    Column("name", String(256), nullable=False),
    Column("purpose", String(16), nullable=True),
    Column("source", String(32), nullable=True),
    Column("conversation_id", String(64), nullable=True),
    Column("message_id", String(40), nullable=True),
    Column("call_id", String(64), nullable=True),
    Column("provider", String(100), nullable=True),
    Column("upstream_model", String(256), nullable=True),
    Column("attempt", Integer, nullable=True),
    Column("input_tokens", Integer, nullable=True),
    Column("output_tokens", Integer, nullable=True),
    Column("cost_usd", Float, nullable=True),
    # a model call's finish reason (or error / cancelled); ok / error for a tool; for a
    # detection, what was done (replaced, rejected, redacted)
    Column("outcome", String(64), nullable=False),
    Column("error_code", String(64), nullable=True),
    Column("latency_ms", Float, nullable=True),
    # SHA-256 of the request as sent upstream (model calls) or of the tool's name and
    # arguments: equal requests have equal hashes, and no content is kept
    Column("request_hash", String(64), nullable=True),
    Column("detail", JSON, nullable=True),
    Index("ix_audit_owner_at", "owner", "at"),
    Index("ix_audit_at", "at"),
)

usage_counters = Table(
    "usage_counters",
    metadata,
    Column("key_id", String(40), primary_key=True),
    Column("period", String(16), primary_key=True),  # 2026-12-01 (a UTC day), 2026-12
    Column("tokens", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("calls", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# named presets per owner (store/assistants.py); structured settings are validated JSON
assistants = Table(
    "assistants",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("name", String(100), nullable=False),
    Column("description", Text, nullable=False),
    Column("system_prompt", Text, nullable=False),
    Column("model", String(256), nullable=True),
    Column("sampling", JSON, nullable=False),
    Column("reasoning_effort", String(16), nullable=True),
    Column("tools", JSON, nullable=False),
    Column("tool_policies", JSON, nullable=False),
    Column("knowledge_bases", JSON, nullable=False),
    Column("memory", JSON, nullable=False),
    Column("regex_rules", JSON, nullable=False),
    Column("transformers", JSON, nullable=False),
    Column("generate_titles", Boolean, nullable=False),
    Column("generate_suggestions", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # MCP server names (mcp_servers.name or the config file's), all their tools offered
    Column("mcp_servers", JSON, nullable=False, server_default=text("'[]'")),
    UniqueConstraint("owner", "name", name="uq_assistants_owner_name"),
    Index("ix_assistants_owner_created", "owner", "created_at"),
)

# rolling context summaries (store/summaries.py): each covers an exact branch prefix
summaries = Table(
    "summaries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "conversation_id",
        String(64),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("owner", String(200), nullable=False),
    Column("covers", JSON, nullable=False),  # message ids, oldest first
    Column("text", Text, nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("instructions", Text, nullable=True),
    Column("model", String(256), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("reverted_at", Float, nullable=True),
    Index("ix_summaries_conversation_created", "conversation_id", "created_at"),
)

# knowledge bases (knowledge/store.py): documents are stored under server-made ids in
# data_dir/knowledge/<kb id>/<document id>; the file name is only metadata
knowledge_bases = Table(
    "knowledge_bases",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("name", String(100), nullable=False),
    Column("description", Text, nullable=False),
    # the embedding model of every vector in this knowledge base ("" until the first
    # vector is written; vectors of another model are never compared with these)
    Column("embedding_model", String(200), nullable=False),
    Column("dimensions", Integer, nullable=True),
    Column("chunk_size", Integer, nullable=False),
    Column("chunk_overlap", Integer, nullable=False),
    # bumped whenever the searchable set changes: other instances reload their vectors
    Column("version", Integer, nullable=False),
    # being deleted (its chunks are purged in the background): hidden from everything
    Column("deleting", Boolean, nullable=False, server_default=false()),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # a temporary base (Chatchat's file chat, knowledge/temporary.py) is deleted after
    # this time and left out of the listings; null: a permanent base
    Column("expires_at", Float, nullable=True),
    UniqueConstraint("owner", "name", name="uq_knowledge_bases_owner_name"),
    Index("ix_knowledge_bases_expires", "expires_at"),
)

# a document is its own ingestion job: queued -> indexing -> ready | failed | cancelled;
# only the chunks of a ready document are searched
kb_documents = Table(
    "kb_documents",
    metadata,
    Column("id", String(40), primary_key=True),
    Column(
        "kb_id", String(40), ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False
    ),
    Column("owner", String(200), nullable=False),
    Column("filename", String(500), nullable=False),
    Column("content_type", String(200), nullable=True),
    Column("size", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("error", Text, nullable=True),
    Column("chunks_total", Integer, nullable=True),
    Column("chunks_done", Integer, nullable=False),
    Column("pages", Integer, nullable=True),
    Column("title", Text, nullable=True),
    # the number of its latest indexing run: a run writes only while it is still this
    # (store/kb_documents.py, is_current_run)
    Column("run", Integer, nullable=False, server_default=text("0")),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_kb_documents_kb_created", "kb_id", "created_at"),
    Index("ix_kb_documents_status", "status"),
)

# chunks: text, its search terms (lexical.index_terms: words and CJK pairs, the FTS5 /
# tsvector input) and its vector (float32 bytes, unit length; null: not embedded)
kb_chunks = Table(
    "kb_chunks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "document_id",
        String(40),
        ForeignKey("kb_documents.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("kb_id", String(40), nullable=False),
    Column("owner", String(200), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("terms", Text, nullable=False),
    Column("page", Integer, nullable=True),
    Column("section", Text, nullable=True),
    Column("text_hash", String(64), nullable=False),
    Column("embedding", LargeBinary, nullable=True),
    Column("script", SmallInteger, nullable=False, server_default="0"),  # lexical.script
    Index("ix_kb_chunks_kb", "kb_id"),
    Index("ix_kb_chunks_document", "document_id", "ordinal"),
    # ids are never reused: a citation's chunk id never comes to name another chunk
    sqlite_autoincrement=True,
)

# vectors by (model, SHA-256 of the text): re-ingesting or re-embedding costs nothing
embedding_cache = Table(
    "embedding_cache",
    metadata,
    Column("model", String(200), primary_key=True),
    Column("text_hash", String(64), primary_key=True),
    Column("vector", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
)

# long-term memories (memory/store.py): per assistant (assistant_id) or global (null)
memories = Table(
    "memories",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("assistant_id", String(40), nullable=True),
    Column("text", Text, nullable=False),
    Column("terms", Text, nullable=False),
    Column("source", String(16), nullable=False),  # api | tool
    Column("conversation_id", String(64), nullable=True),
    Column("embedding_model", String(200), nullable=True),
    Column("embedding", LargeBinary, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_memories_owner_assistant", "owner", "assistant_id"),
)

# what a reply was given to cite: the knowledge snippets sent with the request or
# returned by a knowledge tool, kept with the message (chunk ids may outlive their chunk)
citations = Table(
    "citations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("message_id", String(40), ForeignKey("messages.id", ondelete="CASCADE"), nullable=False),
    Column("conversation_id", String(64), nullable=False),
    Column("owner", String(200), nullable=False),
    Column("source", String(16), nullable=False),  # context | tool
    Column("rank", Integer, nullable=False),
    Column("chunk_id", Integer, nullable=True),
    Column("document_id", String(40), nullable=True),
    Column("kb_id", String(40), nullable=True),
    Column("title", Text, nullable=True),
    Column("score", Float, nullable=True),
    Column("excerpt", Text, nullable=False),
    Column("page", Integer, nullable=True),
    Column("section", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Index("ix_citations_message", "message_id", "rank"),
)

# MCP servers added over the admin API (store/mcp_servers.py); the config file's are not
# here. ``config`` is McpServerSettings as JSON, secrets in plain text like the config file
mcp_servers = Table(
    "mcp_servers",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("config", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# Requests sent with an Idempotency-Key (store/idempotency.py): one row per key of one
# API key (``scope`` is the key's id, or ``local``), the request's fingerprint, and once
# it has ended the response to replay. ``state``: running, done, or interrupted (the
# process answering it ended first). Rows leave at ``expires_at``.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(40), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("status", Integer, nullable=True),
    Column("headers", JSON, nullable=True),
    Column("body", LargeBinary, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    # the reply a running streamed request produces: a retry elsewhere joins it (0015)
    Column("message_id", String(40), nullable=True),
    Index("ix_idempotency_expires", "expires_at"),
)

# Browser sessions (store/sessions.py): a signed-in browser's cookie holds a random token;
# only its SHA-256 is kept, with the API key it stands for. A session counts only while
# that key is active and until ``expires_at``.
web_sessions = Table(
    "web_sessions",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("key_id", String(40), ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_web_sessions_expires", "expires_at"),
    Index("ix_web_sessions_key", "key_id"),
)

# Feedback on a reply (store/feedback.py; Chatchat's POST /chat/feedback): one row per
# message, the latest score (0-100) and reason; ``updated_at`` is when it was last given
message_feedback = Table(
    "message_feedback",
    metadata,
    Column(
        "message_id",
        String(40),
        ForeignKey("messages.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("owner", String(200), nullable=False),
    Column("score", Integer, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
