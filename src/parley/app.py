"""``create_app(settings)``: the one place the parts are wired together.

Start-up creates the data folder and the database engine, applies migrations, marks
messages left ``streaming`` by a crash as ``interrupted``, and builds the providers.
Shutdown gives running generations a grace period, then cancels and saves them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi_offline import FastAPIOffline

from parley import __version__
from parley.agent.completion import Completer
from parley.agent.model_call import ModelCall
from parley.api import (
    admin,
    anthropic_messages,
    approvals,
    assistants,
    branches,
    chat,
    conversations,
    embeddings,
    errors,
    files,
    keys,
    memories,
    models,
    openapi,
    responses,
    session,
    summaries,
    tasks,
    usage,
)
from parley.api import knowledge as knowledge_api
from parley.api import mcp as mcp_api
from parley.api.admission import Admission
from parley.api.auth import Authenticator, RevocationWatcher, authenticated
from parley.api.chatchat import feedback as chatchat_feedback
from parley.api.chatchat import kb as chatchat_kb
from parley.api.chatchat import rag as chatchat_rag
from parley.api.chatchat import server as chatchat_server
from parley.api.chatchat import temp as chatchat_temp
from parley.api.chatchat import tools as chatchat_tools
from parley.api.chatchat.kb_tool import search_local_knowledgebase
from parley.api.cookies import SessionCache
from parley.api.idempotency import Idempotency
from parley.api.json_depth import shallow_body
from parley.api.mcp import check_admissible
from parley.api.mcp_endpoint import McpEndpoint
from parley.api.openapi import answers
from parley.api.readiness import readiness
from parley.api.shapes import Health, Readiness
from parley.api.state import AppState
from parley.api.uploads import uploads_bound
from parley.api.webui import WebUI
from parley.cluster import Cluster, RedisCluster, cluster_for
from parley.conversations.judge import ModelJudge
from parley.conversations.outgoing import OutgoingBuilder
from parley.conversations.reach import Reaches
from parley.conversations.recovery import keep_sweeping, sweep
from parley.conversations.service import ConversationService
from parley.extraction.clients import AttachmentReader, KnowledgeExtractor
from parley.extraction.pool import ReaderPool
from parley.fairness import Ledger
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.discovery import build_chain
from parley.interceptors.protocol import Services
from parley.knowledge.service import KnowledgeService, build_embedder
from parley.knowledge.types import Embedder, Judge
from parley.mcp.service import McpService
from parley.memory.service import MemoryService
from parley.memory.store import MemoryStore
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import Provider
from parley.providers.registry import ProviderRegistry, build_registry
from parley.settings import Settings
from parley.store.assistants import AssistantStore
from parley.store.audit import AuditLog
from parley.store.citations import CitationStore
from parley.store.database import Database
from parley.store.idempotency import IdempotencyStore
from parley.store.keys import KeyStore
from parley.store.mcp_servers import McpServerStore
from parley.store.meta import ConversationMeta
from parley.store.repository import ConversationStore
from parley.store.sessions import SessionStore
from parley.store.summaries import SummaryStore
from parley.streams import EventLog, MemoryEventLog, RedisEventLog
from parley.tools.builtins import build_registry as build_tools
from parley.tools.protocol import Tool
from parley.tools.registry import ToolRegistry

log = logging.getLogger("parley")


def create_app(
    settings: Settings,
    *,
    providers: Mapping[str, Provider] | None = None,
    tools: Sequence[Tool] = (),
) -> FastAPI:
    """The Parley app for ``settings`` (served by ``parley serve``; in a test, by
    ``parley.testing``). ``providers``: provider objects by name, in place of the ones
    the settings would build (``parley.testing.FunctionProvider``); with them, only
    the providers the settings name besides are built. ``tools``: server tools beside
    the built-in ones (offered as ``tools.default_tools`` or a request names them)."""
    pricing = PriceCatalog(settings.pricing)
    chain = build_chain(settings, pricing)  # a bad interceptor fails here, before serving
    # Parley as an MCP server, at /mcp
    mcp_endpoint = McpEndpoint(settings) if settings.mcp.serve else None
    ledger = Ledger()  # who is being served: admission control, and background pacing

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # what starts is closed in the reverse order, also when a later part fails to start
        async with AsyncExitStack() as stack:
            state = await _start(settings, stack, chain, pricing, ledger, providers, tools)
            app.state.parley = state
            if not await state.keys.active():
                log.warning(
                    "no API keys exist: serving loopback clients only "
                    "(create one with `parley keys create`)"
                )
            revocations = RevocationWatcher(
                state.keys,
                state.auth,
                state.service.end_for_keys,
                settings.auth.revocation_check_seconds,
            )
            stack.callback(asyncio.create_task(revocations.run()).cancel)
            if mcp_endpoint is not None:
                await stack.enter_async_context(mcp_endpoint.running())
            yield

    # /docs and /redoc with their scripts and styles served from the installed package:
    # FastAPI's own pages load them from a CDN, and are blank offline
    app = FastAPIOffline(
        title="Parley",
        version=__version__,
        description="A self-hosted agentic chat server with an OpenAI-compatible API.",
        lifespan=lifespan,
        static_url="/docs-assets",
        # no 307 to the path without its slash: answered before authentication, it
        # echoed the request's Host header in Location
        redirect_slashes=False,
    )
    errors.install(app)
    openapi.install(app)  # security, error responses, hoisted definitions
    _middleware(app, settings, ledger)
    _routes(app, settings)
    if mcp_endpoint is not None:
        mcp_endpoint.mount(app)
    return app


async def _start(
    settings: Settings,
    stack: AsyncExitStack,
    chain: InterceptorChain,
    pricing: PriceCatalog,
    ledger: Ledger,
    providers: Mapping[str, Provider] | None,
    tools: Sequence[Tool],
) -> AppState:
    """Start every part the routes use; each one's closing goes on ``stack``."""
    cluster = cluster_for(settings.redis)
    database = await _database(settings, stack, ledger, cluster)
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(600.0, connect=10.0),
        # httpcore scans its whole pool for every request: with a hundred idle
        # connections that scan dominated CPU under load (docs/performance.md).
        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=20),
        follow_redirects=False,
    )
    stack.push_async_callback(client.aclose)
    registry = build_registry(settings, client, providers)
    stack.push_async_callback(registry.aclose)
    audit = await _audit(settings, stack, database)
    # shut down even when one of them fails to start (the others may have opened things)
    stack.push_async_callback(chain.shutdown)
    await chain.startup(Services(settings, pricing, database, audit, cluster))
    readers = ReaderPool(settings.documents)  # documents are read in its processes
    stack.push_async_callback(readers.aclose)
    completer = Completer(ModelCall(settings.agent, pricing, chain))  # the server's own calls
    embedder = build_embedder(settings.knowledge, client)
    knowledge = await _knowledge(settings, database, embedder, readers, completer, registry)
    if knowledge is not None:
        stack.push_async_callback(knowledge.close)
    memory = MemoryService(MemoryStore(database), embedder)
    mcp = McpService(
        settings.mcp,
        McpServerStore(database),
        admit=partial(check_admissible, mcp=settings.mcp),  # the rules of today
    )
    await mcp.start()  # reads the rows only: servers connect on first use
    stack.push_async_callback(mcp.close)  # after the generations: stdio servers stop
    chatchat = [search_local_knowledgebase] if settings.knowledge.enabled else []
    parts = _Parts(
        settings=settings,
        database=database,
        conversations=ConversationStore(database),
        registry=registry,
        tools=build_tools(settings, extra=[*chatchat, *tools]),
        outgoing_documents=AttachmentReader(readers),
        completer=completer,
        knowledge=knowledge,
        memory=memory,
        mcp=mcp,
        cluster=cluster,
    )
    state = _state(parts, chain, audit, pricing)
    # closed in reverse: the replies end first, then their events are written, then Redis
    await _cluster(stack, cluster, state)
    stack.push_async_callback(state.events.close)
    stack.push_async_callback(state.service.shutdown, settings.agent.shutdown_grace_seconds)
    return state


async def _cluster(stack: AsyncExitStack, cluster: Cluster, state: AppState) -> None:
    """The instances' shared part: signals reach this one's replies; with others, the
    replies a dead instance left streaming are looked for all along."""
    await cluster.start(state.service.on_signal)
    stack.push_async_callback(cluster.close)
    if cluster.shared:
        sweeping = asyncio.create_task(keep_sweeping(state.conversations, cluster))
        stack.callback(sweeping.cancel)


async def _database(
    settings: Settings, stack: AsyncExitStack, ledger: Ledger, cluster: Cluster
) -> Database:
    """The database, migrated, with what a crash left running marked as cut off (with
    other instances, only what no live instance holds: ``conversations/recovery.py``)."""
    database = Database(settings)
    stack.push_async_callback(database.dispose)
    database.contended = ledger.serving_any
    await database.migrate()
    interrupted = await sweep(ConversationStore(database), cluster)
    if interrupted:
        log.warning("marked %d message(s) left streaming as interrupted", interrupted)
    if not cluster.shared:  # another instance's keys may be running
        cut_off = await IdempotencyStore(database).interrupt_running()
        if cut_off:
            log.warning("%d request(s) with an Idempotency-Key were cut off", cut_off)
    return database


async def _audit(settings: Settings, stack: AsyncExitStack, database: Database) -> AuditLog:
    audit_settings = settings.interceptors.audit
    audit = AuditLog(
        database,
        flush_seconds=audit_settings.flush_seconds,
        max_pending=audit_settings.max_pending,
        retention_days=audit_settings.retention_days,
    )
    await audit.start()
    stack.push_async_callback(audit.close)
    return audit


@dataclass(frozen=True, slots=True)
class _Parts:
    """The started parts the conversation service is built on."""

    settings: Settings
    database: Database
    conversations: ConversationStore
    registry: ProviderRegistry
    tools: ToolRegistry
    outgoing_documents: AttachmentReader
    completer: Completer
    knowledge: KnowledgeService | None
    memory: MemoryService
    mcp: McpService
    cluster: Cluster


def _state(
    parts: _Parts, chain: InterceptorChain, audit: AuditLog, pricing: PriceCatalog
) -> AppState:
    """The conversation service and the stores the routes read, over started parts."""
    settings, database = parts.settings, parts.database
    summaries = SummaryStore(database)
    meta = ConversationMeta(database)
    assistants = AssistantStore(database)
    citations = CitationStore(database)
    outgoing = OutgoingBuilder(
        settings,
        parts.registry,
        parts.completer,
        summaries,
        parts.conversations,
        parts.tools,
        knowledge=parts.knowledge,
        memory=parts.memory,
        documents=parts.outgoing_documents,
    )
    service = ConversationService(
        settings,
        parts.conversations,
        parts.registry,
        parts.tools,
        pricing,
        chain,
        meta=meta,
        assistants=assistants,
        outgoing=outgoing,
        reaches=Reaches(parts.knowledge, parts.memory),
        citations=citations,
        mcp=parts.mcp,
        cluster=parts.cluster,
    )
    keys = KeyStore(database)
    sessions = SessionStore(database)
    auth = Authenticator(
        keys,
        settings.data_dir,
        allow_loopback_without_keys=settings.auth.allow_loopback_without_keys,
        sessions=SessionCache(sessions),
    )
    return AppState(
        settings=settings,
        auth=auth,
        service=service,
        conversations=parts.conversations,
        keys=keys,
        registry=parts.registry,
        tools=parts.tools,
        interceptors=chain,
        audit=audit,
        database=database,
        assistants=assistants,
        meta=meta,
        summaries=summaries,
        outgoing=outgoing,
        knowledge=parts.knowledge,
        memory=parts.memory,
        citations=citations,
        mcp=parts.mcp,
        idempotency=IdempotencyStore(database),
        sessions=sessions,
        cluster=parts.cluster,
        events=_event_log(parts.cluster),
    )


def _event_log(cluster: Cluster) -> EventLog:
    """Streamed replies' events: in Redis when instances share it, else in memory."""
    if isinstance(cluster, RedisCluster):
        return RedisEventLog(cluster.redis, cluster.prefix)
    return MemoryEventLog()


def _middleware(app: FastAPI, settings: Settings, ledger: Ledger) -> None:
    # inside admission control: a request is admitted before it is answered or joined
    app.add_middleware(
        Idempotency,
        ttl_seconds=settings.server.idempotency_ttl_seconds,
        max_body_bytes=_largest_body(settings),
        max_response_bytes=settings.server.idempotency_max_response_bytes,
        cancel_on_disconnect=settings.server.on_disconnect == "cancel",
    )
    app.add_middleware(
        Admission,
        max_in_flight=settings.server.max_in_flight,
        max_loop_lag_ms=settings.server.max_loop_lag_ms,
        max_in_flight_per_key=settings.server.max_in_flight_per_key,
        max_other_in_flight_per_key=settings.server.max_other_in_flight_per_key,
        max_body_bytes=settings.server.max_body_bytes,
        body_timeout_seconds=settings.server.body_timeout_seconds,
        ledger=ledger,
    )


def _routes(app: FastAPI, settings: Settings) -> None:
    app.include_router(WebUI(settings.web).router())  # /, /connect, the UI's pages, /assets
    app.include_router(session.router)  # needs no key: it is how a browser gives one
    # chat and tasks authenticate before they read their bodies themselves
    app.include_router(chat.router)
    app.include_router(anthropic_messages.router)  # Anthropic's door to the chat path
    app.include_router(responses.router)  # OpenAI's Responses door to it
    app.include_router(chatchat_rag.router)  # Chatchat's knowledge chat: a chat route too
    app.include_router(tasks.router)
    # the others are authenticated before FastAPI reads and validates a body: a caller
    # without a key learns nothing of the schema and reaches no code (a regex compiled);
    # then a JSON body nested too deep is refused (chat and tasks check their own)
    for router in (
        models.router,
        embeddings.router,
        conversations.router,
        branches.router,
        summaries.router,
        approvals.router,
        files.router,
        admin.router,
        usage.router,
        assistants.router,
        knowledge_api.router,
        chatchat_kb.router,
        chatchat_temp.router,
        chatchat_tools.router,
        chatchat_server.router,
        chatchat_feedback.router,
        memories.router,
        mcp_api.router,
        keys.router,
    ):
        app.include_router(router, dependencies=[Depends(authenticated), Depends(shallow_body)])

    @app.get("/health", tags=["health"], openapi_extra=openapi.public(), **answers(Health))
    async def health(request: Request) -> dict[str, Any]:
        return {"status": "ok", "version": __version__}

    app.add_api_route(
        "/ready",
        readiness,
        methods=["GET"],
        tags=["health"],
        openapi_extra=openapi.public(),
        **answers(Readiness, errors=[503]),
    )


def _largest_body(settings: Settings) -> int:
    """The largest request body a route takes: an upload's, or any other's."""
    return max(settings.server.max_body_bytes, uploads_bound(settings.knowledge))


async def _knowledge(
    settings: Settings,
    database: Database,
    embedder: Embedder | None,
    readers: ReaderPool,
    completer: Completer,
    registry: ProviderRegistry,
) -> KnowledgeService | None:
    """The knowledge bases' service, started (None when ``knowledge.enabled`` is off)."""
    if not settings.knowledge.enabled:
        return None
    knowledge = KnowledgeService(
        settings.knowledge,
        database,
        settings.data_dir / "knowledge",
        embedder,
        extractor=KnowledgeExtractor(
            readers,
            timeout_seconds=settings.knowledge.extract_timeout_seconds,
            max_pdf_pages=settings.knowledge.max_pdf_pages,
        ),
        judge=_judge(settings, completer, registry),
    )
    await knowledge.start()
    return knowledge


def _judge(settings: Settings, completer: Completer, registry: ProviderRegistry) -> Judge | None:
    """The model that keeps the passages that answer (``knowledge.judge_model``), if any."""
    model = settings.knowledge.judge_model
    if not model:
        return None
    timeout = settings.knowledge.judge_timeout_seconds
    return ModelJudge(completer, registry, model, timeout=timeout)
