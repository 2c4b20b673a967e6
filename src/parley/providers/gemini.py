"""Google Gemini's native API (``generativelanguage.googleapis.com``, ``kind: gemini``).

Raw httpx and our SSE decoder, as for the other adapters: ``POST
{base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`` with the key in
``x-goog-api-key``. What belongs here: the request body (neutral messages -> ``contents``
of ``user`` and ``model`` turns, ``systemInstruction``, ``functionDeclarations``,
``toolConfig``, ``generationConfig``) and the stream parser (candidates' parts -> text,
thought summaries, whole function calls; ``usageMetadata``; ``finishReason``).

Thinking: OpenAI's ``reasoning_effort`` becomes Gemini 3's ``thinkingLevel`` (low or
high) or Gemini 2.5's ``thinkingBudget`` (``THINKING_BUDGETS``), with thought summaries
asked for (``includeThoughts``) and streamed as reasoning. A function call's
``thoughtSignature`` is kept as a signed, empty reasoning part before the call and sent
back on it, as Gemini requires of thinking models within a turn (Gemini 3: a call whose
signature is not known, from a client's history, gets Google's stand-in). Gemini names no tool
call: each gets an id here (``call_<n>_<random>``), and a result goes back as a
``functionResponse`` by the call's name.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from parley.errors import ProviderError
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
    error_from_response,
    listed_models,
    provider_timeout,
    stream_events,
    transport_error,
)
from parley.providers.protocol import ModelRequest
from parley.providers.sse import iter_sse, json_event
from parley.settings import ProviderSettings

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
UNSIGNED = "skip_thought_signature_validator"
"""Google's stand-in ``thoughtSignature`` for a function call whose own is not known."""
THINKING_BUDGETS = {
    "none": 0,
    "minimal": 512,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
    "max": 32768,
}
"""Gemini 2.5: OpenAI's ``reasoning_effort`` -> ``thinkingBudget`` (tokens)."""
PRO_LEAST_BUDGET = 128
"""Gemini 2.5 Pro's least budget: it refuses 0 (no thinking)."""
THINKING_LEVELS = {
    "none": "low",
    "minimal": "low",
    "low": "low",
    "medium": "high",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}
"""Gemini 3: ``reasoning_effort`` -> ``thinkingLevel`` (it cannot think not at all)."""
_STOP_REASONS: dict[str, StopReason] = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "content_filtered",
    "RECITATION": "content_filtered",
    "PROHIBITED_CONTENT": "content_filtered",
    "BLOCKLIST": "content_filtered",
    "SPII": "content_filtered",
}


class GeminiProvider:
    supports_tools = True
    options = frozenset(
        {"reasoning_effort", "seed", "presence_penalty", "frequency_penalty", "response_format"}
    )
    """What ``generationConfig`` has an equivalent for (besides the sampling, stops, caps
    and tools every provider takes)."""

    def __init__(self, config: ProviderSettings, client: httpx.AsyncClient) -> None:
        self.name = config.name
        self._config = config
        self._client = client
        self._url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if config.api_key is not None:
            headers["x-goog-api-key"] = config.api_key.get_secret_value()
        headers.update(config.headers)
        self._headers = headers
        self._timeout = provider_timeout(config)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        body = orjson.dumps(request_body(request))
        model = quote(request.model.removeprefix("models/"), safe="")
        url = f"{self._url}/v1beta/models/{model}:streamGenerateContent?alt=sse"
        async for event in stream_events(
            self._client, self.name, url, body, self._headers, self._timeout, self._events
        ):
            yield event

    async def _events(self, response: httpx.Response) -> AsyncIterator[Event]:
        stop: StopReason | None = None
        usage = Usage()
        calls = 0
        async for _, data in iter_sse(response.aiter_bytes()):
            chunk = json_event(data, self.name)
            if chunk is None:
                continue
            if isinstance(chunk.get("error"), dict):
                error = chunk["error"]
                raise ProviderError(
                    f"upstream error mid-stream: {str(error.get('message'))[:500]}",
                    provider=self.name,
                    upstream_status=error.get("code")
                    if isinstance(error.get("code"), int)
                    else None,
                    retryable=True,
                )
            blocked = (chunk.get("promptFeedback") or {}).get("blockReason")
            if blocked and not chunk.get("candidates"):
                stop = "content_filtered"  # the prompt itself was refused
            if isinstance(chunk.get("usageMetadata"), dict):
                usage = usage_from_gemini(chunk["usageMetadata"])
            for candidate in (chunk.get("candidates") or [])[:1]:
                for part in (candidate.get("content") or {}).get("parts") or []:
                    for event in _part_events(part, calls):
                        if isinstance(event, ToolCallDelta):
                            calls += 1
                        yield event
                reason = candidate.get("finishReason")
                if reason in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"):
                    raise ProviderError(
                        f"the model made a call Gemini could not read ({reason})",
                        provider=self.name,
                        retryable=True,
                        code="upstream_malformed",
                    )
                if reason:
                    stop = _STOP_REASONS.get(str(reason), "end_turn")
        if stop is None:
            raise ProviderError(
                "upstream stream ended without a finish reason",
                provider=self.name,
                retryable=True,
                code="upstream_incomplete",
            )
        yield UsageEvent(usage)
        yield Done("tool_use" if calls and stop == "end_turn" else stop)

    async def list_models(self) -> list[str]:
        return await listed_models(self._config, self.check_models)

    async def check_models(self) -> list[str]:
        """The upstream's models that generate content, asked now."""
        url = f"{self._url}/v1beta/models"
        try:
            response = await self._client.get(
                url, headers=self._headers, params={"pageSize": 1000}, timeout=5.0
            )
            if response.status_code != 200:
                raise await error_from_response(self.name, response)
            models = response.json().get("models") or []
        except httpx.HTTPError as exc:
            raise transport_error(self.name, exc) from exc
        except (ValueError, AttributeError) as exc:
            raise ProviderError(
                f"upstream {self.name!r} answered its models route with something else",
                provider=self.name,
                code="upstream_bad_response",
            ) from exc
        return [
            str(m["name"]).removeprefix("models/")
            for m in models
            if isinstance(m, dict)
            and "name" in m
            and "generateContent" in (m.get("supportedGenerationMethods") or ["generateContent"])
        ]

    async def aclose(self) -> None:
        return None


def _part_events(part: dict[str, Any], calls: int) -> list[Event]:
    if isinstance(part.get("functionCall"), dict):
        call = part["functionCall"]
        events: list[Event] = []
        if part.get("thoughtSignature"):
            events.append(ReasoningDelta("", signature=str(part["thoughtSignature"])))
        arguments = orjson.dumps(call.get("args") or {}).decode()
        call_id = str(call.get("id") or f"call_{calls}_{secrets.token_hex(4)}")
        events.append(
            ToolCallDelta(calls, id=call_id, name=str(call.get("name", "")), arguments=arguments)
        )
        return events
    text = part.get("text")
    if not isinstance(text, str) or not text:
        return []
    return [ReasoningDelta(text)] if part.get("thought") else [TextDelta(text)]


def usage_from_gemini(raw: dict[str, Any]) -> Usage:
    """Gemini counts thoughts apart from the candidates; both are output here."""
    return Usage(
        input_tokens=int(raw.get("promptTokenCount") or 0),
        output_tokens=int(raw.get("candidatesTokenCount") or 0)
        + int(raw.get("thoughtsTokenCount") or 0),
        cached_input_tokens=int(raw.get("cachedContentTokenCount") or 0),
    )


def request_body(request: ModelRequest) -> dict[str, Any]:
    gemini_3 = request.model.removeprefix("models/").startswith("gemini-3")
    system, contents = to_gemini_contents(request.messages, sign=gemini_3)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    config: dict[str, Any] = {}
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.top_p is not None:
        config["topP"] = request.top_p
    if request.stop:
        config["stopSequences"] = list(request.stop)
    for ours, theirs in (
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ):
        if request.options.get(ours) is not None:
            config[theirs] = request.options[ours]
    config.update(_response_format(request.options.get("response_format")))
    thinking = _thinking(request.model, request.options.get("reasoning_effort"))
    if thinking:
        config["thinkingConfig"] = thinking
    if config:
        body["generationConfig"] = config
    if request.tools:
        body["tools"] = [
            {
                "functionDeclarations": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "parametersJsonSchema": t.parameters,
                    }
                    for t in request.tools
                ]
            }
        ]
        choice = _tool_config(request.tool_choice)
        if choice is not None:
            body["toolConfig"] = {"functionCallingConfig": choice}
    return body


def _thinking(model: str, effort: Any) -> dict[str, Any] | None:
    if not isinstance(effort, str) or effort not in THINKING_BUDGETS:
        return None
    if model.removeprefix("models/").startswith("gemini-3"):
        return {"thinkingLevel": THINKING_LEVELS[effort], "includeThoughts": True}
    budget = THINKING_BUDGETS[effort]
    if budget == 0 and "pro" in model:
        budget = PRO_LEAST_BUDGET  # 2.5 Pro cannot turn thinking off
    return {"thinkingBudget": budget, "includeThoughts": effort != "none"}


def _response_format(given: Any) -> dict[str, Any]:
    if not isinstance(given, dict):
        return {}
    if given.get("type") == "json_object":
        return {"responseMimeType": "application/json"}
    if given.get("type") == "json_schema":
        schema = (given.get("json_schema") or {}).get("schema")
        out: dict[str, Any] = {"responseMimeType": "application/json"}
        if isinstance(schema, dict):
            out["responseJsonSchema"] = schema
        return out
    return {}


def _tool_config(choice: str | dict[str, Any] | None) -> dict[str, Any] | None:
    match choice:
        case "auto":
            return {"mode": "AUTO"}
        case "required":
            return {"mode": "ANY"}
        case "none":
            return {"mode": "NONE"}
        case {"type": "function", "function": {"name": str(name)}}:
            return {"mode": "ANY", "allowedFunctionNames": [name]}
    return None


def to_gemini_contents(
    messages: tuple[Message, ...], *, sign: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """Neutral messages -> (system instruction, ``contents``). An assistant message is a
    ``model`` turn per step (its text and calls), each followed by a ``user`` turn of
    its answered calls' ``functionResponse`` parts; turns of one role are merged."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.text.strip():
                system.append(message.text)
        elif message.role == "user":
            _append(contents, "user", _user_parts(message))
        else:
            _model_steps(contents, message, sign=sign)
    return "\n\n".join(system), contents


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _user_parts(message: Message) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            parts.append({"text": part.text})
        elif isinstance(part, ImagePart):
            parts.append(_image_part(part.url))
    return parts


def _image_part(url: str) -> dict[str, Any]:
    inline = data_url(url)
    if inline is None:
        return {"fileData": {"mimeType": "image/*", "fileUri": url}}
    media_type, data = inline
    return {"inlineData": {"mimeType": media_type, "data": data}}


def _model_steps(contents: list[dict[str, Any]], message: Message, *, sign: bool) -> None:
    """``sign``: a step's first call without a signature of its own gets Google's stand-in
    (Gemini 3 refuses a call of the current turn without one: a client's history has none)."""
    parts: list[dict[str, Any]] = []
    calls: list[ToolCallPart] = []
    signature: str | None = None
    for part in message.parts:
        if isinstance(part, ToolCallPart):
            call: dict[str, Any] = {"functionCall": {"name": part.name, "args": _args(part)}}
            if signature or (sign and not calls):
                call["thoughtSignature"] = signature or UNSIGNED
                signature = None
            calls.append(part)
            parts.append(call)
            continue
        if calls and (
            isinstance(part, ReasoningPart) or (isinstance(part, TextPart) and part.text)
        ):
            _flush_step(contents, parts, calls)  # a new step: after the results
            parts, calls = [], []
        if isinstance(part, ReasoningPart):
            signature = part.signature or signature
        elif isinstance(part, TextPart) and part.text:
            parts.append({"text": part.text})
    _flush_step(contents, parts, calls)


def _flush_step(
    contents: list[dict[str, Any]], parts: list[dict[str, Any]], calls: list[ToolCallPart]
) -> None:
    _append(contents, "model", parts)
    answers = []
    for call in calls:
        if call.result is None:
            continue
        key = "error" if call.result.is_error else "result"
        answers.append(
            {"functionResponse": {"name": call.name, "response": {key: call.result.content}}}
        )
    _append(contents, "user", answers)


def _args(call: ToolCallPart) -> dict[str, Any]:
    try:
        value = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
