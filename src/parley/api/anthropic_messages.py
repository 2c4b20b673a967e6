"""``POST /v1/messages``: Anthropic's Messages API, so that the Anthropic SDK and the tools
built on it use Parley and its agent. The body is read as Anthropic's
(``anthropic_shapes.to_chat``) and answered by the chat-completions path itself
(``chat.answer``: the agent loop, approvals, knowledge, MCP, interceptors, usage and
the conversation behind it are the same), its answer written back in Anthropic's shapes:
a message, or the stream's events (``message_start``, ``content_block_start`` /
``_delta`` / ``_stop`` for thinking, text and each tool use, ``message_delta`` with the
stop reason and usage, ``message_stop``; ``ping`` for keepalives; ``error``). Failures
are Anthropic's error bodies (``{"type": "error", "error": {...}}``). A key is taken
from ``x-api-key`` as from ``Authorization``.

The translation is of the bytes the chat path writes (``translated.Translated``): the
chat completion's chunks are parsed as they come (``StreamTranslator``), so that every
behaviour of that path, keepalives and cancellation on disconnect included, holds here.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from parley.agent.repair import estimate_tokens
from parley.api.anthropic_shapes import (
    STOP_REASONS,
    AnthropicErrorResponse,
    AnthropicMessage,
    MessagesRequest,
    MessageStreamEvent,
    error_body,
    message_id,
    to_chat,
    to_message,
    usage,
)
from parley.api.chat import CHAT_ERRORS, answer, chat_request, read_json_object
from parley.api.openapi import answers, event_stream, json_body
from parley.api.state import AppState
from parley.api.translated import ChunkTranslator, Translated
from parley.api.wire import to_messages

router = APIRouter(tags=["anthropic"])

_STREAM = event_stream(
    MessageStreamEvent,
    AnthropicErrorResponse,
    description="With `stream: true`: Anthropic's events, each an `event:` line and its "
    "`data:`; a failure after the first is an `error` event.",
)
_BODY = json_body(
    MessagesRequest,
    examples={
        "answer": {
            "model": "smollm2-135m-instruct",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "Name a colour."}],
        }
    },
)


@router.post(
    "/v1/messages",
    openapi_extra=_BODY,
    **answers(AnthropicMessage, errors=(*CHAT_ERRORS, 408), content=_STREAM),
)
async def create_message(request: Request) -> Response:
    """Anthropic Messages (streamed when ``stream`` is true)."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    data = await read_json_object(request, state)
    body = to_chat(data)
    inner = await answer(state, request, caller, body, source="anthropic.messages", resumable=False)
    translator = StreamTranslator() if body.get("stream") else None
    return Translated(inner, translator, _rewritten)


class TokenCount(BaseModel):
    input_tokens: int


@router.post(
    "/v1/messages/count_tokens",
    openapi_extra=json_body(MessagesRequest),
    **answers(TokenCount),
)
async def count_tokens(request: Request) -> dict[str, Any]:
    """An estimate of the input tokens of a Messages body (about four characters a
    token, as Parley's context budget counts them: no upstream is asked)."""
    state: AppState = request.app.state.parley
    await state.auth.caller(request)
    data = await read_json_object(request, state)
    body = to_chat({"max_tokens": 1, **data})
    messages = to_messages(chat_request(body).messages)[0]  # results folded into calls
    tools = orjson.dumps(body["tools"]) if body.get("tools") else b""
    return {"input_tokens": estimate_tokens(messages) + len(tools) // 4}


def _rewritten(status: int, raw: bytes) -> bytes:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    if status == 200 and isinstance(data, dict) and "choices" in data:
        return orjson.dumps(to_message(data))
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        message, kind = str(error.get("message", "")), str(error.get("type", ""))
    else:
        message, kind = raw.decode("utf-8", "replace")[:500], "api_error"
    return orjson.dumps(error_body(message, kind))


_THINKING = {"type": "thinking", "thinking": "", "signature": ""}


class StreamTranslator(ChunkTranslator):
    """Chat-completion chunks in, Anthropic events out."""

    def __init__(self) -> None:
        super().__init__()
        self._index = -1
        self._open: str | None = None  # the open block's kind: thinking, text, tool_use
        self._tools: dict[int, int] = {}  # a tool call's index -> its block's index
        self._stop = "end_turn"
        self._usage: dict[str, Any] = usage(None)

    def _keepalive(self, comment: bytes) -> list[bytes]:
        return [_event("ping", {"type": "ping"})]

    def _failed(self, error: dict[str, Any]) -> list[bytes]:
        body = error_body(str(error.get("message", "")), str(error.get("type", "")))
        return [_event("error", body)]

    def _chunk(self, chunk: dict[str, Any], first: bool) -> list[bytes]:
        out = [self._start(chunk)] if first else []
        if chunk.get("usage"):
            self._usage = usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._open_block("thinking", _THINKING)
                thought = delta["reasoning_content"]
                out.append(self._delta({"type": "thinking_delta", "thinking": thought}))
            if delta.get("content"):
                out += self._open_block("text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                out += self._tool_call(call)
            if choice.get("finish_reason"):
                self._stop = _stop(choice["finish_reason"])
        return out

    def _start(self, chunk: dict[str, Any]) -> bytes:
        message = {
            "id": message_id(str(chunk.get("id", ""))),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(None),
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        number = int(call.get("index", 0))
        function = call.get("function") or {}
        if number not in self._tools:
            block = {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": {},
            }
            out += self._open_block("tool_use", block, force=True)
            self._tools[number] = self._index
        if function.get("arguments"):
            delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
            body = {"type": "content_block_delta", "index": self._tools[number], "delta": delta}
            out.append(_event("content_block_delta", body))
        return out

    def _open_block(self, kind: str, block: dict[str, Any], *, force: bool = False) -> list[bytes]:
        if self._open == kind and not force:
            return []
        out = self._close_block()
        self._index += 1
        self._open = kind
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return [*out, _event("content_block_start", start)]

    def _close_block(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [_event("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        body = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return _event("content_block_delta", body)

    def _end(self) -> list[bytes]:
        out = self._close_block()
        delta = {"stop_reason": self._stop, "stop_sequence": None}
        body = {"type": "message_delta", "delta": delta, "usage": self._usage}
        if self.parley:
            body["parley"] = self.parley  # Parley's extension, as on a whole message
        out.append(_event("message_delta", body))
        out.append(_event("message_stop", {"type": "message_stop"}))
        return out


def _stop(finish_reason: str) -> str:
    return STOP_REASONS.get(finish_reason, "end_turn")


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
