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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from parley.api.chunk_writer import (
    ChunkWriter,
    Ending,
    Stage,
    Write,
    closing,
    coalescing,
    displaying,
    finish_reason,
)
from parley.api.coalesce import Coalescer
from parley.api.errors import error_response
from parley.api.sse import (
    KEEPALIVE,
    KEEPALIVE_LINE,
    ChunkEncoder,
    EventStream,
    usage_to_openai,
)
from parley.api.state import AppState
from parley.api.statuses import OPENAI, Dialect
from parley.conversations.generation import Generation, TurnResult
from parley.errors import (
    ParleyError,
    ProviderError,
)
from parley.events import (
    Done,
    Event,
    Logprobs,
    Restart,
    StreamError,
    UsageEvent,
)
from parley.messages import ReasoningPart, ToolCallPart, Usage, reply_text
from parley.providers.openai_chat import tool_call
from parley.streams import EventLog, split_events, with_id
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
    return error_response(error, retry=error.retryable and not generation.result().steps_done)


MESSAGE_HEADER = "x-parley-message-id"
"""On a streamed reply: the message it is (its events' ids begin with it)."""


def _headers(generation: Generation) -> dict[str, str]:
    """The request fields the model's provider ignored (advisory ones it has no use for)."""
    if not generation.ignored_params:
        return {}
    return {"x-parley-ignored-params": ", ".join(generation.ignored_params)}


def _parley(generation: Generation) -> dict[str, Any]:
    return {"conversation_id": generation.conversation_id, "message_id": generation.message_id}


def _summary(generation: Generation, result: TurnResult) -> dict[str, Any]:
    """What the last chunk (or the whole response) adds: cost, and why the loop stopped."""
    extra: dict[str, Any] = {"cost": generation.cost}
    if generation.notes:
        extra["notes"] = list(generation.notes)
    if generation.citations:
        extra["citations"] = [c.to_json() for c in generation.citations.items]
    if result.pending:
        extra["pending_approvals"] = [
            {"id": call.id, "tool": call.name, "arguments": call.arguments}
            for call in result.pending
        ]
    if result.stop is not None:
        extra["stopped"] = {"code": result.stop.code, "message": result.stop.message}
    return extra


def _finish_status(result: TurnResult, dialect: Dialect) -> int | None:
    return dialect.finish(tools_ran=bool(result.server_calls), waiting=bool(result.pending))


def _ending(generation: Generation, dialect: Dialect) -> Ending:
    """How the stream ends: the summary, the Chatchat status, and the whole answer
    again when the dialect repeats it."""
    result = generation.result()
    repeat = dialect.repeats_answer(waiting=bool(result.pending))
    return Ending(
        _summary(generation, result),
        _finish_status(result, dialect),
        shown_text(generation, result) if repeat else None,
    )


def stream_response(
    state: AppState,
    generation: Generation,
    include_usage: bool,
    *,
    coalesce_ms: int = 0,
    legacy: bool = False,
    dialect: Dialect = OPENAI,
    header: Sequence[dict[str, Any]] = (),
    resumable: bool = True,
) -> Response:
    """``resumable``: every event carries an id and is kept for a client that comes back
    with ``Last-Event-ID`` (``api/resume.py``); Chatchat's routes are not (its client
    reads each network chunk as one ``data:`` line). ``legacy``: the request gave
    ``functions``, so its call is streamed as ``delta.function_call`` and it finishes
    with ``function_call``. ``dialect``: how
    the chunks' Chatchat ``status`` is numbered. ``header``: chunks sent first, before
    the role chunk (an empty delta, these fields at the top level: Chatchat's knowledge
    chat sends its ``docs`` so). The events become frames in ``chunk_writer.py``."""
    encoder = ChunkEncoder(
        completion_id=f"chatcmpl-{generation.message_id}",
        created=generation.created,
        model=generation.model.public_name,
        parley=_parley(generation),
        message_id=generation.message_id,
        include_usage=include_usage,
    )
    writers: list[ChunkWriter] = []

    def run(write: Write) -> None:
        if resumable:
            write = journaled(write, state.events, generation.message_id)
        writer = ChunkWriter(
            encoder,
            write,
            dialect=dialect,
            legacy=legacy,
            include_usage=include_usage,
            header=header,
            ending=lambda: _ending(generation, dialect),
        )
        writers.append(writer)
        stage: Stage = writer
        if coalesce_ms:
            stage = coalescing(writer, Coalescer(coalesce_ms / 1000, writer.text))
        if generation.rules:
            rules, budget = generation.rules, generation.rule_budget
            rewriter = DisplayRewriter(rules, with_storage_rules=True, budget=budget)
            if rewriter:
                stage = displaying(rewriter, stage)
        state.service.start(generation, closing(stage, write))

    def first_failure() -> Response | None:
        failed = writers[0].failed_first if writers else None
        return None if failed is None else failure_response(failed, generation)

    return EventStream(
        run,
        first_failure,
        headers=[
            (k.encode(), v.encode())
            for k, v in {**_headers(generation), MESSAGE_HEADER: generation.message_id}.items()
        ],
        on_disconnect=generation.client_left,  # cancels as server.on_disconnect says
        keepalive_seconds=state.settings.server.keepalive_seconds,
        keepalive=KEEPALIVE_LINE if resumable else KEEPALIVE,
    )


def journaled(write: Write, events: EventLog, message_id: str) -> Write:
    """``write`` with an ``id:`` on every event, each kept in ``events`` as it goes out
    (also once the client has gone: it may come back for the rest)."""
    sent = 0

    async def journal(frame: bytes | None) -> None:
        nonlocal sent
        if frame is None:
            events.end(message_id)
            await write(None)
            return
        out = []
        for event in split_events(frame):
            sent += 1
            events.append(message_id, sent, event)
            out.append(with_id(message_id, sent, event))
        await write(out[0] if len(out) == 1 else b"".join(out))

    return journal


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
    result: TurnResult


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
    return Finished(last, usage[-1] if usage else Usage(), joined, generation.result())


def shown_text(generation: Generation, result: TurnResult) -> str:
    """The reply's text as the client is shown it (the assistant's display rules
    applied, and its storage rules if the reply was not stored)."""
    text = reply_text(result.parts)
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
    result = reply.result
    text = shown_text(generation, result)
    reasoning = "".join(p.text for p in result.parts if isinstance(p, ReasoningPart))
    calls = result.client_calls
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
        "model": result.answered_by or generation.model.public_name,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None
                if logprobs is None
                else {"content": list(logprobs.content), "refusal": list(logprobs.refusal)},
                "finish_reason": finish_reason(reply.done.stop_reason, legacy),
            }
        ],
        "usage": usage_to_openai(reply.usage),
        "parley": {
            **_parley(generation),
            **_summary(generation, result),
            "tools": tool_report(result.server_calls),
        },
        "status": _finish_status(result, dialect),
        "message_type": 1,
        "message_id": generation.message_id,
    }


def tool_report(calls: Sequence[ToolCallPart]) -> list[dict[str, Any]]:
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
