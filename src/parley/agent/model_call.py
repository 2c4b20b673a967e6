"""One model call of an agent step: deadlines, retries and fallback models.

The provider is always called through the interceptor chain, once per attempt: each
retry and each fallback model is a call the interceptors see.

- Deadlines: the first event must come within min(30 + input_tokens / 1000, 180) s and
  each later one within 30 s (all settings). A missed deadline is a ``ProviderError``;
  whatever arrived before it is kept by the caller.
- Retries: an empty reply (no text, reasoning or tool call; one cut by ``max_tokens``
  is an answer, not a failure) or a retryable error (429,
  502, 503, overloaded, reset, timeout before the first token) is retried after 1, 2
  and 4 s (jittered; a Retry-After header is honoured, and one longer than
  ``max_retry_after_seconds`` skips straight to the fallback), but only while no answer
  text or tool call has reached the client. Then each fallback model of the alias gets
  the same treatment. A ``Restart`` event tells the client to drop partial output.
- A client that retries by itself (``CallPlan.client_retries``: an OpenAI SDK) makes
  those retries: while nothing has reached it (its failure is still an HTTP error it
  can retry), each model gets one try, then the next fallback, so that one SDK call
  with its two retries reaches a model 3 times, not 12. Once anything was shown
  (the 200 of a stream is sent: a failure is an error event no client retries), the
  retries above apply again.
- Every attempt's usage is counted in the turn, discarded ones included.

What does not belong here: what to do with the reply (``loop.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from parley.agent.stream import StreamAccumulator, ThinkTagReader
from parley.agent.turn import TurnState
from parley.errors import ProviderError
from parley.events import (
    Done,
    Event,
    ReasoningDelta,
    Restart,
    StopReason,
    TextDelta,
    ToolCallDelta,
)
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallInfo, Purpose, TurnInfo
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ResolvedModel
from parley.settings import AgentSettings

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CallPlan:
    """What one model call may use: the models in order and how to build each request."""

    models: list[ResolvedModel]
    request_for: Callable[[ResolvedModel], ModelRequest]
    input_tokens: int
    """An estimate of the request's size, for the first-token deadline."""
    incremental: bool
    """True when events reach the client as they come (a streaming client)."""
    forwards_tool_calls: bool = True
    """False when tool-call fragments are held back (server tools are in play), so a
    call alone has not reached the client."""
    turn: TurnInfo = field(default_factory=TurnInfo)
    """Who the call is for, as the interceptors see it."""
    purpose: Purpose = "chat"
    client_retries: bool = False
    """The client retries a failed request itself: no same-model retries while nothing
    has reached it (fallback models are still tried)."""


def first_token_seconds(settings: AgentSettings, input_tokens: int) -> float:
    return min(
        settings.first_token_base_seconds
        + input_tokens / 1000 * settings.first_token_seconds_per_1k_input,
        settings.first_token_max_seconds,
    )


class _Watchdog:
    """The deadlines of one stream with one timer, re-armed when it fires rather than
    for every chunk (a chunk costs a float store). Only time spent waiting for the
    upstream counts: a slow client holding up the reader is not the upstream's fault."""

    def __init__(self, first: float, between: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.limit = first
        self.between = between
        self.got_first = False
        self.fired = False
        self.waiting_since: float | None = None
        self._timeout: asyncio.Timeout | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self, timeout: asyncio.Timeout) -> None:
        self._timeout = timeout
        self._handle = self.loop.call_at(self.loop.time() + self.limit, self._check)

    def received(self) -> None:
        self.waiting_since = None
        if self.fired:
            # The deadline expired in the same loop iteration that this event arrived:
            # the cancel it queued has not run yet. Drop it (it would land in whatever
            # the consumer awaits next) and keep watching.
            self.fired = False
            if self._timeout is not None:
                self._timeout.reschedule(None)
            self._handle = self.loop.call_at(self.loop.time() + self.between, self._check)
        if not self.got_first:
            self.got_first = True
            self.limit = self.between
            if self._handle is not None:  # the first-token timer may be due much later
                self._handle.cancel()
                self._handle = self.loop.call_at(self.loop.time() + self.limit, self._check)

    def _check(self) -> None:
        now = self.loop.time()
        since = self.waiting_since
        if since is not None and now - since >= self.limit and self._timeout is not None:
            self._timeout.reschedule(now)  # expire now: the pending read is cancelled
            self.fired = True
            return
        due = since + self.limit if since is not None else now + self.limit
        self._handle = self.loop.call_at(max(due, now + 0.001), self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def with_deadlines(
    events: AsyncIterator[Event], *, first: float, between: float, provider: str
) -> AsyncGenerator[Event]:
    """Pass ``events`` on, failing when the first or any later one is late."""
    watch = _Watchdog(first, between)
    loop = watch.loop
    try:
        async with asyncio.timeout(None) as timeout:
            watch.start(timeout)
            while True:
                watch.waiting_since = loop.time()
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    return
                watch.received()
                yield event
    except TimeoutError:
        what = "between chunks" if watch.got_first else "before the first token"
        error = ProviderError(
            f"upstream {provider!r} sent nothing for {watch.limit:g} s {what}",
            provider=provider,
            retryable=not watch.got_first,
            code="upstream_timeout",
        )
        error.status = 504
        raise error from None
    finally:
        watch.stop()
        close = getattr(events, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


class EmptyReply(ProviderError):
    pass


def _falls_back(error: ProviderError) -> bool:
    """Worth trying another model: the upstream failed, not the request."""
    return (
        error.retryable
        or error.upstream_status in (401, 403, 404)
        or (error.upstream_status is not None and error.upstream_status >= 500)
    )


@dataclass(frozen=True, slots=True)
class StepEnd:
    """How a model step ended: the reply's stop reason and the model that gave it
    (a fallback, maybe). The last item of ``ModelCall.run``."""

    stop_reason: StopReason
    model: str
    """The model's public name."""


@dataclass(slots=True)
class _Progress:
    """What a streaming client has been shown of the step, which decides whether a
    failure may still be retried."""

    answered: bool = False
    """Answer text or a tool call of this attempt reached the client."""
    reasoning_shown: bool = False
    """Reasoning reached the client (its 200 has been sent)."""

    def saw(self, event: Event, plan: CallPlan) -> None:
        if not plan.incremental:
            return
        if isinstance(event, TextDelta) or (
            plan.forwards_tool_calls and isinstance(event, ToolCallDelta)
        ):
            self.answered = True  # reasoning alone does not block a retry
        elif isinstance(event, ReasoningDelta):
            self.reasoning_shown = True


def _pieces(raw: Event, think: ThinkTagReader) -> list[Event]:
    """``raw`` with ``<think>`` text split out as reasoning (the reader's rest before
    ``Done``)."""
    if isinstance(raw, TextDelta):
        return [*think.feed(raw.text)]
    if isinstance(raw, Done):
        return [*think.flush(), raw]
    return [raw]


def _check_not_empty(step: StreamAccumulator, model: ResolvedModel) -> None:
    # one cut by max_tokens is an answer (hidden reasoning may have used the budget)
    if not step.has_output and step.stop_reason not in ("content_filtered", "max_tokens"):
        raise EmptyReply(
            "the model returned an empty reply",
            provider=model.provider.name,
            retryable=True,
            code="empty_reply",
        )


class ModelCall:
    """Runs one step's model call with retries and fallbacks, feeding ``turn.step``."""

    def __init__(
        self,
        settings: AgentSettings,
        pricing: PriceCatalog,
        chain: InterceptorChain,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._settings = settings
        self._pricing = pricing
        self._chain = chain
        self._sleep = sleep

    async def run(self, plan: CallPlan, turn: TurnState) -> AsyncGenerator[Event | StepEnd]:
        """The step's events (normalised by the stream reader), then its ``StepEnd``;
        raises when every attempt failed."""
        progress = _Progress()
        attempt = 0
        last_error: ProviderError | None = None
        for position, model in enumerate(plan.models):
            if position:
                attempt += 1
                yield Restart("fallback", attempt, model.public_name, 0.0)
            for pause in [*self._settings.retry_backoff_seconds, None]:
                progress.answered = False
                try:
                    attempt_events = self._attempt(plan, model, attempt, turn, progress)
                    async with contextlib.aclosing(attempt_events) as events:
                        async for event in events:
                            yield event
                except ProviderError as exc:
                    self._count(turn, model)
                    if progress.answered or (not exc.retryable and not _falls_back(exc)):
                        raise
                    last_error = exc
                    delay = self._retry_delay(exc, pause, plan, progress)
                    if delay is None:
                        break  # the next model
                    attempt += 1
                    yield Restart(exc.code or "retry", attempt, model.public_name, delay)
                    await self._sleep(delay)
                    continue
                except BaseException:
                    self._count(turn, model)
                    raise
                self._count(turn, model)
                assert turn.step.stop_reason is not None
                yield StepEnd(turn.step.stop_reason, model.public_name)
                return
        assert last_error is not None
        raise last_error

    def _retry_delay(
        self, exc: ProviderError, pause: float | None, plan: CallPlan, progress: _Progress
    ) -> float | None:
        """How long to wait before trying the same model again (None: do not)."""
        if not exc.retryable or pause is None:
            return None  # straight to the fallback
        if plan.client_retries and not progress.reasoning_shown:
            return None  # the client retries the request itself
        delay = pause * random.uniform(1.0, 1.25)
        if exc.retry_after is not None:
            if exc.retry_after > self._settings.max_retry_after_seconds:
                return None
            delay = max(delay, exc.retry_after)
        return delay

    async def _attempt(
        self,
        plan: CallPlan,
        model: ResolvedModel,
        attempt: int,
        turn: TurnState,
        progress: _Progress,
    ) -> AsyncGenerator[Event]:
        """One attempt's events into ``turn.step``, up to its ``Done`` (not passed on)."""
        step = turn.begin_step()
        call = CallInfo(
            "model",
            model.public_name,
            plan.turn,
            purpose=plan.purpose,
            attempt=attempt,
            provider=model.provider.name,
            upstream_model=model.model,
        )
        request = plan.request_for(model)
        events = self._chain.stream(call, request, partial(self._open, model, plan))
        think = ThinkTagReader()
        async with contextlib.aclosing(events):
            async for raw in events:
                if raw.__class__ is TextDelta and think.passes_through:
                    step.apply(raw)  # the common case, once per chunk
                    progress.answered = progress.answered or plan.incremental
                    yield raw
                    continue
                if isinstance(raw, Restart):  # an interceptor rewrote the reply
                    step = turn.begin_step()
                    think = ThinkTagReader()
                    yield raw
                    continue
                for piece in _pieces(raw, think):
                    event = step.apply(piece)
                    if isinstance(event, Done):
                        _check_not_empty(step, model)
                        return
                    progress.saw(event, plan)
                    yield event
        raise ProviderError(
            "upstream stream ended without finishing",
            provider=model.provider.name,
            code="upstream_incomplete",
        )

    def _open(
        self, model: ResolvedModel, plan: CallPlan, request: ModelRequest
    ) -> AsyncGenerator[Event]:
        """The upstream's stream under its deadlines (inside the chain, so that the
        interceptors see a timeout like any other failure)."""
        return with_deadlines(
            model.provider.stream(request),
            first=first_token_seconds(self._settings, plan.input_tokens),
            between=self._settings.between_chunks_seconds,
            provider=model.provider.name,
        )

    def _count(self, turn: TurnState, model: ResolvedModel) -> None:
        usage = turn.step.usage
        cost = None if usage is None else self._pricing.cost(model.model, usage)
        turn.count(usage, cost)
