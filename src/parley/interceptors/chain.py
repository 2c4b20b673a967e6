"""The interceptor chain: the one door every model call and tool call goes through.

The agent loop never calls a provider or a tool directly: it asks the chain, so that
interceptors (logging, audit, filters, usage limits, command hooks, anyone's own) wrap
every call, each retry and fallback attempt included. The chain is a list sorted once
by ``order`` (ties keep their configured order); for each hook it keeps only the
interceptors that override it, so a hook nobody uses costs nothing, and with no
interceptor at all ``stream`` is the provider's own stream. The protocol, the onion and
the failure policy are described in ``protocol.py``.

What does not belong here: retries, deadlines and fallbacks (``agent/model_call.py``),
tool timeouts and output caps (``agent/tool_runner.py``), finding interceptors
(``discovery.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from parley.errors import ParleyError, ProviderError
from parley.events import (
    Done,
    Event,
    ReasoningDelta,
    Restart,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from parley.interceptors.protocol import (
    HOOK_NAMES,
    CallCancelled,
    CallInfo,
    Interceptor,
    InterceptorFailed,
    ModelResponse,
    Services,
    ToolCall,
    TurnEnd,
    closes_on_failure,
    label,
    overrides,
)
from parley.messages import ToolCallPart, Usage
from parley.providers.protocol import ModelRequest
from parley.tools.protocol import Tool, ToolContext, ToolOutput

if TYPE_CHECKING:
    from parley.providers.pricing import PriceCatalog

log = logging.getLogger(__name__)

T = TypeVar("T")

Open = Callable[[ModelRequest], AsyncGenerator[Event]]
"""Starts the upstream stream for a (possibly rewritten) request."""

CANCEL_GRACE_SECONDS = 2.0
"""How long the after-hooks of an abandoned tool call may take."""


class InterceptorChain:
    def __init__(
        self,
        interceptors: Iterable[Interceptor] = (),
        *,
        pricing: PriceCatalog | None = None,
        sources: dict[int, str] | None = None,
    ) -> None:
        ranked = sorted(enumerate(interceptors), key=lambda pair: (pair[1].order, pair[0]))
        self.interceptors: tuple[Interceptor, ...] = tuple(i for _, i in ranked)
        self._sources = sources or {}
        self._pricing = pricing

        def having(hook: str, *, outward: bool = False) -> tuple[Interceptor, ...]:
            chosen = [i for i in self.interceptors if overrides(i, hook)]
            return tuple(reversed(chosen)) if outward else tuple(chosen)

        self._before = having("before_request")
        self._on_event = having("on_stream_event", outward=True)
        self._after = having("after_response", outward=True)
        self._errors = having("on_error", outward=True)
        self._before_tool = having("before_tool_call")
        self._after_tool = having("after_tool_call", outward=True)
        self._turn_end = having("on_turn_end", outward=True)
        self._wraps_models = bool(self._before or self._on_event or self._after or self._errors)
        self._wraps_tools = bool(self._before_tool or self._after_tool)
        self._ending: set[asyncio.Task[None]] = set()

    # --- life cycle -----------------------------------------------------------------

    async def startup(self, services: Services) -> None:
        for interceptor in self.interceptors:
            await interceptor.startup(services)

    async def shutdown(self) -> None:
        await self.drain()
        for interceptor in reversed(self.interceptors):
            try:
                await interceptor.shutdown()
            except Exception:
                log.exception("interceptor %s failed to shut down", label(interceptor))

    def describe(self) -> list[dict[str, Any]]:
        """The chain as it runs, outermost first (``parley interceptors``, the admin API)."""
        return [
            {
                "name": label(i),
                "order": i.order,
                "fail_closed": closes_on_failure(i),
                "source": self._sources.get(id(i), "code"),
                "class": f"{type(i).__module__}.{type(i).__qualname__}",
                "hooks": [hook for hook in HOOK_NAMES if overrides(i, hook)],
                "details": i.describe(),
            }
            for i in self.interceptors
        ]

    @property
    def wants_turn_end(self) -> bool:
        return bool(self._turn_end)

    # --- model calls ----------------------------------------------------------------

    def stream(self, call: CallInfo, request: ModelRequest, open: Open) -> AsyncGenerator[Event]:
        """The reply to ``request`` (through ``open``), with every interceptor around it."""
        if not self._wraps_models:
            call.request = request
            return open(request)
        return self._stream(call, request, open)

    async def _stream(
        self, call: CallInfo, request: ModelRequest, open: Open
    ) -> AsyncGenerator[Event]:
        finished = False
        reply = _Reply(call)
        try:
            request = await self._through(self._before, "before_request", request, call)
            call.request = request
            done: Done | None = None
            call.opened = True
            events = open(request)
            add = reply.add
            async with aclosing(events):
                if not self._on_event:  # the common case: one event in, one out
                    async for event in events:
                        if event.__class__ is Done:
                            assert isinstance(event, Done)
                            done = event
                            break
                        add(event)
                        yield event
                else:
                    async for event in events:
                        for out in self._pass(event, call):
                            if out.__class__ is Done:
                                assert isinstance(out, Done)
                                done = out
                                continue
                            add(out)
                            yield out
                        if done is not None:
                            break
            if done is None:
                raise ProviderError(
                    "upstream stream ended without finishing",
                    provider=call.provider or call.name,
                    code="upstream_incomplete",
                )
            response = reply.response(done, self._pricing)
            final = await self._through(self._after, "after_response", response, call)
            for out in _rewrite(response, final, call, reply.reasoning_events):
                yield out
            finished = True
            yield Done(final.stop_reason)
        except ParleyError as exc:
            raise await self._error(exc, call) from None
        except (GeneratorExit, asyncio.CancelledError):
            if not finished:
                await self._abandoned(call)
            raise
        except Exception as exc:
            await self._error(ParleyError(f"internal error: {type(exc).__name__}: {exc}"), call)
            raise

    async def _through(
        self, interceptors: Sequence[Interceptor], hook: str, value: T, call: CallInfo
    ) -> T:
        """``value`` passed through ``hook`` of each interceptor, each result replacing it."""
        for interceptor in interceptors:
            try:
                changed = await getattr(interceptor, hook)(value, call)
            except ParleyError:
                raise
            except Exception as exc:
                self._failed(interceptor, hook, exc)
                continue
            if changed is not None:
                value = changed
        return value

    def _pass(self, event: Event, call: CallInfo) -> Sequence[Event]:
        events: Sequence[Event] = (event,)
        for interceptor in self._on_event:
            out: list[Event] = []
            for each in events:
                try:
                    result = interceptor.on_stream_event(each, call)
                except ParleyError:
                    raise
                except Exception as exc:
                    self._failed(interceptor, "on_stream_event", exc)
                    result = None
                if result is None:
                    out.append(each)
                elif isinstance(result, list | tuple):
                    out.extend(result)
                else:
                    out.append(result)  # type: ignore[arg-type]
            events = out
        return events

    async def _error(self, error: ParleyError, call: CallInfo) -> ParleyError:
        for interceptor in self._errors:
            try:
                replaced = await interceptor.on_error(error, call)
            except Exception:
                log.exception("interceptor %s failed in on_error", label(interceptor))
                continue
            if isinstance(replaced, ParleyError):
                error = replaced
        return error

    async def _abandoned(self, call: CallInfo) -> None:
        """Tell ``on_error`` about an abandoned call, within ``CANCEL_GRACE_SECONDS``."""
        cancelled = CallCancelled("the call was abandoned before it finished")
        try:
            async with asyncio.timeout(CANCEL_GRACE_SECONDS):
                for interceptor in self._errors:
                    try:
                        await interceptor.on_error(cancelled, call)
                    except Exception:
                        log.exception("interceptor %s failed in on_error", label(interceptor))
        except TimeoutError:
            log.warning("on_error hooks of an abandoned call took over %g s", CANCEL_GRACE_SECONDS)

    def _failed(self, interceptor: Interceptor, hook: str, exc: Exception) -> None:
        """Apply the interceptor's failure policy to an exception from one of its hooks."""
        name = label(interceptor)
        if closes_on_failure(interceptor):
            log.error("interceptor %s failed in %s (fail closed): %r", name, hook, exc)
            raise InterceptorFailed(  # the details are in the log, not for the client
                f"interceptor {name!r} failed in {hook} ({type(exc).__name__}); "
                "the call was stopped"
            ) from exc
        log.exception("interceptor %s failed in %s (fail open: skipped)", name, hook)

    # --- tool calls -----------------------------------------------------------------

    async def call_tool(
        self, tool: Tool, arguments: dict[str, Any], context: ToolContext, call: CallInfo
    ) -> ToolOutput:
        """Run ``tool`` with every interceptor around it. Never raises but for
        cancellation: a failure is an error result the model sees."""
        if not self._wraps_tools:
            return await run_tool(tool, call.name, arguments, context)
        tool_call = ToolCall(call.call_id or context.call_id, call.name, arguments)
        output: ToolOutput | None = None
        try:
            for interceptor in self._before_tool:
                try:
                    result = await interceptor.before_tool_call(tool_call, call)
                except ParleyError as exc:
                    output = ToolOutput(_refusal(call.name, interceptor, exc.message), True)
                    break
                except Exception as exc:
                    output = self._tool_failed(interceptor, "before_tool_call", call.name, exc)
                    if output is not None:
                        break
                    continue
                if isinstance(result, ToolOutput):
                    output = result
                    break
                if isinstance(result, ToolCall):
                    tool_call = ToolCall(tool_call.id, tool_call.name, result.arguments)
            if output is None:
                output = await run_tool(tool, call.name, tool_call.arguments, context)
        except asyncio.CancelledError:
            note = ToolOutput(f"Tool '{call.name}' was cancelled before it finished", True)
            try:
                async with asyncio.timeout(CANCEL_GRACE_SECONDS):
                    await self._after_tools(tool_call, note, call)
            except Exception:
                log.exception("after_tool_call hooks of an abandoned call failed")
            raise
        return await self._after_tools(tool_call, output, call)

    async def _after_tools(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> ToolOutput:
        for interceptor in self._after_tool:
            try:
                result = await interceptor.after_tool_call(tool_call, output, call)
            except ParleyError as exc:
                output = ToolOutput(_refusal(call.name, interceptor, exc.message), True)
                continue
            except Exception as exc:
                failed = self._tool_failed(interceptor, "after_tool_call", call.name, exc)
                if failed is not None:
                    output = failed
                continue
            if result is not None:
                output = result
        return output

    def _tool_failed(
        self, interceptor: Interceptor, hook: str, tool: str, exc: Exception
    ) -> ToolOutput | None:
        name = label(interceptor)
        if closes_on_failure(interceptor):
            log.error("interceptor %s failed in %s (fail closed): %r", name, hook, exc)
            return ToolOutput(
                f"Tool '{tool}' was blocked: interceptor '{name}' failed ({type(exc).__name__}).",
                is_error=True,
            )
        log.exception("interceptor %s failed in %s (fail open: skipped)", name, hook)
        return None

    # --- turns ----------------------------------------------------------------------

    def turn_ended(self, end: TurnEnd) -> None:
        """Run the ``on_turn_end`` hooks in the background: the client's last chunk and
        the final save never wait for them. ``shutdown`` waits for those still running."""
        if not self._turn_end:
            return
        task = asyncio.get_running_loop().create_task(self._turn_end_hooks(end))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _turn_end_hooks(self, end: TurnEnd) -> None:
        for interceptor in self._turn_end:
            try:
                await interceptor.on_turn_end(end)
            except Exception:
                log.exception("interceptor %s failed in on_turn_end", label(interceptor))

    async def drain(self, seconds: float = 10.0) -> None:
        """Wait (a while) for turn-end hooks still running."""
        if self._ending:
            await asyncio.wait(set(self._ending), timeout=seconds)


async def run_tool(
    tool: Tool, name: str, arguments: dict[str, Any], context: ToolContext
) -> ToolOutput:
    """The tool's own run; an exception becomes an error result (a tool never crashes
    the turn)."""
    try:
        return await tool.run(arguments, context)
    except Exception as exc:
        log.exception("tool %s failed", name)
        return ToolOutput(f"Tool '{name}' failed: {type(exc).__name__}: {exc}", is_error=True)


def _refusal(tool: str, interceptor: Interceptor, reason: str) -> str:
    return f"Tool '{tool}' was blocked by {label(interceptor)}: {reason}"


class _Reply:
    """The reply as it passes, to hand ``after_response`` a whole ``ModelResponse``."""

    def __init__(self, call: CallInfo) -> None:
        self._call = call
        self._text: list[str] = []
        self._reasoning: list[ReasoningDelta] = []
        self._calls: dict[int, list[Any]] = {}
        self._usage: Usage | None = None
        self._first: float | None = None

    def add(self, event: Event) -> None:
        if self._first is None:
            self._first = self._call.elapsed
        cls = event.__class__
        if cls is TextDelta:
            self._text.append(event.text)  # type: ignore[union-attr]
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event)
        elif isinstance(event, ToolCallDelta):
            slot = self._calls.setdefault(event.index, [None, None, []])
            if event.id:
                slot[0] = event.id
            if event.name:
                slot[1] = event.name
            slot[2].append(event.arguments)
        elif isinstance(event, UsageEvent):
            self._usage = self._call.usage = event.usage

    @property
    def reasoning_events(self) -> list[ReasoningDelta]:
        return self._reasoning

    def response(self, done: Done, pricing: PriceCatalog | None) -> ModelResponse:
        usage = self._usage
        model = self._call.upstream_model or self._call.name
        cost = pricing.cost(model, usage) if pricing is not None and usage is not None else None
        return ModelResponse(
            text="".join(self._text),
            reasoning="".join(r.text for r in self._reasoning),
            tool_calls=tuple(
                ToolCallPart(slot[0] or f"call_{index}", slot[1], "".join(slot[2]))
                for index, slot in sorted(self._calls.items())
                if slot[1]
            ),
            stop_reason=done.stop_reason,
            usage=usage,
            cost_usd=cost,
            seconds=self._call.elapsed,
            first_event_seconds=self._first,
        )


def _rewrite(
    before: ModelResponse,
    after: ModelResponse,
    call: CallInfo,
    reasoning: list[ReasoningDelta],
) -> list[Event]:
    """The events that turn the reply the client saw into the one ``after_response``
    returned: nothing when the content is the same (perhaps new usage), else a
    ``Restart`` and the whole new content. Unchanged reasoning is sent again as it came
    (its signatures intact); usage an interceptor dropped is kept (it was spent)."""
    if after is before:
        return []
    if after.usage is None and before.usage is not None:
        after = replace(after, usage=before.usage)
    if (after.text, after.reasoning, after.tool_calls) == (
        before.text,
        before.reasoning,
        before.tool_calls,
    ):
        return [UsageEvent(after.usage)] if after.usage != before.usage and after.usage else []
    out: list[Event] = [Restart("rewritten", call.attempt, call.name, 0.0)]
    if after.reasoning == before.reasoning:
        out.extend(reasoning)
    elif after.reasoning:
        out.append(ReasoningDelta(after.reasoning))
    if after.text:
        out.append(TextDelta(after.text))
    out.extend(
        ToolCallDelta(index, c.id, c.name, c.arguments) for index, c in enumerate(after.tool_calls)
    )
    if after.usage is not None:
        out.append(UsageEvent(after.usage))
    return out
