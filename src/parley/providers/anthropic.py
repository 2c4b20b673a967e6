"""Anthropic Messages API upstreams (api.anthropic.com and compatible proxies).

Raw httpx and our own SSE decoder rather than the ``anthropic`` SDK, like
``openai_chat``. What belongs here: the request body (neutral messages -> Messages API
content blocks, tools, tool_choice and the few options the Messages API knows) and the
stream parser (Messages API events -> ``events.Event``). Always streams.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from parley.errors import ProviderError, is_retryable_status
from parley.events import (
    Done,
    Event,
    ReasoningDelta,
    StopReason,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from parley.messages import ImagePart, Message, ReasoningPart, TextPart, ToolCallPart, Usage
from parley.providers.http import (
    data_url,
    fetch_models,
    listed_models,
    provider_timeout,
    stream_events,
)
from parley.providers.protocol import ModelRequest
from parley.providers.sse import iter_sse, json_event
from parley.settings import ProviderSettings

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
"""The Messages API requires ``max_tokens``; this is sent when the request has none."""

_PASSTHROUGH_OPTIONS = ("top_k", "thinking")

THINKING_BUDGETS = {
    "minimal": 1024,
    "low": 1024,
    "medium": 4096,
    "high": 16384,
    "xhigh": 32000,
    "max": 32000,
}
"""OpenAI's ``reasoning_effort`` -> an extended-thinking budget (``none``: no thinking)."""

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "content_filtered",
    "pause_turn": "end_turn",
    "model_context_window_exceeded": "max_tokens",
}

_ERROR_STATUSES: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""Error ``type`` of an ``error`` stream event -> the HTTP status it stands for."""


class AnthropicProvider:
    supports_tools = True
    options = frozenset({"user", "reasoning_effort", "parallel_tool_calls"})
    """What the Messages API has an equivalent for: ``user`` -> ``metadata.user_id``,
    ``reasoning_effort`` -> an extended-thinking budget, ``parallel_tool_calls: false``
    -> ``tool_choice.disable_parallel_tool_use`` (besides the sampling, stops, caps and
    tools every provider takes)."""

    def __init__(self, config: ProviderSettings, client: httpx.AsyncClient) -> None:
        self.name = config.name
        self._config = config
        self._client = client
        self._url = (config.base_url or "https://api.anthropic.com").rstrip("/")
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": ANTHROPIC_VERSION,
        }
        if config.api_key is not None:
            headers["x-api-key"] = config.api_key.get_secret_value()
        headers.update(config.headers)
        self._headers = headers
        self._timeout = provider_timeout(config)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        body = orjson.dumps(request_body(request))
        url = f"{self._url}/v1/messages"
        async for event in stream_events(
            self._client, self.name, url, body, self._headers, self._timeout, self._events
        ):
            yield event

    async def _events(self, response: httpx.Response) -> AsyncIterator[Event]:
        stop: StopReason = "end_turn"
        raw_usage: dict[str, Any] = {}
        tool_indexes: dict[int, int] = {}  # content block index -> index among tool_use blocks
        async for _, data in iter_sse(response.aiter_bytes()):
            event = json_event(data, self.name)
            if event is None:
                continue
            match event.get("type"):
                case "message_start":
                    _merge_usage(raw_usage, (event.get("message") or {}).get("usage"))
                case "content_block_start":
                    block = event.get("content_block") or {}
                    match block.get("type"):
                        case "tool_use":
                            index = len(tool_indexes)
                            tool_indexes[event.get("index", 0)] = index
                            yield ToolCallDelta(index, id=block.get("id"), name=block.get("name"))
                        case "text" if block.get("text"):
                            yield TextDelta(block["text"])
                        case "thinking" if block.get("thinking"):
                            yield ReasoningDelta(block["thinking"])
                case "content_block_delta":
                    delta = event.get("delta") or {}
                    match delta.get("type"):
                        case "text_delta" if delta.get("text"):
                            yield TextDelta(delta["text"])
                        case "thinking_delta" if delta.get("thinking"):
                            yield ReasoningDelta(delta["thinking"])
                        case "signature_delta" if delta.get("signature"):
                            yield ReasoningDelta("", signature=delta["signature"])
                        case "input_json_delta" if delta.get("partial_json"):
                            tool_index = tool_indexes.get(event.get("index", 0))
                            if tool_index is not None:
                                yield ToolCallDelta(tool_index, arguments=delta["partial_json"])
                case "message_delta":
                    reason = (event.get("delta") or {}).get("stop_reason")
                    if reason:
                        stop = _STOP_REASONS.get(reason, "end_turn")
                    _merge_usage(raw_usage, event.get("usage"))
                case "message_stop":
                    yield UsageEvent(usage_from_anthropic(raw_usage))
                    yield Done(stop)
                    return
                case "error":
                    raise self._stream_error(event.get("error"))
        raise ProviderError(
            "upstream stream ended without message_stop",
            provider=self.name,
            retryable=True,
            code="upstream_incomplete",
        )

    def _stream_error(self, error: Any) -> ProviderError:
        """An ``error`` event: the upstream failed after the response had started."""
        kind = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        status = _ERROR_STATUSES.get(str(kind))
        return ProviderError(
            f"upstream error mid-stream ({kind}): {str(message)[:500]}",
            provider=self.name,
            upstream_status=status,
            retryable=status is None or is_retryable_status(status),
        )

    async def list_models(self) -> list[str]:
        return await listed_models(self._config, self.check_models)

    async def check_models(self) -> list[str]:
        """The upstream's models, asked now; a ProviderError says why not."""
        url = f"{self._url}/v1/models"
        return await fetch_models(self._client, self.name, url, self._headers, {"limit": 1000})

    async def aclose(self) -> None:
        return None


def _merge_usage(into: dict[str, Any], raw: Any) -> None:
    """Counts in later events are cumulative: a present count replaces the earlier one."""
    if isinstance(raw, dict):
        into.update((k, v) for k, v in raw.items() if v is not None)


def usage_from_anthropic(raw: dict[str, Any]) -> Usage:
    """Anthropic counts cache reads and writes apart from ``input_tokens``; Parley's
    ``input_tokens`` is the whole prompt and ``cached_input_tokens`` the part read from
    cache, as in OpenAI's usage."""
    cache_read = int(raw.get("cache_read_input_tokens") or 0)
    cache_write = int(raw.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=int(raw.get("output_tokens") or 0),
        cached_input_tokens=cache_read,
    )


def request_body(request: ModelRequest) -> dict[str, Any]:
    system, messages = to_anthropic_messages(request.messages)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": messages,
        "stream": True,
    }
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        choice = _tool_choice(request.tool_choice)
        if request.options.get("parallel_tool_calls") is False:
            choice = choice or {"type": "auto"}
            if choice["type"] != "none":
                choice["disable_parallel_tool_use"] = True
        if choice is not None:
            body["tool_choice"] = choice
    for key in _PASSTHROUGH_OPTIONS:
        if request.options.get(key) is not None:
            body[key] = request.options[key]
    budget = THINKING_BUDGETS.get(str(request.options.get("reasoning_effort")).lower())
    if budget is not None and "thinking" not in body:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(body["max_tokens"], budget + 1024)
        body.pop("temperature", None)  # extended thinking only runs at the default
        body.pop("top_p", None)
    user = request.options.get("user")
    if isinstance(user, str) and user:
        body["metadata"] = {"user_id": user}
    return body


def _tool_choice(choice: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """OpenAI-style ``tool_choice`` -> Anthropic's; None leaves the upstream default."""
    match choice:
        case "auto":
            return {"type": "auto"}
        case "required":
            return {"type": "any"}
        case "none":
            return {"type": "none"}
        case {"type": "function", "function": {"name": str(name)}}:
            return {"type": "tool", "name": name}
    return None


def to_anthropic_messages(messages: tuple[Message, ...]) -> tuple[str, list[dict[str, Any]]]:
    """Neutral messages -> (system prompt, Messages API messages).

    System messages are hoisted into the one ``system`` string. An assistant message
    whose parts run text, tool calls, text, tool calls ... becomes one assistant message
    per step, each followed by a user message holding its answered calls' results.
    Consecutive messages of one role are merged, as the API requires alternation.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.text.strip():
                system.append(message.text)
        elif message.role == "user":
            _append(out, "user", _user_blocks(message))
        else:
            _assistant_steps(out, message)
    return "\n\n".join(system), out


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text.strip():  # blank text blocks are refused
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part.url))
    return blocks


def _image_block(url: str) -> dict[str, Any]:
    inline = data_url(url)
    if inline is None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    media_type, data = inline
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _assistant_steps(out: list[dict[str, Any]], message: Message) -> None:
    blocks: list[dict[str, Any]] = []
    calls: list[ToolCallPart] = []
    for part in message.parts:
        if isinstance(part, ToolCallPart):
            calls.append(part)
            blocks.append(
                {"type": "tool_use", "id": part.id, "name": part.name, "input": _input(part)}
            )
            continue
        if isinstance(part, TextPart) and part.text.strip():
            block = {"type": "text", "text": part.text}
        elif isinstance(part, ReasoningPart) and part.signature:
            block = {"type": "thinking", "thinking": part.text, "signature": part.signature}
        else:
            continue
        if calls:
            _flush_step(out, blocks, calls)
            blocks, calls = [], []
        blocks.append(block)
    _flush_step(out, blocks, calls)


def _flush_step(
    out: list[dict[str, Any]], blocks: list[dict[str, Any]], calls: list[ToolCallPart]
) -> None:
    _append(out, "assistant", blocks)
    # The Messages API refuses an empty (or blank) tool_result content.
    _append(
        out,
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": c.id,
                "content": c.result.content if c.result.content.strip() else "[no output]",
                "is_error": c.result.is_error,
            }
            for c in calls
            if c.result is not None
        ],
    )


def _input(call: ToolCallPart) -> dict[str, Any]:
    """The call's arguments as the JSON object ``tool_use.input`` must be."""
    try:
        value = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
