"""The shapes of what Parley's own ``/v1`` routes answer, for the OpenAPI schema.

Each model here is documentation: the routes build their bodies themselves (the
``*_json`` functions beside them), and the schema fuzzing suite checks that what they
send matches these. Objects are closed (``additionalProperties: false``) so that a field
added to a body and not here is caught; free-form values (sampling, transformer
settings, message parts, audit details) stay open.

What does not belong here: chat completions, chunks and tasks
(``api/completion_shapes.py``), Langchain-Chatchat's bodies (``api/chatchat/shapes.py``),
request bodies (beside their routes).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MessageStatus = Literal[
    "streaming", "complete", "incomplete", "failed", "interrupted", "awaiting_approval"
]
DocumentStatus = Literal["queued", "indexing", "ready", "failed", "cancelled", "deleting"]


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Page(Shape):
    object: Literal["list"]
    has_more: bool
    first_id: str | None
    last_id: str | None


class Deleted(Shape):
    id: str
    object: str
    deleted: Literal[True]


class Health(Shape):
    status: Literal["ok"]
    version: str


class Readiness(Shape):
    """``/ready``: whether this instance should be sent requests, and each check."""

    status: Literal["ready", "not_ready"]
    database: str
    redis: str
    accepting: bool


# --- conversations -----------------------------------------------------------------------


class Conversation(Shape):
    id: str
    object: Literal["conversation"]
    title: str | None
    assistant_id: str | None = Field(description="The assistant it was started with.")
    created_at: float
    updated_at: float


class ConversationList(_Page):
    data: list[Conversation]


class Citation(Shape):
    rank: int
    source: Literal["context", "tool"]
    chunk_id: int | None
    document_id: str | None
    knowledge_base_id: str | None
    title: str | None
    score: float | None
    excerpt: str
    page: int | None
    section: str | None


class Versions(Shape):
    count: int
    index: int
    ids: list[str]


class PendingCall(Shape):
    """A server tool call of a paused reply that waits for a person's decision."""

    id: str
    tool: str
    arguments: str
    expires_at: float = Field(
        description="When approving it stops being possible (tools.approval_ttl_seconds after "
        "it was asked); it can still be denied or answered."
    )
    expired: bool


class Feedback(Shape):
    """The latest feedback on a reply (Chatchat's ``POST /chat/feedback``)."""

    score: int = Field(ge=0, le=100)
    reason: str
    time: float = Field(description="When it was given (seconds since the epoch).")


class Message(Shape):
    id: str
    object: Literal["conversation.message"]
    parent_id: str | None
    role: Literal["system", "user", "assistant"]
    content: str
    parts: list[dict[str, Any]]
    status: MessageStatus
    model: str | None
    usage: dict[str, Any] | None
    finish_reason: str | None
    error: dict[str, Any] | None
    created_at: float
    updated_at: float
    citations: list[Citation] = Field(default_factory=list, description="Replies only.")
    versions: Versions | None = None
    pending_approvals: list[PendingCall] | None = Field(
        default=None, description="A reply awaiting approval: the calls that wait."
    )
    feedback: Feedback | None = Field(default=None, description="Replies given feedback only.")


class ConversationDetail(Conversation):
    messages: list[Message]
    suggestions: list[str]


class Cancellation(Shape):
    id: str
    object: Literal["conversation.cancellation"]
    cancelled: bool
    message_id: str | None


class Summary(Shape):
    id: str
    object: Literal["conversation.summary"]
    text: str
    covers: list[str]
    tokens: int
    model: str
    instructions: str | None
    created_at: float
    reverted_at: float | None
    applies: bool


class SummaryState(Shape):
    conversation_id: str
    summary: Summary | None
    history: list[Summary]


class Compacted(Shape):
    conversation_id: str
    summary: Summary


class SummaryReverted(Shape):
    conversation_id: str
    reverted: Summary | None
    summary: Summary | None


# --- browser sessions and keys -----------------------------------------------------------


class Session(Shape):
    object: Literal["session"]
    keys_required: bool = Field(description="False: no key exists (keyless loopback use).")
    signed_in: bool
    owner: str | None
    key_id: str | None = Field(description="The key acted as; null for keyless use.")
    key_name: str | None
    admin: bool
    expires_at: float | None = Field(
        description="When the browser session ends, when the session cookie signed this "
        "request in; else null."
    )


class ApiKey(Shape):
    id: str
    object: Literal["api_key"]
    owner: str
    name: str
    prefix: str = Field(description="The key's first characters, to recognise it by.")
    admin: bool
    created_at: float
    revoked_at: float | None


class ApiKeyList(_Page):
    data: list[ApiKey]


class NewApiKey(ApiKey):
    key: str = Field(description="The key itself, shown only in this answer.")


# --- models, audit, usage, interceptors --------------------------------------------------


class ModelEntry(Shape):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(Shape):
    object: Literal["list"]
    data: list[ModelEntry]


class AuditRow(Shape):
    id: int
    at: float
    owner: str
    key_id: str
    kind: str
    name: str
    purpose: str | None
    source: str | None
    conversation_id: str | None
    message_id: str | None
    call_id: str | None
    provider: str | None
    upstream_model: str | None
    attempt: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    outcome: str
    error_code: str | None
    latency_ms: float | None
    request_hash: str | None
    detail: Any


class AuditList(Shape):
    object: Literal["list"]
    data: list[AuditRow]
    has_more: bool
    next_before_id: int | None


class UsagePeriod(Shape):
    period: str
    tokens: int
    cost_usd: float
    calls: int
    limit_tokens: int | None
    limit_cost_usd: float | None
    resets_at: str


class Usage(Shape):
    object: Literal["usage"]
    key_id: str
    key_name: str | None
    limits_enabled: bool
    day: UsagePeriod
    month: UsagePeriod


class Interceptor(Shape):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str
    order: int
    fail_closed: bool
    source: str
    class_: str = Field(alias="class")
    hooks: list[str]
    details: dict[str, Any]


class InterceptorList(Shape):
    object: Literal["list"]
    data: list[Interceptor]


# --- assistants --------------------------------------------------------------------------


class AssistantMemory(Shape):
    enabled: bool
    retrieval: bool
    scope: Literal["assistant", "global"]


class AssistantRegexRule(Shape):
    pattern: str
    replacement: str
    roles: list[Literal["user", "assistant"]]
    display_only: bool


class Assistant(Shape):
    id: str
    object: Literal["assistant"]
    name: str
    description: str
    system_prompt: str
    model: str | None
    sampling: dict[str, Any]
    reasoning_effort: Literal["low", "medium", "high", "max"] | None
    tools: list[str]
    tool_policies: dict[str, Literal["auto", "ask", "deny"]]
    knowledge_bases: list[str]
    mcp_servers: list[str]
    memory: AssistantMemory
    regex_rules: list[AssistantRegexRule]
    transformers: dict[str, Any]
    generate_titles: bool
    generate_suggestions: bool
    created_at: float
    updated_at: float


class AssistantList(_Page):
    data: list[Assistant]


# --- knowledge bases ---------------------------------------------------------------------


class KnowledgeBase(Shape):
    id: str
    object: Literal["knowledge_base"]
    name: str
    description: str
    embedding_model: str | None
    dimensions: int | None
    reindex_needed: bool = Field(
        description="The base's chunks are not embedded with the server's model (another "
        "model, or none): it is searched by words only until POST .../reindex "
        "(`parley kb reindex --stale`)."
    )
    chunk_size: int
    chunk_overlap: int
    documents: int
    chunks: int
    created_at: float
    updated_at: float


class KnowledgeBaseList(_Page):
    data: list[KnowledgeBase]


class Document(Shape):
    id: str
    object: Literal["knowledge_base.document"]
    knowledge_base_id: str
    filename: str
    content_type: str | None
    size: int
    sha256: str
    status: DocumentStatus
    error: str | None
    chunks_total: int | None
    chunks_done: int
    progress: float | None
    pages: int | None
    title: str | None
    created_at: float
    updated_at: float


class DocumentList(_Page):
    data: list[Document]
    counts: dict[str, int] = Field(description="Documents per status.")


class UploadFailure(Shape):
    filename: str
    error: str
    code: str | None


class UploadResult(Shape):
    object: Literal["list"]
    data: list[Document]
    failed_files: list[UploadFailure]


class Reindexed(Shape):
    queued: int


class SearchHit(Shape):
    rank: int
    score: float
    chunk_id: str
    knowledge_base_id: str
    knowledge_base: str
    document_id: str
    filename: str
    title: str | None
    page: int | None
    section: str | None
    text: str


class SearchResults(Shape):
    object: Literal["list"]
    data: list[SearchHit]


# --- memories ----------------------------------------------------------------------------


class MemoryRecord(Shape):
    id: str
    object: Literal["memory"]
    text: str
    assistant_id: str | None
    source: Literal["api", "tool"]
    conversation_id: str | None
    created_at: float
    updated_at: float


class MemoryList(_Page):
    data: list[MemoryRecord]


class MemoryHit(MemoryRecord):
    score: float


class MemoryHits(Shape):
    object: Literal["list"]
    data: list[MemoryHit]


# --- MCP servers -------------------------------------------------------------------------


class McpServerConfig(Shape):
    transport: Literal["stdio", "http", "sse"]
    command: str | None
    args: list[str]
    cwd: str | None
    env: dict[str, str] = Field(description="Values shown as ***.")
    url: str | None
    headers: dict[str, str] = Field(description="Values shown as ***.")
    bearer_token: str | None = Field(description="*** when set.")
    bearer_token_env: str | None
    timeout: float
    enabled: bool


class McpSkippedTool(Shape):
    name: str
    reason: str


class McpServer(Shape):
    name: str
    object: Literal["mcp.server"]
    source: Literal["config", "api"] | None
    transport: str | None
    enabled: bool | None
    connected: bool | None
    tool_count: int | None
    latency_ms: float | None
    quarantined_for_seconds: float | None
    consecutive_failures: int | None
    skipped_tools: list[McpSkippedTool]
    created_at: float | None
    last_error: str | None = Field(default=None, description="Admins only.")
    refused: str | None = Field(default=None, description="Admins only.")
    config: McpServerConfig | None = Field(default=None, description="Admins only.")


class McpServerList(Shape):
    object: Literal["list"]
    data: list[McpServer]


class McpSkipped(Shape):
    name: str
    reason: str


class McpImport(Shape):
    object: Literal["mcp.import"]
    created: list[str]
    updated: list[str]
    skipped: list[McpSkipped]


class McpTool(Shape):
    name: str
    object: Literal["mcp.tool"]
    tool: str
    description: str
    parameters: dict[str, Any]


class McpToolList(Shape):
    object: Literal["list"]
    data: list[McpTool]


class McpServerDeleted(Deleted):
    name: str
