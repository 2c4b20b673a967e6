"""What the routes reach: the wired object graph, stored on ``app.state.parley``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from parley.api.auth import Authenticator
from parley.cluster import Cluster
from parley.conversations.outgoing import OutgoingBuilder
from parley.conversations.service import ConversationService
from parley.interceptors.chain import InterceptorChain
from parley.mcp.service import McpService
from parley.providers.registry import ProviderRegistry
from parley.settings import Settings
from parley.store.assistants import AssistantStore
from parley.store.audit import AuditLog
from parley.store.database import Database
from parley.store.idempotency import IdempotencyStore
from parley.store.keys import KeyStore
from parley.store.meta import ConversationMeta
from parley.store.repository import ConversationStore
from parley.store.sessions import SessionStore
from parley.store.summaries import SummaryStore
from parley.streams import EventLog
from parley.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from parley.knowledge.service import KnowledgeService
    from parley.memory.service import MemoryService
    from parley.store.citations import CitationStore


@dataclass(frozen=True, slots=True)
class AppState:
    settings: Settings
    auth: Authenticator
    service: ConversationService
    conversations: ConversationStore
    keys: KeyStore
    registry: ProviderRegistry
    tools: ToolRegistry
    interceptors: InterceptorChain
    audit: AuditLog
    database: Database
    assistants: AssistantStore
    meta: ConversationMeta
    summaries: SummaryStore
    outgoing: OutgoingBuilder
    memory: MemoryService
    citations: CitationStore
    mcp: McpService
    idempotency: IdempotencyStore
    sessions: SessionStore
    cluster: Cluster
    events: EventLog
    """Streamed replies' events, for clients that resume (``parley.streams``)."""
    knowledge: KnowledgeService | None = None
    """None when ``knowledge.enabled`` is false."""
