"""The agent loop: one turn, as many model calls and tool steps as it takes.

    next = RunAgain()                         # or Interruption, when a resume leaves
    loop:                                     #   calls undecided
        match next:
            RunAgain:                         # a step (_step):
                budget.check(turn)            #   shutdown, iterations, no progress, time,
                                              #   tokens, cost: Stopped
                stream the model call         #   repaired messages, the interceptor chain;
                                              #   retries, fallback, deadlines (ModelCall)
                triage(calls)                 #   client / run / ask / deny (outcomes.py)
                no calls, or cut short        #   -> FinalOutput (a filter adds a note)
                else act (_act):              #   the loop check (warn, then Stopped),
                                              #   deny: an error result; ask: the call
                                              #   waits (-> Interruption); run the rest at
                                              #   once; the client's calls -> HandOff;
                                              #   else RunAgain
            FinalOutput / HandOff / Interruption / Stopped: end the turn (Done)

The turn is one assistant message (``TurnState``). Server tools run here and show up in
the stream as ``ToolStarted``/``ToolFinished``; a call to one of the client's tools ends
the turn with standard ``tool_calls``. Without server tools the loop is a pass-through:
one model call whose tool-call fragments stream to the client as they come.
"""

from __future__ import annotations

import logging
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Iterator,
    Mapping,
)
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from typing import assert_never, cast

from parley.agent.budget import Budget
from parley.agent.loop_detector import LoopDetector
from parley.agent.model_call import CallPlan, ModelCall, StepEnd
from parley.agent.outcomes import (
    FinalOutput,
    HandOff,
    Interruption,
    Next,
    NextStep,
    RunAgain,
    Stopped,
    Triage,
    triage,
)
from parley.agent.repair import rules_for
from parley.agent.session import TurnSession
from parley.agent.shown import Shown
from parley.agent.tool_runner import ToolRunner
from parley.agent.turn import Stop, TurnState
from parley.agent.turn_repair import TurnRepair
from parley.errors import ParleyError
from parley.events import (
    Done,
    Event,
    Status,
    StepDone,
    StopReason,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolStarted,
    UsageEvent,
)
from parley.identity import Caller
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallCancelled, TurnEnd, TurnInfo
from parley.messages import (
    STEP_SEPARATOR,
    Message,
    Part,
    ToolCallPart,
    ToolPolicy,
    ToolResult,
    Usage,
    reply_text,
)
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ResolvedModel
from parley.settings import Settings
from parley.store.repository import ConversationStore
from parley.tools.lru import ActiveTools
from parley.tools.protocol import NO_REACH, Reach, ToolContext
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
NOT_RUN = "[Not run: the reply ended before this call was complete]"
CLIENT_CALL_DEFERRED = (
    "[Not run: other calls of this step waited for approval. Call it again if still needed.]"
)


DENIED_BY_POLICY = "[DENIED] Tool '{name}' is not allowed here (policy). Do not retry it."


@dataclass(frozen=True, slots=True)
class Resume:
    """A turn paused for approval, carried on: its parts with the decisions applied
    (denied and answered calls hold their results), the approved calls to run first,
    and what the turn had used so far."""

    parts: tuple[Part, ...]
    approved: tuple[ToolCallPart, ...]
    usage: Usage
    cost_usd: float
    decided: tuple[str, ...] = ()
    """The calls decided by this request (denied or answered ones are reported)."""


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
    caller: Caller | None = None
    """Who asked (None: the owner, with no key)."""
    source: str = "api"
    """Which door the request came through (for the interceptors)."""
    client_retries: bool = False
    """The client retries a failed request by itself: the turn's first model call tries
    each model once while nothing has reached the client (``ChatTurn.client_retries``)."""
    policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    """Approval policy per server tool (missing: auto)."""
    resume: Resume | None = None
    reach: Reach = NO_REACH
    """The knowledge and memory the turn's tools may reach."""
    tools: ToolRegistry | None = None
    """The server tools with this request's MCP tools (None: the server's own)."""

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
        chain: InterceptorChain | None = None,
    ) -> None:
        self._settings = settings
        self._tools = tools
        self._store = store
        self._shutting_down = shutting_down
        chain = chain or InterceptorChain()
        self._chain = chain
        self._model_call = ModelCall(settings.agent, pricing, chain)
        self._runner = ToolRunner(tools, settings.tools, chain)

    def run(self, request: AgentRequest, turn: TurnState) -> AsyncGenerator[Event]:
        """The turn's events, ending in ``Done`` (or an exception)."""
        info = TurnInfo(
            caller=request.caller or Caller(request.owner),
            source=request.source,
            conversation_id=request.conversation_id,
            message_id=request.message_id,
            totals=lambda: (turn.usage, turn.cost_usd),
        )
        events = self._run(request, turn, info)
        if not self._chain.wants_turn_end:
            return events
        return self._ending(events, turn, info)

    async def _ending(
        self, events: AsyncGenerator[Event], turn: TurnState, info: TurnInfo
    ) -> AsyncGenerator[Event]:
        """``events``, telling the interceptors when the turn ends: answered, failed, or
        abandoned (their hooks run in the background)."""
        ended = False
        try:
            async with aclosing(events):
                async for event in events:
                    if isinstance(event, Done):
                        ended = True
                        self._chain.turn_ended(_turn_end(info, turn, None))
                    yield event
        except ParleyError as exc:
            ended = True
            self._chain.turn_ended(_turn_end(info, turn, exc))
            raise
        except Exception as exc:
            failure = ParleyError(f"internal error: {type(exc).__name__}")
            self._chain.turn_ended(_turn_end(info, turn, failure))
            raise
        except BaseException:
            if not ended:
                abandoned = CallCancelled("the turn was abandoned before it finished")
                self._chain.turn_ended(_turn_end(info, turn, abandoned))
            raise

    async def _run(
        self, request: AgentRequest, turn: TurnState, info: TurnInfo
    ) -> AsyncGenerator[Event]:
        """The turn as a ``match`` over what each step leads to (``outcomes.py``)."""
        run = self._start(request)
        step: Next = RunAgain()
        if request.resume is not None:
            async for event in self._resume(request, turn, run, info):
                yield event
            pending = len(turn.pending_calls())  # decisions came for some calls only
            step = Interruption(pending) if pending else RunAgain()
        while True:
            match step:
                case RunAgain():
                    stop = run.budget.check(turn)
                    if stop is not None:
                        step = Stopped(stop)
                        continue
                    async for out in self._step(request, turn, run, info):
                        if isinstance(out, NextStep):
                            step = cast(Next, out)
                        else:
                            yield out
                    continue
                case FinalOutput(reason=reason):
                    pass
                case HandOff(calls=calls, streamed=streamed):
                    if not streamed:
                        for index, call in enumerate(calls):
                            yield ToolCallDelta(index, call.id, call.name, call.arguments)
                    reason = "tool_use"
                case Interruption(pending=pending):
                    yield Status("awaiting_approval", str(pending))
                    reason = "pending_approval"
                case Stopped(stop=stop):
                    for event in self._stop(turn, stop):
                        yield event
                    reason = "end_turn"
                case _:
                    assert_never(step)
            break
        turn.stop_reason = reason
        yield UsageEvent(turn.usage)
        yield Done(reason)

    def _start(self, request: AgentRequest) -> _Run:
        settings = self._settings
        names = request.server_tools
        if len(names) > settings.tools.warn_active:
            log.warning("%d server tools in one request", len(names))
        active = ActiveTools(
            list(names),
            pinned=[name for name in names if self._is_pinned(request, name)],
            max_active=settings.tools.max_active,
            idle_iterations=settings.tools.idle_iterations,
        )
        return _Run(
            budget=Budget(settings.agent, self._shutting_down),
            detector=LoopDetector.from_settings(settings.agent),
            active=active,
            session=TurnSession(request, active, settings),
            shown=Shown(),
            repair=TurnRepair(request.history, settings.agent.repair),  # checked once
            passthrough=not names,
        )

    async def _step(
        self, request: AgentRequest, turn: TurnState, run: _Run, info: TurnInfo
    ) -> AsyncGenerator[Event | NextStep]:
        """One model call, then what its calls lead to (the last item)."""
        run.budget.iterations += 1
        iteration = run.budget.iterations
        yield Status("thinking", str(iteration))
        run.active.begin_iteration(iteration)
        offered = run.session.offered = [] if run.passthrough else run.active.offered()
        plan = self._plan(request, turn, offered, iteration, run.repair, info)
        shown = run.shown
        shown.begin_step(separate=turn.has_text)
        end: StepEnd | None = None
        async with aclosing(self._model_call.run(plan, turn)) as events:
            async for event in events:
                if event.__class__ is TextDelta and shown.plain:
                    shown.count(event)  # the common case, once per chunk
                    yield event
                elif isinstance(event, StepEnd):
                    end = event
                elif not isinstance(event, ToolCallDelta) or run.passthrough:
                    for out in shown.pass_on(event):  # server calls wait for triage
                        yield out
        assert end is not None
        turn.answered_by = end.model
        calls = triage(
            turn.step.tool_calls(),
            client_tools=request.client_tools,
            policies=request.policies,
            passthrough=run.passthrough,
        )
        if end.stop_reason != "tool_use" or not calls:
            for ending in self._end_step(turn, run, calls, end.stop_reason):
                yield ending
            return
        async for acted in self._act(request, turn, run, info, calls, offered):
            yield acted

    def _end_step(
        self, turn: TurnState, run: _Run, calls: Triage, reason: StopReason
    ) -> Iterator[Event | NextStep]:
        """The step's reply is the turn's answer: the calls of a reply cut short (cap,
        content filter) never run."""
        for call in calls.server:
            turn.record(call.answered(ToolResult(NOT_RUN, is_error=True)))
        turn.commit_step()
        if reason == "content_filtered":
            yield from run.shown.pass_on(TextDelta(CONTENT_FILTERED), note=True)
            turn.add_text(CONTENT_FILTERED)
        yield FinalOutput("end_turn" if reason == "tool_use" else reason)

    async def _act(
        self,
        request: AgentRequest,
        turn: TurnState,
        run: _Run,
        info: TurnInfo,
        calls: Triage,
        offered: list[str],
    ) -> AsyncGenerator[Event | NextStep]:
        """The step's calls: the loop check, then the policies (deny: an error result;
        ask: the call waits), then the rest run at once; the step is committed."""
        if calls.server and run.detector.observe([(c.name, c.arguments) for c in calls.server]):
            # checked before execution: none of the step's calls runs
            last = run.detector.fired >= 2
            text = LOOP_STOP.message if last else LOOP_WARNING
            for call in [*calls.server, *(calls.client if last else ())]:
                for event in _answer(turn, call.answered(ToolResult(text, is_error=True))):
                    yield event
            if last:
                turn.commit_step()
                yield Stopped(LOOP_STOP)
                return
        elif calls.server:
            for call in calls.ask:
                turn.record(call.with_approval("pending", asked_at=time.time()))
            for call in calls.deny:
                result = ToolResult(DENIED_BY_POLICY.format(name=call.name), is_error=True)
                for event in _answer(turn, call.with_approval("denied", result, "policy")):
                    yield event
            context = partial(self._context, request, run.session)
            tools = self._runner.run(
                list(calls.run), offered, context, turn.record, info, request.tools
            )
            async with aclosing(tools):
                async for event in tools:
                    yield event
            run.active.used([c.name for c in calls.run])
            if calls.ask:
                # the client's calls of this step are not handed out: the turn pauses
                # here, and resumes on the server; the model may call them again
                for call in calls.client:
                    turn.record(call.answered(ToolResult(CLIENT_CALL_DEFERRED, True)))
                turn.commit_step()
                yield Interruption(len(turn.pending_calls()))
                return
        turn.commit_step()
        if calls.client:
            yield HandOff(calls.client, streamed=run.passthrough)
            return
        yield StepDone(run.budget.iterations)
        yield RunAgain()

    async def _resume(
        self, request: AgentRequest, turn: TurnState, run: _Run, info: TurnInfo
    ) -> AsyncIterator[Event]:
        """Carry on a turn paused for approval: the approved calls run first (each once:
        the service saved their approval before the turn resumed)."""
        resume = request.resume
        assert resume is not None
        turn.resume(resume.parts, resume.usage, resume.cost_usd)
        for part in resume.parts:  # what the decisions made of the other calls
            if (
                isinstance(part, ToolCallPart)
                and part.result is not None
                and part.approval in ("denied", "answered")
            ):
                yield ToolStarted(part.id, part.name, part.arguments)
                yield _finished(part, part.result)
        if resume.approved:
            tools = self._runner.run(
                list(resume.approved),
                request.server_tools,
                partial(self._context, request, run.session),
                turn.settle,
                info,
                request.tools,
            )
            async with aclosing(tools):
                async for event in tools:
                    yield event
        yield StepDone(0)

    def _stop(self, turn: TurnState, stop: Stop) -> list[Event]:
        turn.stop = stop
        note = f"[{stop.message}]"
        text = STEP_SEPARATOR + note if turn.has_text else note
        turn.add_text(note)
        return [Status("stopped", stop.message), TextDelta(text)]

    def _plan(
        self,
        request: AgentRequest,
        turn: TurnState,
        offered: list[str],
        iteration: int,
        repair: TurnRepair,
        info: TurnInfo,
    ) -> CallPlan:
        own = Message("assistant", turn.parts()) if turn.committed else None
        registry = request.tools or self._tools
        specs = [spec for name in offered if (spec := registry.spec(name)) is not None]
        template = request.template
        tools = (*template.tools, *specs)
        choice = template.tool_choice
        if iteration > 1 and (choice == "required" or isinstance(choice, dict)):
            choice = "auto"  # forcing a call again every step would never let the turn end

        def request_for(model: ResolvedModel) -> ModelRequest:
            messages = repair.messages(
                own, context_tokens=model.context_tokens, rules=rules_for(model.kind)
            )
            return ModelRequest(  # built directly: dataclasses.replace is slow per call
                model=model.model,
                messages=tuple(messages),
                tools=tools,
                tool_choice=choice if tools else None,
                max_tokens=template.max_tokens,
                tokens_field=template.tokens_field,
                temperature=template.temperature,
                top_p=template.top_p,
                stop=template.stop,
                options=template.options,
                incremental=template.incremental,
            )

        return CallPlan(
            models=request.models,
            request_for=request_for,
            input_tokens=repair.tokens(own),
            incremental=template.incremental,
            forwards_tool_calls=not request.server_tools,
            turn=info,
            # a later step's failure would make the client's retry redo the turn's work
            # (its tools ran): Parley retries that step itself
            client_retries=request.client_retries and not turn.committed,
        )

    def _context(
        self, request: AgentRequest, session: TurnSession, call: ToolCallPart
    ) -> ToolContext:
        return ToolContext(
            owner=request.owner,
            conversation_id=request.conversation_id,
            call_id=call.id,
            workspace=session.workspace,
            settings=self._settings.tools,
            reach=request.reach,
            messages=self._store,
            session=session,
        )

    def _is_pinned(self, request: AgentRequest, name: str) -> bool:
        tool = (request.tools or self._tools).get(name)
        return name in self._settings.tools.pinned_tools or bool(tool and tool.pinned)


def _answer(turn: TurnState, call: ToolCallPart) -> list[Event]:
    """A call answered without running (refused, or stopped as a loop), shown to the
    client as a tool that ran."""
    turn.record(call)
    assert call.result is not None
    return [ToolStarted(call.id, call.name, call.arguments), _finished(call, call.result)]


def _finished(call: ToolCallPart, result: ToolResult) -> ToolFinished:
    return ToolFinished(call.id, call.name, call.arguments, result.content, result.is_error, 0.0)


@dataclass(slots=True)
class _Run:
    """What the loop keeps for one turn besides the turn itself."""

    budget: Budget
    detector: LoopDetector
    active: ActiveTools
    session: TurnSession
    shown: Shown
    repair: TurnRepair
    passthrough: bool
    """No server tools: one model call whose tool-call fragments stream as they come."""


def _turn_end(info: TurnInfo, turn: TurnState, error: ParleyError | None) -> TurnEnd:
    parts = turn.parts()
    return TurnEnd(
        turn=info,
        text=reply_text(parts),
        stop_reason=turn.stop_reason,
        usage=turn.usage,
        cost_usd=turn.cost_usd,
        tool_calls=sum(isinstance(p, ToolCallPart) for p in parts),
        error=error,
    )
