"""``POST /v1/responses``: OpenAI's Responses API, so that clients built on it use Parley
and its agent. The body is read as a Responses body (``responses_shapes.to_chat``) and
answered by the chat-completions path itself (``chat.answer``), its answer written back
as a ``response`` object or the stream's events (``response.created``,
``response.output_item.added`` / ``.done``, ``response.output_text.delta``,
``response.function_call_arguments.delta``, reasoning summaries,
``response.completed``; each with its ``sequence_number``) by translating the chat
path's own bytes (``translated.Translated``). Conversations: ``responses_shapes``.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from parley.api.chat import CHAT_ERRORS, answer, read_json_object
from parley.api.openapi import answers, event_stream, json_body
from parley.api.responses_shapes import (
    call_item,
    envelope,
    message_item,
    parse_response_id,
    reasoning_item,
    response_id,
    stored_response,
    to_chat,
    to_response,
    usage,
)
from parley.api.responses_shapes import response_id as response_id_of
from parley.api.state import AppState
from parley.api.translated import ChunkTranslator, Translated
from parley.errors import Conflict, NotFound
from parley.ids import new_id

router = APIRouter(tags=["responses"])


class ResponsesRequest(BaseModel):
    """OpenAI's Responses body (read by ``to_chat``; Parley's own fields may be added)."""

    model_config = ConfigDict(extra="allow")
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False


class ResponseObject(BaseModel):
    """OpenAI's ``response`` object."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: str
    status: str
    model: str
    output: list[dict[str, Any]]


class ResponseEvent(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    sequence_number: int


_STREAM = event_stream(
    ResponseEvent,
    description="With `stream: true`: the Responses API's events, each an `event:` line and "
    "its `data:`, ending with `response.completed` (or `error` and `response.failed`).",
)
_BODY = json_body(
    ResponsesRequest,
    examples={"answer": {"model": "smollm2-135m-instruct", "input": "Name a colour."}},
)


@router.post(
    "/v1/responses",
    openapi_extra=_BODY,
    **answers(ResponseObject, errors=(*CHAT_ERRORS, 408), content=_STREAM),
)
async def create_response(request: Request) -> Response:
    """OpenAI Responses (streamed when ``stream`` is true)."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    data = await read_json_object(request, state)
    body = to_chat(data)
    store = data.get("store", True) is not False
    create_missing = False
    previous = data.get("previous_response_id")
    if previous:
        body["conversation_id"] = await _continued(state, caller.owner, str(previous))
    elif store and "conversation_id" not in body:
        body["conversation_id"], create_missing = new_id("conv"), True
    if not store:
        body["store"] = False
    inner = await answer(
        state,
        request,
        caller,
        body,
        source="responses",
        create_missing=create_missing,
        resumable=False,
    )
    translator = StreamTranslator(data) if data.get("stream") else None
    return Translated(inner, translator, partial(_rewritten, data))


async def _continued(state: AppState, owner: str, previous: str) -> str:
    """The conversation a ``previous_response_id`` continues (it must be its latest)."""
    message_id, conversation_id = parse_response_id(previous)
    missing = NotFound(
        f"response {previous!r} not found (a response made with store: false is not kept)",
        param="previous_response_id",
        code="response_not_found",
    )
    if conversation_id is None:
        raise missing
    try:
        branch = await state.conversations.branch(owner, conversation_id)
    except LookupError:
        raise missing from None
    if not any(m.id == message_id for m in branch):
        raise missing
    if branch[-1].id != message_id:
        raise Conflict(
            f"response {previous!r} is not the latest of its conversation: answering after "
            "an earlier response (a fork) is not supported",
            param="previous_response_id",
            code="not_latest_response",
        )
    return conversation_id


@router.get("/v1/responses/{response_id}", **answers(ResponseObject, errors=(404,)))
async def get_response(request: Request, response_id: str) -> dict[str, Any]:
    """A stored response, rebuilt from its message: its text, reasoning and the calls of
    client tools it made (server tools' steps are the agent's own, not listed)."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    message_id, conversation_id = parse_response_id(response_id)
    missing = NotFound(
        f"response {response_id!r} not found", param="response_id", code="response_not_found"
    )
    if conversation_id is None:
        raise missing
    try:
        path, _after = await state.conversations.around(caller.owner, conversation_id, message_id)
    except LookupError:
        raise missing from None
    message = path[-1]
    if message.role != "assistant":
        raise missing
    earlier = [m for m in path[:-1] if m.role == "assistant"]
    previous = response_id_of(earlier[-1].id, conversation_id) if earlier else None
    return stored_response(message, response_id, previous)


def _rewritten(request: dict[str, Any], status: int, raw: bytes) -> bytes:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if status == 200 and isinstance(data, dict) and "choices" in data:
        return orjson.dumps(to_response(data, request))
    return raw  # OpenAI's error body already


class StreamTranslator(ChunkTranslator):
    """Chat-completion chunks in, Responses events out."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__()
        self._request = request
        self._sequence = 0
        self._id = ""
        self._message_id = ""
        self._model = ""
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the item being written
        self._calls: dict[int, dict[str, Any]] = {}  # a tool call's index -> its item
        self._indexes: dict[str, int] = {}  # an item's id -> its output index
        self._usage: dict[str, Any] | None = None
        self._status = "completed"

    def _keepalive(self, comment: bytes) -> list[bytes]:
        return [comment + b"\n\n"]  # a comment, as it is

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _envelope(self, status: str) -> dict[str, Any]:
        return envelope(
            self._id,
            self._model,
            self._request,
            status=status,
            output=self._output,
            usage=self._usage,
            created=time.time(),
        )

    def _chunk(self, chunk: dict[str, Any], first: bool) -> list[bytes]:
        out: list[bytes] = []
        if first:
            ids = chunk.get("parley") or {}
            self._message_id = str(ids.get("message_id") or "")
            stored = self._request.get("store", True) is not False
            self._id = response_id(self._message_id, ids.get("conversation_id") if stored else None)
            self._model = str(chunk.get("model", ""))
            out.append(self._event("response.created", response=self._envelope("in_progress")))
            out.append(self._event("response.in_progress", response=self._envelope("in_progress")))
        if chunk.get("usage"):
            self._usage = usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._reasoning(delta["reasoning_content"])
            if delta.get("content"):
                out += self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
            if choice.get("finish_reason") == "length":
                self._status = "incomplete"
        return out

    def _begin(self, item: dict[str, Any]) -> list[bytes]:
        out = self._finish_item()
        if item["type"] != "function_call" and any(o["id"] == item["id"] for o in self._output):
            item["id"] = f"{item['id']}_{len(self._output)}"  # a later step's item
        self._open = item
        self._indexes[item["id"]] = len(self._output)
        self._output.append(item)
        shown = {**item, "content": []} if item["type"] == "message" else dict(item)
        if item["type"] == "reasoning":
            shown["summary"] = []
        added = self._event(
            "response.output_item.added", output_index=len(self._output) - 1, item=shown
        )
        return [*out, added]

    def _reasoning(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        index = len(self._output) - 1
        if self._open is None or self._open["type"] != "reasoning":
            out += self._begin(reasoning_item(self._message_id, ""))
            index = len(self._output) - 1
            part = {"type": "summary_text", "text": ""}
            opened = self._open
            assert opened is not None
            out.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=opened["id"],
                    output_index=index,
                    summary_index=0,
                    part=part,
                )
            )
        assert self._open is not None
        self._open["summary"][0]["text"] += text
        out.append(
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=self._open["id"],
                output_index=index,
                summary_index=0,
                delta=text,
            )
        )
        return out

    def _text(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        if self._open is None or self._open["type"] != "message":
            out += self._begin(message_item(self._message_id, "", "in_progress"))
            index = len(self._output) - 1
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            assert self._open is not None
            self._open["content"] = [dict(part)]
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=self._open["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                )
            )
        assert self._open is not None
        self._open["content"][0]["text"] += text
        index = len(self._output) - 1
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=self._open["id"],
                output_index=index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return out

    def _call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        number = int(call.get("index", 0))
        function = call.get("function") or {}
        if number not in self._calls:
            item = call_item(
                str(call.get("id", "")), str(function.get("name", "")), "", "in_progress"
            )
            out += self._begin(item)
            self._calls[number] = item
        item = self._calls[number]
        piece = function.get("arguments") or ""
        if piece:
            item["arguments"] += piece
            index = self._indexes[item["id"]]
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=piece,
                )
            )
        return out

    def _finish_item(self) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self._indexes[item["id"]]
        out: list[bytes] = []
        if item["type"] == "message":
            part = item["content"][0]
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                )
            )
            out.append(
                self._event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=part,
                )
            )
        elif item["type"] == "function_call":
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            )
        elif item["type"] == "reasoning":
            part = item["summary"][0]
            out.append(
                self._event(
                    "response.reasoning_summary_text.done",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    text=part["text"],
                )
            )
            out.append(
                self._event(
                    "response.reasoning_summary_part.done",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    part=part,
                )
            )
        item["status"] = "completed"
        if item["type"] == "reasoning":
            item.pop("status")
        out.append(self._event("response.output_item.done", output_index=index, item=item))
        return out

    def _end(self) -> list[bytes]:
        out = self._finish_item()
        for item in self._output:  # a call whose arguments ended when the next began
            if item.get("status") == "in_progress":
                item["status"] = "completed"
        done = "response.incomplete" if self._status == "incomplete" else "response.completed"
        final = self._envelope(self._status)
        if self.parley:
            final["parley"] = self.parley  # Parley's extension, as on a whole response
        out.append(self._event(done, response=final))
        return out

    def _failed(self, error: dict[str, Any]) -> list[bytes]:
        message = str(error.get("message", ""))
        code = error.get("code") or error.get("type") or "server_error"
        out = [self._event("error", code=code, message=message, param=error.get("param"))]
        if self._id:
            failed = self._envelope("failed")
            failed["error"] = {"code": code, "message": message}
            out.append(self._event("response.failed", response=failed))
        return out
