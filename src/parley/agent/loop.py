"""The agent loop: one turn, as many model calls and tool steps as it takes.

    while True:
        stop = budget.check(turn)             # shutdown, iterations, no progress, time,
        if stop: end the turn with it          #   tokens, cost
        iteration += 1; status "thinking"
        offered = tools.begin_iteration()     # housekeeping: the active-tool LRU
        messages = repair(history + turn)     # the seven repair steps
        stream the model call                 # retries, fallback, deadlines
        decide on the stop reason:
            end_turn / stop_sequence / max_tokens -> done
            content_filtered                      -> done, with a safety message
            tool_use with a client's tool         -> done: the client runs it
            tool_use with server tools            -> loop check, then run them all
                                                     at once, commit the step, repeat

The turn is one assistant message (``TurnState``). Server tools run here and show up in
the stream as ``ToolStarted``/``ToolFinished``; a call to one of the client's tools ends
the turn with standard ``tool_calls``. Without server tools the loop is a pass-through:
one model call whose tool-call fragments stream to the client as they come.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from hashlib import sha256
from typing import Any

from parley.agent.budget import Budget
from parley.agent.loop_detector import LoopDetector
from parley.agent.model_call import CallPlan, ModelCall
from parley.agent.repair import estimate_tokens, repair_messages, rules_for
from parley.agent.tool_runner import ToolRunner
from parley.agent.turn import Stop, TurnState
from parley.events import (
    Done,
    Event,
    Status,
    StepDone,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolStarted,
    UsageEvent,
)
from parley.messages import Message, ToolCallPart, ToolResult
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ResolvedModel
from parley.settings import Settings
from parley.store.repository import ConversationStore
from parley.tools.lru import ActiveTools
from parley.tools.protocol import ToolContext
from parley.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

LOOP_WARNING = (
    "Loop detected: you appear to be repeating the same tool calls. "
    "Please try a different approach."
)
LOOP_STOP = Stop(
    "loop_detected",
    "Stopped: the same tool calls kept repeating after a warning",
)
CONTENT_FILTERED = "[The provider's content filter stopped this reply.]"
STEP_SEPARATOR = "\n\n"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """Everything one turn needs, fixed when it starts."""

    owner: str
    conversation_id: str | None
    message_id: str
    history: tuple[Message, ...]
    """The model's context before this turn's reply."""
    template: ModelRequest
    """Sampling and the client's tools; messages and server tools are filled per step."""
    models: list[ResolvedModel]
    """The model, then its fallbacks."""
    server_tools: tuple[str, ...] = ()
    max_turn_tokens: int | None = None
    max_turn_cost_usd: float | None = None

    @property
    def client_tools(self) -> frozenset[str]:
        return frozenset(spec.name for spec in self.template.tools)


class AgentLoop:
    def __init__(
        self,
        *,
        settings: Settings,
        tools: ToolRegistry,
        pricing: PriceCatalog,
        store: ConversationStore | None,
        shutting_down: Callable[[], bool],
        model_call: ModelCall | None = None,
    ) -> None:
        self._settings = settings
        self._tools = tools
        self._store = store
        self._shutting_down = shutting_down
        self._model_call = model_call or ModelCall(settings.agent, pricing)
        self._runner = ToolRunner(tools, settings.tools)

    async def run(self, request: AgentRequest, turn: TurnState) -> AsyncIterator[Event]:
        settings = self._settings
        budget = Budget(
            settings.agent,
            self._shutting_down,
            max_tokens=request.max_turn_tokens,
            max_cost_usd=request.max_turn_cost_usd,
        )
        detector = LoopDetector.from_settings(settings.agent)
        active = ActiveTools(
            list(request.server_tools),
            pinned=[name for name in request.server_tools if self._is_pinned(name)],
            max_active=settings.tools.max_active,
            idle_iterations=settings.tools.idle_iterations,
        )
        session = _Session(request, active)
        passthrough = not request.server_tools
        client_tools = request.client_tools
        while True:
            stop = budget.check(turn)
            if stop is not None:
                async for event in self._stop(turn, stop):
                    yield event
                break
            budget.iterations += 1
            active.begin_iteration(budget.iterations)
            yield Status("thinking", str(budget.iterations))
            offered = active.offered()
            session.offered = offered
            if len(offered) > settings.tools.warn_active:
                log.warning("%d tools are active in one request", len(offered))
            separate = turn.has_text
            async for event in self._model_call.run(self._plan(request, turn, offered), turn):
                if isinstance(event, ToolCallDelta) and not passthrough:
                    continue  # decided once the step's calls are complete
                if separate and isinstance(event, TextDelta):
                    separate = False
                    yield TextDelta(STEP_SEPARATOR)
                yield event
            reason = turn.stop_reason
            if reason != "tool_use":
                turn.commit_step([])
                if reason == "content_filtered":
                    lead = STEP_SEPARATOR if turn.has_text else ""
                    turn.add_text(CONTENT_FILTERED)
                    yield TextDelta(lead + CONTENT_FILTERED)
                break
            calls = turn.step.tool_calls()
            mine = [] if passthrough else [c for c in calls if c.name not in client_tools]
            theirs = [c for c in calls if c not in mine]
            answered: list[ToolCallPart] = []
            if mine:
                if detector.observe([(c.name, c.arguments) for c in mine]):
                    # checked before execution: none of the step's calls runs
                    last = detector.fired >= 2
                    text = LOOP_STOP.message if last else LOOP_WARNING
                    answered = [c.answered(ToolResult(text, is_error=True)) for c in mine]
                    for c in mine:
                        yield ToolStarted(c.id, c.name, c.arguments)
                        yield ToolFinished(c.id, c.name, c.arguments, text, True, 0.0)
                    if last:
                        turn.commit_step(answered)
                        async for event in self._stop(turn, LOOP_STOP):
                            yield event
                        break
                else:
                    async for event in self._runner.run(
                        mine, offered, lambda call: self._context(request, call, session), answered
                    ):
                        yield event
                    active.used([c.name for c in mine])
            turn.commit_step(answered)
            if theirs:
                if not passthrough:
                    for index, call in enumerate(theirs):
                        yield ToolCallDelta(index, call.id, call.name, call.arguments)
                break
            yield StepDone(budget.iterations)
        yield UsageEvent(turn.usage)
        yield Done(turn.stop_reason or "end_turn")

    async def _stop(self, turn: TurnState, stop: Stop) -> AsyncIterator[Event]:
        turn.stop = stop
        turn.stop_reason = "end_turn"
        note = f"[{stop.message}]"
        text = STEP_SEPARATOR + note if turn.has_text else note
        turn.add_text(note)
        yield Status("stopped", stop.message)
        yield TextDelta(text)

    def _plan(self, request: AgentRequest, turn: TurnState, offered: list[str]) -> CallPlan:
        repair = self._settings.agent.repair
        context = (*request.history, Message("assistant", turn.parts()))
        if not turn.committed:
            context = request.history
        specs = [spec for name in offered if (spec := self._tools.spec(name)) is not None]
        template = request.template
        tools = (*template.tools, *specs)

        def request_for(model: ResolvedModel) -> ModelRequest:
            messages = repair_messages(
                context,
                context_tokens=model.context_tokens,
                settings=repair,
                rules=rules_for(model.kind),
            )
            return replace(
                template,
                model=model.model,
                messages=tuple(messages),
                tools=tools,
                tool_choice=template.tool_choice if tools else None,
            )

        return CallPlan(
            models=request.models,
            request_for=request_for,
            input_tokens=estimate_tokens(context),
            incremental=template.incremental,
        )

    def _context(self, request: AgentRequest, call: ToolCallPart, session: _Session) -> ToolContext:
        folder = request.conversation_id or request.message_id
        if not _SAFE_NAME.match(folder):
            folder = sha256(folder.encode()).hexdigest()[:32]
        return ToolContext(
            owner=request.owner,
            conversation_id=request.conversation_id,
            call_id=call.id,
            workspace=self._settings.workspace_dir / folder,
            settings=self._settings,
            store=self._store,
            session=session,
        )

    def _is_pinned(self, name: str) -> bool:
        tool = self._tools.get(name)
        return name in self._settings.tools.pinned_tools or bool(tool and tool.pinned)


class _Session:
    """What tools may ask of the running turn (``tools.protocol.Session``)."""

    def __init__(self, request: AgentRequest, active: ActiveTools) -> None:
        self._request = request
        self._active = active
        self.offered: list[str] = []

    def activate(self, names: Sequence[str]) -> list[str]:
        return self._active.activate(names)

    def capabilities(self) -> dict[str, Any]:
        request = self._request
        return {
            "model": request.models[0].public_name,
            "fallback_models": [m.public_name for m in request.models[1:]],
            "server_tools": {"active": self.offered, "hidden": self._active.hidden()},
            "client_tools": sorted(request.client_tools),
            "knowledge_retrieval": None,
            "memory_retrieval": None,
            "conversation_id": request.conversation_id,
        }
