"""OpenAI-compatible Chat Completions upstreams (OpenAI, vLLM, Ollama, llama.cpp, DeepSeek ...).

Raw httpx and our own SSE decoder rather than the ``openai`` SDK: the SDK builds a
pydantic object per chunk, which is most of a relay's CPU. Always streams; reasoning is
read from ``reasoning_content`` or ``reasoning``, and ``<think>`` handling is left to the
layers above.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from parley.errors import ProviderError
from parley.events import (
    Done,
    Event,
    Logprobs,
    ReasoningDelta,
    StopReason,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from parley.messages import (
    STEP_SEPARATOR,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolSpec,
    Usage,
)
from parley.providers.http import (
    error_from_response,
    fetch_models,
    listed_models,
    provider_timeout,
    stream_events,
    transport_error,
)
from parley.providers.protocol import REQUEST_OPTIONS, ModelRequest, TokensField
from parley.providers.sse import iter_sse, json_event
from parley.settings import ProviderSettings

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}


class OpenAIChatProvider:
    supports_tools = True
    options = REQUEST_OPTIONS | {"strict"}
    """Everything Chat Completions has is sent as the client gave it."""

    def __init__(self, config: ProviderSettings, client: httpx.AsyncClient) -> None:
        self.name = config.name
        self._config = config
        self._client = client
        self._url = (config.base_url or "https://api.openai.com/v1").rstrip("/")
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if config.api_key is not None:
            headers["authorization"] = f"Bearer {config.api_key.get_secret_value()}"
        headers.update(config.headers)
        self._headers = headers
        self._timeout = provider_timeout(config)
        self._tokens_field: TokensField = config.max_tokens_field or (
            "max_completion_tokens" if "api.openai.com" in self._url else "max_tokens"
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        if not request.incremental:
            async for event in self._whole(request):
                yield event
            return
        body = orjson.dumps(request_body(request, self._tokens_field))
        url = f"{self._url}/chat/completions"
        async for event in stream_events(
            self._client, self.name, url, body, self._headers, self._timeout, self._events
        ):
            yield event

    async def _whole(self, request: ModelRequest) -> AsyncIterator[Event]:
        """One non-streamed upstream reply, yielded as the events a stream would give."""
        payload = request_body(request, self._tokens_field)
        payload["stream"] = False
        del payload["stream_options"]
        try:
            response = await self._client.post(
                f"{self._url}/chat/completions",
                content=orjson.dumps(payload),
                headers=self._headers,
                timeout=self._timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(self.name, exc) from exc
        if response.status_code >= 400:
            raise await error_from_response(self.name, response)
        try:
            reply = orjson.loads(response.content)
            choice = reply["choices"][0]
            message = choice.get("message") or {}
            content = message.get("content")
            if isinstance(content, list):  # content parts: keep their text
                content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
            if not isinstance(content, str | None) or not isinstance(
                message.get("tool_calls") or [], list
            ):
                raise TypeError("unexpected reply shape")
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError(
                f"upstream sent a malformed reply: {response.content[:200]!r}",
                provider=self.name,
                code="upstream_malformed",
            ) from None
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            yield ReasoningDelta(reasoning)
        if content:
            yield TextDelta(content)
        for index, call in enumerate(message.get("tool_calls") or ()):
            function = call.get("function") or {}
            yield ToolCallDelta(
                index=index,
                id=call.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments") or "",
            )
        logprobs = logprobs_of(choice)
        if logprobs is not None:
            yield logprobs
        if reply.get("usage"):
            yield UsageEvent(usage_from_openai(reply["usage"]))
        yield Done(_STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"))

    async def _events(self, response: httpx.Response) -> AsyncIterator[Event]:
        stop: StopReason | None = None
        usage: Usage | None = None
        finished = False
        async for _, data in iter_sse(response.aiter_bytes()):
            # Read to the end of the body even after [DONE], so that the connection
            # goes back to the pool instead of being closed.
            if finished:
                continue
            if data == "[DONE]":
                finished = True
                continue
            chunk = json_event(data, self.name)
            if chunk is None:
                continue
            if "error" in chunk and not chunk.get("choices"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else str(error)
                raise ProviderError(
                    f"upstream error mid-stream: {message}", provider=self.name, retryable=True
                )
            raw_usage = chunk.get("usage")
            if raw_usage:
                usage = usage_from_openai(raw_usage)
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning:
                    yield ReasoningDelta(reasoning)
                content = delta.get("content")
                if content:
                    yield TextDelta(content)
                for call in delta.get("tool_calls") or ():
                    function = call.get("function") or {}
                    yield ToolCallDelta(
                        index=call.get("index", 0),
                        id=call.get("id"),
                        name=function.get("name"),
                        arguments=function.get("arguments") or "",
                    )
                logprobs = logprobs_of(choice)
                if logprobs is not None:
                    yield logprobs
                finish = choice.get("finish_reason")
                if finish:
                    stop = _STOP_REASONS.get(finish, "end_turn")
        if stop is None:
            raise ProviderError(
                "upstream stream ended without a finish reason",
                provider=self.name,
                retryable=True,
                code="upstream_incomplete",
            )
        if usage is not None:
            yield UsageEvent(usage)
        yield Done(stop)

    async def list_models(self) -> list[str]:
        return await listed_models(self._config, self.check_models)

    async def check_models(self) -> list[str]:
        """The upstream's models, asked now; a ProviderError says why not."""
        return await fetch_models(self._client, self.name, f"{self._url}/models", self._headers)

    async def aclose(self) -> None:
        return None


def request_body(request: ModelRequest, tokens_field: TokensField = "max_tokens") -> dict[str, Any]:
    """The Chat Completions body; ``tokens_field`` names a ``max_tokens`` the client
    did not name (an assistant's or the model's configured cap)."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": to_openai_messages(request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.max_tokens is not None:
        body[request.tokens_field or tokens_field] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop"] = list(request.stop)
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
    body.update({k: v for k, v in request.options.items() if k in REQUEST_OPTIONS})
    if "reasoning_effort" in body:
        effort = REASONING_EFFORTS.get(str(body.pop("reasoning_effort")).lower())
        if effort is not None:
            body["reasoning_effort"] = effort
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    }
    if spec.strict is not None:
        function["strict"] = spec.strict
    return {"type": "function", "function": function}


REASONING_EFFORTS = {
    "none": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "high",  # an assistant preset's "max": the highest every reasoning model takes
}
"""Reasoning effort levels -> what OpenAI's API accepts (a client's level is one of
these, checked where the request is read; an assistant's other level is not sent)."""


def to_openai_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Neutral messages -> Chat Completions messages.

    An assistant message whose parts run text, tool calls, text, tool calls ... becomes
    one assistant message per step, each followed by its answered calls' tool messages.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role != "assistant":
            out.append(_plain_message(message))
            continue
        text: list[str] = []
        calls: list[ToolCallPart] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                if calls:
                    _flush_step(out, text, calls)
                    text, calls = [], []
                text.append(part.text)
            elif isinstance(part, ToolCallPart):
                calls.append(part)
        _flush_step(out, text, calls)
    return out


def tool_call(call: ToolCallPart) -> dict[str, Any]:
    """A call as Chat Completions writes it in an assistant message."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _flush_step(out: list[dict[str, Any]], text: list[str], calls: list[ToolCallPart]) -> None:
    if not text and not calls:
        return
    # several text parts in one step: the loop's own notes after the model's text
    content = STEP_SEPARATOR.join(t for t in text if t) if text else None
    entry: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        entry["tool_calls"] = [tool_call(c) for c in calls]
    out.append(entry)
    for call in calls:
        if call.result is not None:
            out.append({"role": "tool", "tool_call_id": call.id, "content": call.result.content})


def _plain_message(message: Message) -> dict[str, Any]:
    has_images = any(isinstance(p, ImagePart) for p in message.parts)
    entry: dict[str, Any] = {"role": message.role}
    if message.name:
        entry["name"] = message.name
    if not has_images:
        entry["content"] = message.text
        return entry
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            image: dict[str, Any] = {"url": part.url}
            if part.detail:
                image["detail"] = part.detail
            content.append({"type": "image_url", "image_url": image})
    entry["content"] = content
    return entry


def logprobs_of(choice: dict[str, Any]) -> Logprobs | None:
    """A choice's ``logprobs`` (its token entries passed on as they are), if any."""
    raw = choice.get("logprobs")
    if not isinstance(raw, dict):
        return None
    content, refusal = raw.get("content"), raw.get("refusal")
    entries = tuple(e for e in content if isinstance(e, dict)) if isinstance(content, list) else ()
    refused = tuple(e for e in refusal if isinstance(e, dict)) if isinstance(refusal, list) else ()
    return Logprobs(entries, refused) if entries or refused else None


def usage_from_openai(raw: dict[str, Any]) -> Usage:
    completion_details = raw.get("completion_tokens_details") or {}
    prompt_details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
        cached_input_tokens=int(prompt_details.get("cached_tokens") or 0),
    )
