"""How a prepared generation becomes a chat-completions answer: the event stream
(``stream_response``: ``chat.completion.chunk`` frames, Chatchat's status fields, tool
progress, restarts, logprobs, the legacy ``function_call`` shape) and the whole reply
(``finished``, ``completion_body``), for every route that answers like chat completions.

Streaming waits for the model's first output before sending the 200: a failure before
it is a real HTTP error (``failure_response``, with ``x-should-retry``), never an empty
stream. After it, a failure is sent as ``data: {"error": ...}`` and the stream closes
without ``[DONE]``.

What does not belong here: reading the request and preparing the turn (``chat.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from parley.api.coalesce import Coalescer, Kind
from parley.api.errors import error_response
from parley.api.sse import (
    DONE,
    ChunkEncoder,
    EventStream,
    usage_to_openai,
)
from parley.api.state import AppState
from parley.api.statuses import OPENAI, AgentStatus, Dialect
from parley.conversations.generation import Generation
from parley.errors import (
    ParleyError,
    ProviderError,
)
from parley.events import (
    FINISH_REASONS,
    Done,
    Event,
    Logprobs,
    ReasoningDelta,
    Restart,
    Status,
    StepDone,
    StopReason,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolStarted,
    UsageEvent,
)
from parley.messages import ReasoningPart, ToolCallPart, Usage, reply_text
from parley.providers.openai_chat import tool_call
from parley.transforms.output import DisplayRewriter, apply_rules

log = logging.getLogger(__name__)


class ClientGone(ParleyError):
    """The client of a non-streaming request went away before the reply (nobody reads
    the answer: 499, not a server error)."""

    status = 499
    type = "client_closed_request"


def failure_response(error: ParleyError, generation: Generation) -> Response:
    """The HTTP error of a generation that failed before its answer began. An upstream
    failure says whether the client should retry (``x-should-retry``): when the upstream
    may answer next time and nothing the turn did (its tools) would run twice."""
    if not isinstance(error, ProviderError):
        return error_response(error)
    return error_response(error, retry=error.retryable and not generation.turn.committed)


def _headers(generation: Generation) -> dict[str, str]:
    """The request fields the model's provider ignored (advisory ones it has no use for)."""
    if not generation.ignored_params:
        return {}
    return {"x-parley-ignored-params": ", ".join(generation.ignored_params)}


def _parley(generation: Generation) -> dict[str, Any]:
    return {"conversation_id": generation.conversation_id, "message_id": generation.message_id}


def _summary(generation: Generation) -> dict[str, Any]:
    """What the last chunk (or the whole response) adds: cost, and why the loop stopped."""
    turn = generation.turn
    extra: dict[str, Any] = {"cost": generation.cost}
    if generation.notes:
        extra["notes"] = list(generation.notes)
    if generation.citations:
        extra["citations"] = [c.to_json() for c in generation.citations.items]
    waiting = turn.pending_calls()
    if waiting:
        extra["pending_approvals"] = [
            {"id": call.id, "tool": call.name, "arguments": call.arguments} for call in waiting
        ]
    if turn.stop is not None:
        extra["stopped"] = {"code": turn.stop.code, "message": turn.stop.message}
    return extra


def _finish_status(generation: Generation, dialect: Dialect) -> int | None:
    turn = generation.turn
    return dialect.finish(tools_ran=bool(turn.server_calls()), waiting=bool(turn.pending_calls()))


def _chatchat_call(
    dialect: Dialect, tool: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any] | None:
    """A server tool's start or end in the delta, as Chatchat's agent chat sends it
    (``delta.tool_calls``, with ``tool_output`` and ``is_error``); None on other routes,
    whose clients would take a call in the delta for one of their own to run."""
    if not dialect.tool_calls_in_delta:
        return None
    function = {"name": tool["name"], "arguments": tool["arguments"]}
    call = {"index": 0, "id": tool["id"], "type": "function", "function": function}
    return {"content": "", "tool_calls": [{**call, **result}]}


def _final_answer(generation: Generation, dialect: Dialect) -> str | None:
    """The whole answer again for the last chunk, when the dialect repeats it."""
    if not dialect.repeats_answer(waiting=bool(generation.turn.pending_calls())):
        return None
    return shown_text(generation)


def stream_response(
    state: AppState,
    generation: Generation,
    include_usage: bool,
    *,
    coalesce_ms: int = 0,
    legacy: bool = False,
    dialect: Dialect = OPENAI,
    header: Sequence[dict[str, Any]] = (),
) -> Response:
    """``legacy``: the request gave ``functions``, so its call is streamed as
    ``delta.function_call`` and it finishes with ``function_call``. ``dialect``: how
    the chunks' Chatchat ``status`` is numbered. ``header``: chunks sent first, before
    the role chunk (an empty delta, these fields at the top level: Chatchat's knowledge
    chat sends its ``docs`` so)."""
    encoder = ChunkEncoder(
        completion_id=f"chatcmpl-{generation.message_id}",
        created=generation.created,
        model=generation.model.public_name,
        parley=_parley(generation),
        message_id=generation.message_id,
        include_usage=include_usage,
    )
    usage: list[Usage] = []
    failed_first: list[ParleyError] = []

    token = dialect.text(AgentStatus.LLM_NEW_TOKEN)

    def run(write: Callable[[bytes | None], Awaitable[None]]) -> None:
        started = False

        async def write_text(kind: Kind, text: str) -> None:
            await write(encoder.delta({kind: text}, token))

        coalescer = Coalescer(coalesce_ms / 1000, write_text) if coalesce_ms else None

        rewriter = (
            DisplayRewriter(
                generation.rules, with_storage_rules=True, budget=generation.rule_budget
            )
            or None
            if generation.rules
            else None
        )

        async def rewritten(event: Event) -> None:
            if rewriter is not None:  # the assistant's display rules: shown, never stored
                if isinstance(event, TextDelta):
                    text = rewriter.feed(event.text)
                    if not text:
                        return
                    event = TextDelta(text)
                elif isinstance(event, Restart | StreamError):
                    rewriter.finish()  # what it held belongs to output being dropped
                elif not isinstance(event, ReasoningDelta | UsageEvent):
                    # a step ends, a tool runs, the reply ends: what it held goes first
                    tail = rewriter.finish()
                    if tail:
                        await shown(TextDelta(tail))
            await shown(event)

        async def shown(event: Event) -> None:
            if coalescer is None:
                await delivered(event)
                return
            try:
                if coalescer is not None and started:
                    if event.__class__ is TextDelta:
                        await coalescer.add("content", event.text)
                        return
                    if event.__class__ is ReasoningDelta:
                        await coalescer.add("reasoning_content", event.text)
                        return
                    await coalescer.flush()  # what is held goes before anything else
                    if isinstance(event, Done | StreamError):
                        coalescer.close()
                await deliver(event)
            except BaseException:
                coalescer.close()
                await write(None)  # whatever failed, the response ends
                raise

        async def delivered(event: Event) -> None:
            try:
                await deliver(event)
            except BaseException:
                await write(None)  # whatever failed, the response ends
                raise

        async def deliver(event: Event) -> None:
            nonlocal started
            if not started:
                if isinstance(event, StreamError):
                    failed_first.append(event.error)
                    await write(None)
                    return
                if isinstance(event, Status | Restart | UsageEvent | StepDone):
                    if isinstance(event, UsageEvent):
                        usage.append(event.usage)
                    return  # nothing to show (or clear) yet: the 200 waits for output
                started = True
                for fields in header:
                    await write(encoder.progress(dialect.text(AgentStatus.LLM_START), {}, fields))
                role = {"role": "assistant", "content": ""}
                await write(encoder.delta(role, dialect.text(AgentStatus.LLM_START)))
            match event:
                case TextDelta(text=text):
                    await write(encoder.delta({"content": text}, token))
                case ReasoningDelta(text=text):
                    if text:
                        await write(encoder.delta({"reasoning_content": text}, token))
                case ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments) if (
                    legacy
                ):
                    if index == 0:  # a legacy reply has one call (parallel calls are off)
                        legacy_call = {"name": name, "arguments": arguments} if name else {}
                        legacy_call.setdefault("arguments", arguments)
                        await write(encoder.delta({"function_call": legacy_call}, token))
                case ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments):
                    function: dict[str, str] = {"arguments": arguments}
                    call: dict[str, Any] = {"index": index}
                    if call_id is not None:  # a call's first fragment
                        call["id"] = call_id
                        call["type"] = "function"
                        function = {"name": name or "", "arguments": arguments}
                    elif name:
                        function["name"] = name
                    call["function"] = function
                    await write(encoder.delta({"tool_calls": [call]}, token))
                case ToolStarted(call_id=call_id, name=name, arguments=arguments):
                    tool = {"id": call_id, "name": name, "arguments": arguments}
                    result: dict[str, Any] = {"tool_output": None, "is_error": False}
                    await write(
                        encoder.progress(
                            AgentStatus.TOOL_START,
                            {"tool": {"phase": "start", **tool}},
                            {"tool_calls": [{**tool, **result}]},
                            delta=_chatchat_call(dialect, tool, result),
                        )
                    )
                case ToolFinished():
                    tool = {"id": event.call_id, "name": event.name, "arguments": event.arguments}
                    result = {"tool_output": event.output, "is_error": event.is_error}
                    seconds = round(event.seconds, 3)
                    await write(
                        encoder.progress(
                            AgentStatus.TOOL_END,
                            {"tool": {"phase": "end", **tool, **result, "seconds": seconds}},
                            {"tool_calls": [{**tool, **result}]},
                            delta=_chatchat_call(dialect, tool, result),
                        )
                    )
                case Restart():
                    restart = {
                        "reason": event.reason,
                        "attempt": event.attempt,
                        "model": event.model,
                        "delay_seconds": round(event.delay_seconds, 3),
                        "clear": event.clear,
                        "keep_content_chars": event.keep_content_chars,
                    }
                    await write(encoder.progress(token, {"restart": restart}))
                case Status(name=name, detail=detail):
                    # "thinking" opens each later step of an agent turn (Chatchat llm_start)
                    step = AgentStatus.LLM_NEW_TOKEN
                    if name == "thinking":
                        step = AgentStatus.LLM_START
                    status = {"name": name, "detail": detail}
                    await write(encoder.progress(dialect.text(step), {"status": status}))
                case Logprobs():
                    await write(encoder.logprobs(event, token))
                case UsageEvent(usage=event_usage):
                    usage.append(event_usage)
                case Done(stop_reason=reason):
                    frames = encoder.finish(
                        _finish_reason(reason, legacy),
                        _summary(generation),
                        _finish_status(generation, dialect),
                        _final_answer(generation, dialect),
                    )
                    if include_usage:
                        frames += encoder.usage(usage[-1] if usage else Usage())
                    await write(frames + DONE)
                    await write(None)
                case StreamError(error=error):
                    await write(encoder.error(error.message, error.type, error.code))
                    await write(None)

        # each layer only when it does something: most streams need neither
        sink = rewritten if rewriter is not None else shown if coalescer else delivered
        state.service.start(generation, sink)

    def first_failure() -> Response | None:
        return failure_response(failed_first[0], generation) if failed_first else None

    return EventStream(
        run,
        first_failure,
        headers=[(k.encode(), v.encode()) for k, v in _headers(generation).items()],
        on_disconnect=generation.detach,  # cancels as server.on_disconnect says
        keepalive_seconds=state.settings.server.keepalive_seconds,
    )


def _finish_reason(reason: StopReason, legacy: bool) -> str:
    finish = FINISH_REASONS[reason]
    return "function_call" if legacy and finish == "tool_calls" else finish


async def collect(
    state: AppState,
    generation: Generation,
    request: Request,
    *,
    legacy: bool = False,
    dialect: Dialect = OPENAI,
    header: Sequence[dict[str, Any]] = (),
) -> Response:
    """The whole reply as one ``chat.completion`` (``header``'s fields at its top level)."""
    try:
        reply = await finished(state, generation, request)
    except ProviderError as exc:
        if exc.status >= 500:  # logged as api/errors.py does
            log.warning("%s: %s", type(exc).__name__, exc.message)
        return failure_response(exc, generation)
    body = completion_body(generation, reply, legacy=legacy, dialect=dialect)
    for fields in header:
        body.update(fields)
    return Response(
        orjson.dumps(body),
        media_type="application/json",
        headers=_headers(generation),
    )


@dataclass(slots=True)
class Finished:
    """How a reply a client waited for ended, and what it adds to the stored one."""

    done: Done
    usage: Usage
    logprobs: Logprobs | None
    """All of the reply's (the last attempt's), when the client asked for them."""


async def finished(state: AppState, generation: Generation, request: Request) -> Finished:
    """Run a prepared generation for a client that waits for the whole reply.

    Raises the generation's error; a client that went away gets ``ClientGone``."""
    last_event: asyncio.Future[Done | StreamError] = asyncio.get_running_loop().create_future()
    usage: list[Usage] = []
    logprobs: list[Logprobs] = []

    async def sink(event: Event) -> None:
        if isinstance(event, UsageEvent):
            usage.append(event.usage)
        elif isinstance(event, Logprobs):
            logprobs.append(event)
        elif isinstance(event, Restart):
            logprobs.clear()  # the answer starts again
        elif isinstance(event, Done | StreamError) and not last_event.done():
            last_event.set_result(event)

    async def watch() -> None:
        """The client going away is noticed at once, not when the reply is written."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        generation.detach()  # cancels as server.on_disconnect says
        if not last_event.done():
            last_event.set_result(StreamError(ClientGone("client disconnected")))

    state.service.start(generation, sink)
    watcher = asyncio.create_task(watch())
    try:
        last = await last_event
    finally:
        watcher.cancel()
    if isinstance(last, StreamError):
        raise last.error
    joined = (
        Logprobs(
            tuple(e for lp in logprobs for e in lp.content),
            tuple(e for lp in logprobs for e in lp.refusal),
        )
        if logprobs
        else None
    )
    return Finished(last, usage[-1] if usage else Usage(), joined)


def shown_text(generation: Generation) -> str:
    """The reply's text as the client is shown it (the assistant's display rules
    applied, and its storage rules if the reply was not stored)."""
    text = reply_text(generation.turn.parts())
    if generation.rules:
        rules, budget = generation.rules, generation.rule_budget
        if not generation.stored:  # saved replies had the storage rules applied then
            text = apply_rules(text, rules, "assistant", for_storage=True, budget=budget)
        text = apply_rules(text, rules, "assistant", for_storage=False, budget=budget)
    return text


def completion_body(
    generation: Generation, reply: Finished, *, legacy: bool = False, dialect: Dialect = OPENAI
) -> dict[str, Any]:
    """The ``chat.completion`` object of a finished generation (``legacy``: its call
    named in ``function_call``, as the request gave ``functions``)."""
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    parts = generation.turn.parts()
    text = shown_text(generation)
    reasoning = "".join(p.text for p in parts if isinstance(p, ReasoningPart))
    calls = generation.turn.unanswered_calls()  # the client's to run
    ran = generation.turn.server_calls()
    message["content"] = text if text or not calls else None
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls and legacy:
        message["function_call"] = {"name": calls[0].name, "arguments": calls[0].arguments}
    elif calls:
        message["tool_calls"] = [tool_call(c) for c in calls]
    logprobs = reply.logprobs
    return {
        "id": f"chatcmpl-{generation.message_id}",
        "object": "chat.completion",
        "created": generation.created,
        "model": generation.turn.answered_by or generation.model.public_name,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None
                if logprobs is None
                else {"content": list(logprobs.content), "refusal": list(logprobs.refusal)},
                "finish_reason": _finish_reason(reply.done.stop_reason, legacy),
            }
        ],
        "usage": usage_to_openai(reply.usage),
        "parley": {**_parley(generation), **_summary(generation), "tools": tool_report(ran)},
        "status": _finish_status(generation, dialect),
        "message_type": 1,
        "message_id": generation.message_id,
    }


def tool_report(calls: list[ToolCallPart]) -> list[dict[str, Any]]:
    """The server-side tool calls of a reply, for the non-streaming response."""
    return [
        {
            "id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "tool_output": call.result.content if call.result else None,
            "is_error": bool(call.result and call.result.is_error),
        }
        for call in calls
    ]
