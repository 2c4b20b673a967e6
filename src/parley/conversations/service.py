"""The conversation service: turns a chat request into a stored, running generation.

Stateless and stateful in one call. Without ``conversation_id`` the request's messages
are the whole history and are all recorded in a new conversation. With it, the stored
branch is the history and the request's last message (or its trailing tool results,
which answer the stored assistant's calls) is the new turn. The user message is saved
before generation starts. A turn may also answer at a stored message (regenerate, edit)
or carry a reply paused for approval on (decisions); ``history.py`` reads where it goes.

Before anything changes, the request's own errors are found (``_check``): a bad request
never stops the reply in progress. Then, for a stored conversation, under its session
(one reply at a time), the generation is prepared: model, sampling and tools from the
request and its assistant, approval policies, the records to write, and how the
outgoing request is shaped (``outgoing.py``, when the generation runs). After a
successful turn in a conversation the client named, a title and suggestions are written
in the background (``titles.py``); a stateless request gets neither (``_after_turn``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

from parley.agent.completion import Completer
from parley.agent.loop import AgentLoop, AgentRequest
from parley.agent.model_call import ModelCall
from parley.cluster import Cluster, Signal
from parley.conversations.assistants import (
    Assistant,
    regex_rules,
    tool_policies,
)
from parley.conversations.checks import check_input, check_plan, usable
from parley.conversations.citations import Citations
from parley.conversations.finishing import Finisher
from parley.conversations.generation import (
    Generation,
    GenerationSpec,
    Origin,
    Sink,
)
from parley.conversations.history import History, TurnPlan
from parley.conversations.outgoing import Outgoing, OutgoingBuilder
from parley.conversations.reach import Reaches
from parley.conversations.records import turn_record
from parley.conversations.sampling import request_template
from parley.conversations.sessions import Cancellation, Sessions
from parley.conversations.titles import TitleWriter
from parley.conversations.turn_tools import TurnTools
from parley.conversations.turns import ChatTurn
from parley.errors import AuthenticationFailed, InvalidRequest, NotFound, Overloaded, ParleyError
from parley.identity import Caller
from parley.ids import new_id
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import TurnInfo
from parley.mcp.service import McpService
from parley.messages import (
    Message,
)
from parley.patterns import Budget
from parley.providers.options import check_options, refuse_unsupported, sent_options
from parley.providers.pricing import PriceCatalog
from parley.providers.registry import ProviderRegistry, ResolvedModel
from parley.settings import Settings
from parley.store.assistants import AssistantStore
from parley.store.citations import CitationStore
from parley.store.meta import ConversationMeta
from parley.store.repository import ConversationStore
from parley.tools.builtins.workspace import SEARCH_SECONDS
from parley.tools.protocol import Reach
from parley.tools.registry import ToolRegistry
from parley.transforms.images import ImageSaver, inline_own_images
from parley.transforms.output import store_user_messages, turn_budget

log = logging.getLogger(__name__)

ASSISTANT_CACHE = 50_000
"""Conversations whose assistant id is kept in memory."""
_UNKNOWN = object()


class ConversationService:
    def __init__(
        self,
        settings: Settings,
        store: ConversationStore,
        registry: ProviderRegistry,
        tools: ToolRegistry | None = None,
        pricing: PriceCatalog | None = None,
        chain: InterceptorChain | None = None,
        meta: ConversationMeta | None = None,
        assistants: AssistantStore | None = None,
        outgoing: OutgoingBuilder | None = None,
        reaches: Reaches | None = None,
        citations: CitationStore | None = None,
        mcp: McpService | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self._settings = settings
        self._reaches = reaches or Reaches(None, None)
        self._citations = citations
        self._history = History(store, settings.tools.approval_ttl_seconds)
        self._assistants = assistants
        self._assistant_of: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._outgoing = outgoing
        self._store = store
        self._registry = registry
        self._tools = tools or ToolRegistry()
        self._turn_tools = TurnTools(settings, self._tools, mcp)
        self._running: set[Generation] = set()
        self._sessions = Sessions(settings.chat.session_idle_seconds, cluster)
        self.shutting_down = False
        self._shutdown_task: asyncio.Future[None] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        pricing = pricing or PriceCatalog(settings.pricing)
        self.completer = Completer(ModelCall(settings.agent, pricing, chain or InterceptorChain()))
        """The server's own one-shot model calls (titles, suggestions, summaries)."""
        self._titles = (
            None
            if meta is None
            else TitleWriter(
                self.completer, meta, store, max_suggestions=settings.chat.max_suggestions
            )
        )
        self._background: set[asyncio.Task[None]] = set()
        self.images = ImageSaver(settings.data_dir / "files", "/v1/files")
        """Images of replies, saved as files (``GET /v1/files/{id}``)."""
        self._agent = AgentLoop(
            settings=settings,
            tools=self._tools,
            pricing=pricing,
            store=store,
            shutting_down=lambda: self.shutting_down,
            chain=chain,
        )

    @property
    def running(self) -> int:
        """Generations still running, whether or not a client is attached."""
        return len(self._running)

    def begin_shutdown(self, grace_seconds: float) -> None:
        """Refuse new turns at once; agent loops stop at their next step. Generations
        still running after ``grace_seconds`` are ended: saved as interrupted, and their
        clients told. Call on the event loop (``request_shutdown`` from elsewhere)."""
        if self.shutting_down:
            return
        self.shutting_down = True
        self._shutdown_task = asyncio.ensure_future(self._end_running(grace_seconds))

    def request_shutdown(self, grace_seconds: float) -> None:
        """``begin_shutdown`` from a signal handler or another thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.begin_shutdown, grace_seconds)

    async def shutdown(self, grace_seconds: float) -> None:
        """Stop: ``begin_shutdown`` if not yet begun, then wait for every generation."""
        self.begin_shutdown(grace_seconds)
        if self._shutdown_task is not None:
            await asyncio.shield(self._shutdown_task)
        if self._background:  # titles and suggestions still being written: a short wait
            _, late = await asyncio.wait(list(self._background), timeout=5)
            for task in late:
                task.cancel()

    async def _end_running(self, grace_seconds: float) -> None:
        running = [asyncio.ensure_future(g.wait()) for g in self._running]
        if running:
            await asyncio.wait(running, timeout=grace_seconds)
        left = list(self._running)  # including any started during the grace period
        for generation in left:
            generation.abort(Overloaded("the server is shutting down", retry_after=5))
        if left:
            await asyncio.wait([asyncio.ensure_future(g.wait()) for g in left], timeout=5)

    def end_for_keys(self, key_ids: set[str]) -> int:
        """End (as interrupted) the running replies of these revoked keys; how many."""
        ended = [g for g in self._running if g.key_id in key_ids]
        for generation in ended:
            generation.abort(
                AuthenticationFailed(
                    "the API key of this request was revoked", code="api_key_revoked"
                )
            )
        return len(ended)

    async def prepare(self, turn: ChatTurn) -> Generation:
        """Check the turn, resolve its model and history; nothing is written yet.

        A stored conversation runs one generation at a time: the one in progress is
        ended (saved as interrupted, its client told it was superseded) and awaited
        before the branch is read. Raises the request's errors (unknown model or
        conversation, bad tool results).
        """
        if self.shutting_down:
            raise Overloaded("the server is shutting down; try again shortly", retry_after=5)
        if turn.approvals and (turn.conversation_id is None or not turn.store):
            raise InvalidRequest(
                "approvals need the conversation_id of the paused reply", param="approvals"
            )
        # an image URL of this server's own file: the caller's image, inline (upstreams
        # cannot fetch Parley's URLs); another's or a missing one is the request's 400
        messages = await inline_own_images(turn.messages, turn.owner, self.images)
        turn = replace(turn, messages=messages)
        if turn.create_missing and turn.conversation_id is not None:
            turn = replace(turn, conversation_id=await self._history.claimed(turn))
        # the request's own errors first: a bad request must not stop the reply in progress
        assistant = await self._check(turn)
        reach, notes = await self._reaches.resolve(turn.owner, turn.knowledge_bases, assistant)
        notes = [*turn.notes, *notes]
        if turn.conversation_id is None or not turn.store:
            generation = await self._prepare(turn, assistant, reach, notes)
            if generation.conversation_id is not None and generation.stored:
                self._sessions.attach(turn.owner, generation.conversation_id, generation)
            return generation
        supersede = not turn.approvals  # decisions are for a paused reply, not a running one
        async with self._sessions.turn(turn.owner, turn.conversation_id, supersede=supersede):
            generation = await self._prepare(turn, assistant, reach, notes)
            self._sessions.attach(turn.owner, turn.conversation_id, generation)
            return generation

    async def cancel(self, owner: str, conversation_id: str) -> Cancellation:
        """End the conversation's reply, here or on another instance (saved as
        interrupted); what was cancelled."""
        return await self._sessions.cancel(owner, conversation_id)

    def on_signal(self, signal: Signal) -> None:
        """Another instance asks to end a reply running here (``parley.cluster``)."""
        self._sessions.on_signal(signal)

    def running_message(self, owner: str, conversation_id: str) -> str | None:
        """The id of the reply being generated in the conversation, if any."""
        generation = self._sessions.generation(owner, conversation_id)
        return None if generation is None else generation.message_id

    async def _check(self, turn: ChatTurn) -> Assistant | None:
        """The request's own errors, found before anything changes (the conversation is
        only read, for its assistant). Returns the turn's assistant."""
        assistant = await self._assistant(turn)
        model = self._registry.resolve(turn.model or (assistant.model if assistant else None))
        sent = _sent_options(turn)
        refuse_unsupported(check_options(model.provider, sent), model.public_name, model.provider)
        await self._turn_tools.check(turn, assistant)
        if turn.approvals:
            return assistant
        last = turn.messages[-1] if turn.messages else None
        continuing = turn.conversation_id is not None and turn.anchor is None
        if continuing and not turn.trailing_answers:
            if last is None:
                raise InvalidRequest("messages must not be empty", param="messages")
            if last.role != "user":
                raise InvalidRequest(
                    "with conversation_id, the last message must be the new user message "
                    "or tool results",
                    param=f"messages.{len(turn.messages) - 1}.role",
                )
        if not turn.trailing_answers and last is not None and last.role == "user":
            check_input(last, len(turn.messages) - 1)
        return assistant

    async def _prepare(
        self, turn: ChatTurn, assistant: Assistant | None, reach: Reach, notes: list[str]
    ) -> Generation:
        model = self._registry.resolve(turn.model or (assistant.model if assistant else None))
        citations = Citations()
        reach = replace(reach, citations=citations, searches=Budget(SEARCH_SECONDS))
        plan = await self._history.plan(turn)
        check_plan(plan, turn)
        # the assistant's storage rules for user messages (what is stored is sent), under
        # the turn's budget, which the reply's rules share
        rules, budget = regex_rules(assistant), turn_budget()
        plan = replace(plan, new=tuple(await store_user_messages(list(plan.new), rules, budget)))
        if plan.resume is not None:
            await self._restore_citations(turn.owner, plan, citations)
        names = self._server_tools(turn, assistant, reach, plan)
        offered = await self._turn_tools.with_mcp(
            turn, assistant, model, names, plan.resumed_tools, notes
        )
        conversation_id = turn.conversation_id or (new_id("conv") if turn.store else None)
        message_id = plan.reply_id or new_id("msg")
        info = TurnInfo(
            caller=turn.caller or Caller(turn.owner),
            source=turn.source,
            conversation_id=conversation_id,
            message_id=message_id,
        )
        request = self._request(
            turn, assistant, model, plan, reach, offered, ids=(conversation_id, message_id)
        )
        record = turn_record(turn, plan, conversation_id, message_id, model, assistant)
        spec = GenerationSpec(
            request=request,
            record=record,
            # named: the client gave conversation_id (a continued conversation, Parley's
            # conversation routes, Chatchat's own ids, created on first use or not);
            # else Parley made the id for a stateless request
            origin=Origin.STATELESS if turn.conversation_id is None else Origin.NAMED,
            prior_cost_usd=plan.prior_cost,
            shape=self._shaper(request, plan, assistant, info, notes),
            citations=citations,
            finisher=None if record is None else Finisher(turn.owner, rules, self.images, budget),
            rules=rules,
            rule_budget=budget,
            ignored_params=check_options(model.provider, _sent_options(turn)).ignored,
            titles=assistant.generate_titles if assistant is not None else True,
            suggestions=assistant.generate_suggestions if assistant is not None else True,
        )
        return Generation(
            spec,
            store=self._store,
            agent=self._agent,
            checkpoint_seconds=self._settings.chat.checkpoint_seconds,
            citation_store=self._citations,
        )

    def _request(
        self,
        turn: ChatTurn,
        assistant: Assistant | None,
        model: ResolvedModel,
        plan: TurnPlan,
        reach: Reach,
        offered: tuple[ToolRegistry | None, tuple[str, ...]],
        *,
        ids: tuple[str | None, str],
    ) -> AgentRequest:
        """What the agent loop is asked: the history, the model request's template, the
        models to try, the tools offered (``offered``: the registry with the request's
        MCP tools, and the server tools' names) and their approval policies. ``ids``:
        the conversation's (None: not stored) and the reply's."""
        tools, server_tools = offered
        return AgentRequest(
            owner=turn.owner,
            conversation_id=ids[0],
            message_id=ids[1],
            history=self._plain_history(plan),
            template=request_template(turn, assistant, model),
            models=self._models(model, turn),
            server_tools=server_tools,
            caller=turn.caller,
            source=turn.source,
            client_retries=turn.client_retries,
            policies=tool_policies(
                server_tools,
                assistant,
                self._settings.tools.approval,
                confirm_remember=self._settings.memory.confirm_remember,
            ),
            resume=plan.resume,
            reach=reach,
            tools=tools,
        )

    def _server_tools(
        self, turn: ChatTurn, assistant: Assistant | None, reach: Reach, plan: TurnPlan
    ) -> tuple[str, ...]:
        """The turn's server tools; a resumed reply's stay on (a client resuming may not
        resend them)."""
        names = self._turn_tools.names(turn, assistant, reach.tools)
        used = (n for n in plan.resumed_tools if n in self._tools)
        return tuple(dict.fromkeys((*names, *used)))

    async def _restore_citations(self, owner: str, plan: TurnPlan, citations: Citations) -> None:
        """A paused reply's sources keep their numbers when it resumes."""
        if self._citations is not None and plan.reply_id is not None:
            saved = await self._citations.for_messages(owner, [plan.reply_id])
            citations.restore(saved.get(plan.reply_id, ()))

    def _plain_history(self, plan: TurnPlan) -> tuple[Message, ...]:
        """The history as stored, when no builder shapes it (the builder's replaces it
        when the generation runs)."""
        if self._outgoing is not None:
            return ()
        return (*(Message(m.role, m.parts) for m in plan.stored if usable(m)), *plan.new)

    def _shaper(
        self,
        request: AgentRequest,
        plan: TurnPlan,
        assistant: Assistant | None,
        info: TurnInfo,
        notes: list[str],
    ) -> Callable[[], Awaitable[Outgoing]] | None:
        """Shapes the outgoing request (rolling context, system prompt, input
        transformers) when the generation runs: summarising or reading documents happens
        where it can be cancelled and the client is watched."""
        if self._outgoing is None:
            return None
        return partial(
            self._outgoing.build,
            owner=request.owner,
            conversation_id=request.conversation_id,
            stored=plan.stored,
            new=plan.new,
            model=request.models[0],
            assistant=assistant,
            turn=info,
            max_output=request.template.max_tokens,
            tools=request.server_tools,
            reach=request.reach,
            notes=notes,
        )

    async def _assistant(self, turn: ChatTurn) -> Assistant | None:
        """The turn's assistant: the one it names, else the conversation's (the one named
        when it was created), if it still exists."""
        store = self._assistants
        if store is None:
            if turn.assistant is not None:
                raise InvalidRequest("assistants are not available here", param="assistant")
            return None
        name = turn.assistant
        if name is None and turn.conversation_id is not None:
            name = await self._conversation_assistant(turn.owner, turn.conversation_id)
            if name is None:
                return None
            try:
                return await store.get(turn.owner, name)
            except LookupError:
                return None  # deleted since: the server's defaults
        if name is None:
            return None
        try:
            return await store.get(turn.owner, name)
        except LookupError:
            raise NotFound(
                f"assistant {name!r} not found", param="assistant", code="assistant_not_found"
            ) from None

    def forget(self, owner: str, conversation_id: str) -> None:
        """A conversation was deleted: drop what is kept about it (a client-made id may
        be used again)."""
        self._assistant_of.pop((owner, conversation_id), None)

    async def _conversation_assistant(self, owner: str, conversation_id: str) -> str | None:
        """The id of the assistant a conversation was started with. It never changes, so
        it is kept (per process) instead of read again on every turn."""
        key = (owner, conversation_id)
        known = self._assistant_of.get(key, _UNKNOWN)
        if known is not _UNKNOWN:
            self._assistant_of.move_to_end(key)
            return known if isinstance(known, str) else None
        try:
            conversation = await self._store.get_conversation(owner, conversation_id)
        except LookupError:
            return None  # reported where the conversation is read
        found = (conversation.meta or {}).get("assistant_id")
        name = found if isinstance(found, str) else None
        self._assistant_of[key] = name
        if len(self._assistant_of) > ASSISTANT_CACHE:
            self._assistant_of.popitem(last=False)
        return name

    def _models(self, model: ResolvedModel, turn: ChatTurn) -> list[ResolvedModel]:
        """The turn's model and those of its fallbacks that honour what the client sent
        (a fallback that would refuse a field is left out, not sent a changed request)."""
        sent = _sent_options(turn)
        models = self._registry.with_fallbacks(model)
        kept = [m for m in models if m is model or not check_options(m.provider, sent).refused]
        for skipped in (m for m in models if m not in kept):
            log.info("fallback %s skipped: it cannot honour this request", skipped.public_name)
        return kept

    def fast_models(self, model: ResolvedModel) -> list[ResolvedModel]:
        """The models for the server's own calls: ``chat.fast_model`` (with its
        fallbacks) when it resolves, else the conversation's model."""
        name = self._settings.chat.fast_model
        if name:
            try:
                fast = self._registry.resolve(name)
            except ParleyError as exc:
                log.warning("chat.fast_model %r is unusable: %s", name, exc)
            else:
                return self._registry.with_fallbacks(fast)
        return self._registry.with_fallbacks(model)

    def _after_turn(self, generation: Generation) -> None:
        """After a successful turn in a conversation the client named: a title and
        follow-up suggestions, in the background (failures are logged, never shown), once
        the reply is saved and its client has its last chunk.

        Only for conversations a user will see again (``Generation.returned_to``): a
        stateless request (no ``conversation_id``: the OpenAI way, and Open WebUI's own
        title and follow-up prompts) keeps its first-line title and costs one upstream
        call, not three. A conversation started stateless and then continued by its id
        gets them on that turn (its title is still the provisional one)."""
        chat = self._settings.chat
        writer = self._titles
        conversation_id = generation.conversation_id
        titles = chat.generate_titles and generation.titles
        suggestions = chat.generate_suggestions and generation.suggestions
        if (
            writer is None
            or generation.status != "complete"
            or not generation.returned_to
            or conversation_id is None
            or self.shutting_down
            or not (titles or suggestions)
        ):
            return
        models = self.fast_models(generation.model)
        if models[0].kind == "local" and not self._settings.chat.fast_model:
            # the embedded model (about 10 tokens/s on a laptop core) would spend the
            # next half minute on suggestions, with the user waiting behind it: only
            # a fast_model set on purpose writes titles and suggestions for it
            return
        request = generation.request
        task = asyncio.ensure_future(
            writer.after_turn(
                owner=request.owner,
                conversation_id=conversation_id,
                message_id=generation.message_id,
                models=models,
                turn=TurnInfo(
                    caller=request.caller or Caller(request.owner),
                    source="internal",
                    conversation_id=conversation_id,
                    message_id=generation.message_id,
                ),
                titles=titles,
                suggestions=suggestions,
            )
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def start(self, generation: Generation, sink: Sink) -> None:
        """Run a prepared generation, feeding ``sink``; it is tracked until it ends.

        Its client leaving cancels it under ``server.on_disconnect``: ``cancel`` always,
        ``continue`` never, ``auto`` (the default) unless a user will come back to the
        reply (saved in a conversation the client named): a stateless client's Stop
        stops the upstream spend."""
        generation.start(sink, cancel_when_gone=self.cancels_when_gone(generation))
        self._running.add(generation)
        generation.on_finished(self._running.discard)
        generation.on_finished(self._after_turn)
        if self._shutdown_task is not None and self._shutdown_task.done():
            # prepared before the shutdown began, started after its grace ran out
            generation.abort(Overloaded("the server is shutting down", retry_after=5))

    def cancels_when_gone(self, generation: Generation) -> bool:
        """Whether ``generation`` is cancelled when its client leaves (``start``)."""
        on_disconnect = self._settings.server.on_disconnect
        if on_disconnect == "auto":
            return not generation.returned_to
        return on_disconnect == "cancel"


def _sent_options(turn: ChatTurn) -> frozenset[str]:
    return sent_options(turn.options, turn.tools)
