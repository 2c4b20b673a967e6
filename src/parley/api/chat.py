"""``POST /v1/chat/completions`` (and Chatchat's ``/chat/chat/completions``), streaming and not:
the body read and checked, the turn prepared, and the answer (``replies.py``) begun.

Retries: a client that retries by itself (it sends ``x-stainless-retry-count``, as
every official OpenAI SDK does, or ``Idempotency-Key``) gets one try per model under
``agent.client_retries: defer`` (``ChatTurn.client_retries``), and an upstream failure
answered as an HTTP error says ``x-should-retry``: true when a retry may help (the
upstream error was retryable: rate limited, overloaded, unavailable, a timeout before
the first token) and the turn has done no work a retry would repeat (no tool ran).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from parley.api.completion_shapes import ChatCompletion, ChatCompletionChunk, StreamErrorEvent
from parley.api.errors import validation_error
from parley.api.json_depth import check_depth
from parley.api.openapi import answers, event_stream, json_body
from parley.api.replies import collect, stream_response
from parley.api.resume import resumed
from parley.api.state import AppState
from parley.api.statuses import CHATCHAT_AGENT, CHATCHAT_PLAIN, OPENAI, Dialect
from parley.api.wire import check_counts, to_turn
from parley.api.wire_models import ChatCompletionRequest
from parley.conversations.generation import Generation
from parley.errors import (
    InvalidRequest,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from parley.identity import Caller

router = APIRouter()


STREAM = event_stream(
    ChatCompletionChunk,
    StreamErrorEvent,
    description="With `stream: true`: `chat.completion.chunk` objects, then `data: [DONE]`. "
    "A failure after the first chunk is an error event, and no [DONE] follows.",
)
"""The streamed answer of every route that answers like chat completions."""
CHAT_ERRORS = (404, 409, 413, 415, 429, 502, 503, 504)
"""Their failures beyond the shared ones: unknown models and ids, a reply superseded
before it began, a body too large or not JSON, and the upstream's failures (429 too)."""
_CHAT = answers(ChatCompletion, errors=(*CHAT_ERRORS, 408), content=STREAM)
_QUESTION = {"role": "user", "content": "Name a colour."}
_BODY = json_body(
    ChatCompletionRequest,
    examples={
        "answer": {"messages": [_QUESTION]},
        "streamed": {
            "messages": [_QUESTION],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    },
)
"""Admission control guards the chat routes: a body too slow is 408, and too many
requests in flight 429 (one key) or 503 (in all)."""


@router.post(
    "/v1/chat/completions",
    openapi_extra=_BODY,
    tags=["chat"],
    **_CHAT,
)
async def chat_completions(request: Request) -> Response:
    """OpenAI Chat Completions."""
    return await _chat(request, compat=False)


@router.post(
    "/chat/chat/completions",
    openapi_extra=_BODY,
    tags=["chatchat"],
    **_CHAT,
)
async def chatchat_completions(request: Request) -> Response:
    """Langchain-Chatchat's entry: the same, creating unknown conversation ids on first use."""
    return await _chat(request, compat=True)


async def _chat(request: Request, *, compat: bool) -> Response:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    last_event_id = request.headers.get("last-event-id")
    if last_event_id is not None:  # a streamed reply, resumed: not a new turn
        return await resumed(state, caller.owner, last_event_id)
    data = await read_json_object(request, state)
    if not compat:
        return await answer(state, request, caller, data)
    chatchat_body(data)
    from parley.api.chatchat.rag import direct_tool_answer  # it answers through ``answer``

    direct = await direct_tool_answer(state, request, caller, data)
    if direct is not None:  # a tool chosen with its input: Chatchat calls it itself
        return direct
    return await answer(
        state,
        request,
        caller,
        data,
        source="chatchat",
        create_missing=True,
        dialect=CHATCHAT_AGENT if data.get("tools") else CHATCHAT_PLAIN,
    )


def chatchat_body(data: dict[str, Any]) -> None:
    """Read a Chatchat body as Chatchat does: ``max_tokens`` of 0 or null is the default,
    and ``metadata`` is its WebUI's attachments (``{"images": [...], ...}``), not
    OpenAI's string map, so it is left out unless it is one."""
    if not data.get("max_tokens"):
        data.pop("max_tokens", None)
    metadata = data.get("metadata")
    if metadata is None or (
        isinstance(metadata, dict) and not all(isinstance(v, str) for v in metadata.values())
    ):
        data.pop("metadata", None)


async def answer(
    state: AppState,
    request: Request,
    caller: Caller,
    data: dict[str, Any],
    *,
    source: str = "chat.completions",
    create_missing: bool = False,
    dialect: Dialect = OPENAI,
    header: Sequence[dict[str, Any]] = (),
    resumable: bool = True,
    **changes: Any,
) -> Response:
    """The chat-completions answer to the request body ``data`` (its turn changed by
    ``changes``: a route's anchor, for one), its Chatchat ``status`` numbered as
    ``dialect`` says and ``header``'s chunks first (see ``replies.stream_response``).
    ``resumable``: a stream's events carry ids (not for the routes that translate the
    stream into another API's events, whose clients never see them)."""
    check_counts(data, state.settings.chat)
    body = chat_request(data)
    turn = to_turn(
        body,
        caller=caller,
        source=source,
        limits=state.settings.chat,
        tools=state.tools,
        create_missing=create_missing,
    )
    if state.settings.agent.client_retries == "defer" and retries_itself(request):
        changes["client_retries"] = True
    if changes:
        turn = replace(turn, **changes)
    generation = await state.service.prepare(turn)
    return await respond(
        state, request, body, generation, dialect=dialect, header=header, resumable=resumable
    )


def retries_itself(request: Request) -> bool:
    """The client retries a failed request by itself: an OpenAI SDK (it sends its try
    number, 0 on the first) or a client that sends an ``Idempotency-Key``."""
    headers = request.headers
    return "x-stainless-retry-count" in headers or "idempotency-key" in headers


async def read_json_object(
    request: Request, state: AppState, *, empty: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The request's JSON object body (``empty`` stands in for no body, when given),
    nested no deeper than ``server.max_json_depth``."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type and "json" not in content_type:
        raise UnsupportedMediaType(
            f"send the body as application/json, not {content_type[:60]!r}",
            param="content-type",
        )
    raw = await read_body(
        request, state.settings.server.max_body_bytes, allow_empty=empty is not None
    )
    if empty is not None and not raw.strip():
        return dict(empty)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object", code="invalid_json")
    check_depth(raw, state.settings.server.max_json_depth)
    return data


def chat_request(data: dict[str, Any]) -> ChatCompletionRequest:
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


async def respond(
    state: AppState,
    request: Request,
    body: ChatCompletionRequest,
    generation: Generation,
    *,
    dialect: Dialect = OPENAI,
    header: Sequence[dict[str, Any]] = (),
    resumable: bool = True,
) -> Response:
    """Run a prepared generation as the chat-completions response ``body`` asked for."""
    options = body.stream_options
    include_usage = bool(options and options.include_usage)
    legacy = body.functions is not None
    if body.stream:
        return stream_response(
            state,
            generation,
            include_usage,
            coalesce_ms=options.coalesce_ms if options else 0,
            legacy=legacy,
            dialect=dialect,
            header=header,
            resumable=resumable and dialect is OPENAI,
        )
    return await collect(state, generation, request, legacy=legacy, dialect=dialect, header=header)


async def read_body(request: Request, limit: int, *, allow_empty: bool = False) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body larger than {limit} bytes")
        chunks.append(chunk)
    if not size and not allow_empty:
        raise InvalidRequest("the request body is empty", code="invalid_json")
    return b"".join(chunks)
