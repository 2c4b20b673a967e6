"""The conversation service: turns a chat request into a stored, running generation.

Stateless and stateful in one call. Without ``conversation_id`` the request's messages
are the whole history and are all recorded in a new conversation. With it, the stored
branch is the history and the request's last message (or its trailing tool results,
which answer the stored assistant's calls) is the new turn. The user message is saved
before generation starts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from parley.agent.loop import AgentLoop, AgentRequest
from parley.conversations.generation import Generation, Sink, TurnRecord
from parley.conversations.sessions import Sessions
from parley.errors import InvalidRequest, NotFound, Overloaded, ParleyError
from parley.identity import Caller
from parley.ids import new_id
from parley.interceptors.chain import InterceptorChain
from parley.messages import (
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolSpec,
)
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ProviderRegistry, ResolvedModel
from parley.settings import Settings
from parley.store.repository import ConversationStore, NewMessage, StoredMessage
from parley.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A client's result for a tool call (a ``tool`` message)."""

    call_id: str
    content: str
    param: str
    """Where it came from in the request, for error messages."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """A regenerate or an edit: the turn answers at a stored message, not at the end.

    - regenerate an assistant message: a new version of it, from the history before it;
      the messages after it are kept (copied after the new version);
    - regenerate from a user message: a new reply under it; what followed stays on the
      old version;
    - edit (``edit``): the turn's one user message is a new version of this user
      message, and the reply is generated under it.
    """

    message_id: str
    edit: bool = False


@dataclass(frozen=True, slots=True)
class ChatTurn:
    owner: str
    model: str | None
    messages: tuple[Message, ...]
    """The request's messages, neutral (client tool results folded into their calls)."""
    trailing_answers: tuple[ToolAnswer, ...] = ()
    """The tool results that end the request (after its last non-tool message)."""
    orphan_answers: tuple[ToolAnswer, ...] = ()
    """Tool results that answer no call in the request's own messages."""
    conversation_id: str | None = None
    create_missing: bool = False
    tools: tuple[ToolSpec, ...] = ()
    """The client's tools: calls to them end the turn with ``tool_calls``."""
    server_tools: tuple[str, ...] = ()
    """Server tools named by the request (beside the configured defaults); the agent
    loop runs them."""
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    store: bool = True
    """False: run the turn without recording it (the request said ``store: false``)."""
    stream: bool = True
    """False: the client waits for the whole reply."""
    caller: Caller | None = None
    """Who asked (None: ``owner`` with no key); the interceptors see it."""
    source: str = "api"
    """Which door the request came through (``chat.completions``, ``chatchat``, ...)."""
    anchor: Anchor | None = None
    """Where a regenerate or an edit answers (None: after the current branch)."""


class ConversationService:
    def __init__(
        self,
        settings: Settings,
        store: ConversationStore,
        registry: ProviderRegistry,
        tools: ToolRegistry | None = None,
        pricing: PriceCatalog | None = None,
        chain: InterceptorChain | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._registry = registry
        self._tools = tools or ToolRegistry()
        self._running: set[Generation] = set()
        self._sessions = Sessions(settings.chat.session_idle_seconds)
        self.shutting_down = False
        self._shutdown_task: asyncio.Future[None] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._agent = AgentLoop(
            settings=settings,
            tools=self._tools,
            pricing=pricing or PriceCatalog(settings.pricing),
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

    async def _end_running(self, grace_seconds: float) -> None:
        running = [asyncio.ensure_future(g.wait()) for g in self._running]
        if running:
            await asyncio.wait(running, timeout=grace_seconds)
        left = list(self._running)  # including any started during the grace period
        for generation in left:
            generation.abort(Overloaded("the server is shutting down", retry_after=5))
        if left:
            await asyncio.wait([asyncio.ensure_future(g.wait()) for g in left], timeout=5)

    async def prepare(self, turn: ChatTurn) -> Generation:
        """Check the turn, resolve its model and history; nothing is written yet.

        A stored conversation runs one generation at a time: the one in progress is
        ended (saved as interrupted, its client told it was superseded) and awaited
        before the branch is read. Raises the request's errors (unknown model or
        conversation, bad tool results).
        """
        if self.shutting_down:
            raise Overloaded("the server is shutting down; try again shortly", retry_after=5)
        if turn.conversation_id is None or not turn.store:
            generation = await self._prepare(turn)
            if generation.conversation_id is not None and generation.stored:
                self._sessions.attach(turn.owner, generation.conversation_id, generation)
            return generation
        self._check(turn)  # a bad request must not stop the reply in progress
        async with self._sessions.turn(turn.owner, turn.conversation_id):
            generation = await self._prepare(turn)
            self._sessions.attach(turn.owner, turn.conversation_id, generation)
            return generation

    async def cancel(self, owner: str, conversation_id: str) -> Generation | None:
        """End the conversation's running generation (saved as interrupted); returns it,
        or None when nothing was running."""
        return await self._sessions.cancel(owner, conversation_id)

    def running_message(self, owner: str, conversation_id: str) -> str | None:
        """The id of the reply being generated in the conversation, if any."""
        generation = self._sessions.generation(owner, conversation_id)
        return None if generation is None else generation.message_id

    def _check(self, turn: ChatTurn) -> None:
        """The request's own errors, found without reading the conversation."""
        self._registry.resolve(turn.model)
        self._server_tools(turn)
        last = turn.messages[-1] if turn.messages else None
        if not turn.trailing_answers and last is not None and last.role == "user":
            _check_input(last, len(turn.messages) - 1)

    async def _prepare(self, turn: ChatTurn) -> Generation:
        model = self._registry.resolve(turn.model)
        server_tools = self._server_tools(turn)
        create = turn.conversation_id is None
        parent_id: str | None = None
        prior_cost = 0.0
        root = False
        copy_after: list[str] = []
        if turn.anchor is not None:
            history, new, parent_id, root, copy_after, prior_cost = await self._anchored(turn)
            updates: dict[str, tuple[Part, ...]] = {}
        elif turn.conversation_id is not None:
            try:
                history, new, updates, parent_id, prior_cost = await self._continue(turn)
            except NotFound:
                if not turn.create_missing:
                    raise
                history, new, updates = [], list(turn.messages), {}
                create = True
        else:
            if turn.orphan_answers:
                answer = turn.orphan_answers[0]
                raise InvalidRequest(
                    f"tool result for unknown call id {answer.call_id!r}", param=answer.param
                )
            history, new, updates = [], list(turn.messages), {}
        if not any(m.role != "system" for m in history + new):
            raise InvalidRequest("messages must contain a non-system message", param="messages")
        if new and new[-1].role == "user":
            _check_input(new[-1], len(turn.messages) - 1)

        message_id = new_id("msg")
        conversation_id = turn.conversation_id or (new_id("conv") if turn.store else None)
        record = None
        if turn.store:
            rows = [NewMessage(new_id("msg"), m.role, m.parts) for m in new]
            rows.append(
                NewMessage(message_id, "assistant", (), status="streaming", model=model.public_name)
            )
            record = TurnRecord(
                owner=turn.owner,
                new_messages=rows,
                create=create,
                title=_title(new) if create else None,
                update_parts=updates,
                parent_id=parent_id,
                root=root,
                copy_after=tuple(copy_after),
            )
        chat = self._settings.chat
        template = ModelRequest(
            model=model.model,
            messages=(),
            tools=turn.tools,
            tool_choice=turn.tool_choice,
            max_tokens=turn.max_tokens or model.max_tokens or chat.default_max_tokens,
            temperature=turn.temperature if turn.temperature is not None else model.temperature,
            top_p=turn.top_p,
            stop=turn.stop,
            options=turn.options,
            incremental=turn.stream,
        )
        request = AgentRequest(
            owner=turn.owner,
            conversation_id=conversation_id,
            message_id=message_id,
            history=tuple(history + new),
            template=template,
            models=[model, *self._fallbacks(model)],
            server_tools=server_tools,
            caller=turn.caller,
            source=turn.source,
        )
        return Generation(
            store=self._store,
            agent=self._agent,
            request=request,
            record=record,
            checkpoint_seconds=chat.checkpoint_seconds,
            prior_cost_usd=prior_cost,
        )

    def _server_tools(self, turn: ChatTurn) -> tuple[str, ...]:
        """The request's server tools, then the configured defaults (each once)."""
        client = {spec.name for spec in turn.tools}
        clash = client & set(turn.server_tools)
        if clash:
            raise InvalidRequest(
                f"client tool names clash with server tools: {sorted(clash)}", param="tools"
            )
        # a configured default gives way to a client tool of the same name
        defaults = [n for n in self._settings.tools.default_tools if n not in client]
        names = dict.fromkeys((*turn.server_tools, *defaults))
        return tuple(name for name in names if name in self._tools)

    def _fallbacks(self, model: ResolvedModel) -> list[ResolvedModel]:
        found: list[ResolvedModel] = []
        for name in model.fallbacks:
            try:
                found.append(self._registry.resolve(name))
            except ParleyError as exc:
                log.warning("fallback model %r of %r is unusable: %s", name, model.public_name, exc)
        return found

    def start(self, generation: Generation, sink: Sink) -> None:
        """Run a prepared generation, feeding ``sink``; it is tracked until it ends."""
        generation.start(sink, cancel_when_gone=self._settings.server.on_disconnect == "cancel")
        self._running.add(generation)
        generation.on_finished(self._running.discard)
        if self._shutdown_task is not None and self._shutdown_task.done():
            # prepared before the shutdown began, started after its grace ran out
            generation.abort(Overloaded("the server is shutting down", retry_after=5))

    async def _anchored(
        self, turn: ChatTurn
    ) -> tuple[list[Message], list[Message], str | None, bool, list[str], float]:
        """(history, new messages, their parent, whether they start at the root, ids to
        copy after the reply, what the kept history's replies cost)."""
        anchor = turn.anchor
        assert anchor is not None
        assert turn.conversation_id is not None
        try:
            path, later = await self._store.around(
                turn.owner, turn.conversation_id, anchor.message_id
            )
        except LookupError:
            raise NotFound(
                f"message {anchor.message_id!r} not found in conversation {turn.conversation_id!r}",
                param="message_id",
                code="message_not_found",
            ) from None
        target = path[-1]
        if anchor.edit:
            if target.role != "user":
                raise InvalidRequest(
                    "only a user message is edited with a new reply; "
                    "an assistant message is edited without one",
                    param="message_id",
                )
            kept, new, parent, copy = path[:-1], list(turn.messages), target.parent_id, []
        elif target.role == "assistant":
            if target.parent_id is None:
                raise InvalidRequest("this reply has nothing to answer", param="message_id")
            kept, new, parent, copy = path[:-1], [], target.parent_id, later
        elif target.role == "user":
            kept, new, parent, copy = path, [], target.id, []
        else:
            raise InvalidRequest("a system message cannot be regenerated", param="message_id")
        history = [Message(m.role, m.parts) for m in kept if _usable(m)]
        cost = sum(float((m.usage or {}).get("response_usd") or 0.0) for m in kept)
        return history, new, parent, parent is None, copy, cost

    async def _continue(
        self, turn: ChatTurn
    ) -> tuple[list[Message], list[Message], dict[str, tuple[Part, ...]], str | None, float]:
        """(history, new messages, parts to update, parent of the new messages, what the
        branch's replies cost so far)."""
        assert turn.conversation_id is not None
        try:
            stored = await self._store.branch(turn.owner, turn.conversation_id)
        except LookupError:
            raise NotFound(
                f"conversation {turn.conversation_id!r} not found",
                param="conversation_id",
                code="conversation_not_found",
            ) from None
        history = [Message(m.role, m.parts) for m in stored if _usable(m)]
        cost = sum(float((m.usage or {}).get("response_usd") or 0.0) for m in stored)
        updates: dict[str, tuple[Part, ...]] = {}
        if turn.trailing_answers:
            history, updates = _answer_calls(stored, history, turn.trailing_answers)
            return history, [], updates, None, cost
        if not turn.messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        last = turn.messages[-1]
        if last.role != "user":
            raise InvalidRequest(
                "with conversation_id, the last message must be the new user message "
                "or tool results",
                param=f"messages.{len(turn.messages) - 1}.role",
            )
        if _is_retry(stored, last):
            # The same message again after a reply that failed before any output (a
            # client retrying): answer the stored message instead of storing it twice.
            return history, [], updates, stored[-2].id, cost
        # The new message goes under what the model is shown, even if another turn
        # lands first (it then starts a branch of its own).
        return history, [last], updates, stored[-1].id if stored else None, cost


def _is_retry(stored: list[StoredMessage], message: Message) -> bool:
    return (
        len(stored) >= 2
        and stored[-1].role == "assistant"
        and stored[-1].status == "failed"
        and not stored[-1].parts
        and stored[-2].role == "user"
        and stored[-2].parts == message.parts
    )


def _check_input(message: Message, index: int) -> None:
    if not _has_input(message):
        raise InvalidRequest(
            "the new user message is empty: send some text, an image or a file",
            param=f"messages.{index}.content",
            code="empty_message",
        )


def _has_input(message: Message) -> bool:
    """Whether a user message says anything: text that is not blank, an image or a file."""
    return any(
        isinstance(part, ImagePart | FilePart) or (isinstance(part, TextPart) and part.text.strip())
        for part in message.parts
    )


def _usable(message: StoredMessage) -> bool:
    """Stored messages that become model context: anything with content."""
    return bool(message.parts)


def _answer_calls(
    stored: list[StoredMessage], history: list[Message], answers: tuple[ToolAnswer, ...]
) -> tuple[list[Message], dict[str, tuple[Part, ...]]]:
    """Attach client tool results to the stored assistant calls they answer."""
    by_call: dict[str, ToolAnswer] = {a.call_id: a for a in answers}
    target = next((m for m in reversed(stored) if m.role == "assistant" and m.parts), None)
    if target is None:
        answer = answers[0]
        raise InvalidRequest(
            f"tool result for unknown call id {answer.call_id!r}", param=answer.param
        )
    known = {p.id for p in target.parts if isinstance(p, ToolCallPart)}
    for answer in answers:
        if answer.call_id not in known:
            raise InvalidRequest(
                f"tool result for unknown call id {answer.call_id!r}", param=answer.param
            )
    parts = tuple(
        replace(p, result=ToolResult(by_call[p.id].content))
        if isinstance(p, ToolCallPart) and p.id in by_call
        else p
        for p in target.parts
    )
    index = max(i for i, m in enumerate(stored) if m.id == target.id)
    usable = [m for m in stored if _usable(m)]
    position = next(i for i, m in enumerate(usable) if m.id == stored[index].id)
    history = list(history)
    history[position] = Message("assistant", parts)
    return history, {target.id: parts}


def _title(messages: list[Message]) -> str | None:
    for message in messages:
        if message.role == "user" and message.text.strip():
            line = message.text.strip().splitlines()[0]
            return line[:80]
    return None
