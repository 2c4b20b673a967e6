"""Anthropic's Messages API in OpenAI's words and back: the request a ``POST /v1/messages``
body asks for, as the chat-completions body Parley runs (``to_chat``), and a finished
chat completion as Anthropic's message (``to_message``). The stream's events are
``anthropic_messages.StreamTranslator``'s.

Mapped: ``system`` (a string or text blocks); text, image (base64 or URL), ``tool_use``
and ``tool_result`` blocks; ``tools`` (``input_schema`` as the function's parameters),
``tool_choice`` (auto, any, tool, none; ``disable_parallel_tool_use``); a tool given as a
plain name is one of Parley's server tools, run by its agent; ``max_tokens``,
``temperature``, ``top_p``, ``stop_sequences``, ``metadata.user_id``, ``thinking`` (its
budget as a reasoning effort: under 4,096 tokens low, under 16,384 medium, else high;
``output_config.effort`` over it). The fields of Anthropic's own service
(``cache_control``, ``container``, ``service_tier``, ...) are left out; Parley's own
(``conversation_id``, ``knowledge_bases``, ...) pass through. Refused with 400:
documents, server tools (web search and the like), and ``top_k`` (no provider behind
Parley's OpenAI door takes it). Thinking blocks sent back in a conversation are left
out (a model reads its own reasoning from the conversation Parley keeps, not from the
client).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from parley.errors import InvalidRequest

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""OpenAI's ``finish_reason`` as Anthropic's ``stop_reason``."""
ERROR_TYPES = {
    "invalid_request_error": "invalid_request_error",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "not_found_error": "not_found_error",
    "rate_limit_error": "rate_limit_error",
    "overloaded_error": "overloaded_error",
    "timeout_error": "timeout_error",
}
"""Parley's error types that Anthropic names alike; any other is ``api_error``."""


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def to_chat(data: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body for an Anthropic Messages body (raises ``InvalidRequest``)."""
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model is required", "model")
    max_tokens = data.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _bad("max_tokens is required: a positive integer", "max_tokens")
    if data.get("top_k") is not None:
        raise _bad("top_k is not supported", "top_k")
    messages = _system(data.get("system"))
    turns = data.get("messages")
    if not isinstance(turns, list) or not turns:
        raise _bad("messages must be a non-empty list", "messages")
    for n, turn in enumerate(turns):
        messages += _turn(turn, f"messages.{n}")
    body: dict[str, Any] = {
        key: value
        for key, value in data.items()
        if key not in _ANTHROPIC_FIELDS and key not in ("messages",)
    }  # Parley's own fields
    body.update(model=model, max_tokens=max_tokens, messages=messages)
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p")):
        if data.get(theirs) is not None:
            body[ours] = data[theirs]
    if data.get("stop_sequences"):
        body["stop"] = data["stop_sequences"]
    if data.get("stream"):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    metadata = data.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user, str):
        body["user"] = user[:256]
    if data.get("tools"):
        body["tools"] = [_tool(tool, f"tools.{n}") for n, tool in enumerate(data["tools"])]
    body.update(_tool_choice(data.get("tool_choice")))
    effort = _effort(data.get("thinking"))
    output = data.get("output_config")
    if isinstance(output, dict) and output.get("effort") in ("low", "medium", "high", "max"):
        effort = output["effort"]
    if effort is not None:
        body["reasoning_effort"] = effort
    return body


_ANTHROPIC_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "cache_control",
        "diagnostics",
        "inference_geo",
        "output_config",
        "speed",
        "user_profile_id",
        "workspace_id",
    }
)
"""Anthropic's fields: mapped above, or of Anthropic's own service (left out)."""


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list):
        return [{"role": "system", "content": _text_of(system, "system")}]
    raise _bad("system must be a string or a list of text blocks", "system")


def _text_of(blocks: list[Any], param: str) -> str:
    texts = []
    for n, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _bad("only text blocks are allowed here", f"{param}.{n}")
        texts.append(str(block.get("text", "")))
    return "\n\n".join(texts)


def _turn(turn: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
        raise _bad("each message needs a role, user or assistant", f"{param}.role")
    role, content = turn["role"], turn.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad("content must be a string or a list of blocks", f"{param}.content")
    if role == "assistant":
        return [_assistant(content, param)]
    return _user(content, param)


def _assistant(blocks: list[Any], param: str) -> dict[str, Any]:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": str(block.get("name", "")), "arguments": arguments}
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": function})
        elif kind not in ("thinking", "redacted_thinking"):
            raise _bad(f"an assistant message cannot hold a {kind!r} block", f"{param}.content.{n}")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[Any], param: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{param}.content.{n}"
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, where)}})
        elif kind == "tool_result":
            result, images = _tool_result(block, where)
            results.append(result)
            parts += images  # shown to the model in the user message after the results
        else:
            raise _bad(f"{kind!r} blocks are not supported", where)
    messages = results  # a tool's result answers the call before any new text
    if parts:
        only_text = all(part["type"] == "text" for part in parts)
        content: Any = "\n\n".join(p["text"] for p in parts) if only_text else parts
        messages = [*messages, {"role": "user", "content": content}]
    return messages


def _image_url(block: dict[str, Any], where: str) -> str:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    if isinstance(source, dict) and source.get("type") == "url" and source.get("url"):
        return str(source["url"])
    raise _bad("an image needs a base64 or url source", f"{where}.source")


def _tool_result(block: dict[str, Any], where: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The tool message of a ``tool_result``, and its images (a chat tool message holds
    text only: they follow in a user message)."""
    content = block.get("content", "")
    images: list[dict[str, Any]] = []
    if isinstance(content, list):
        texts = []
        for n, item in enumerate(content):
            if isinstance(item, dict) and item.get("type") == "image":
                url = _image_url(item, f"{where}.content.{n}")
                images.append({"type": "image_url", "image_url": {"url": url}})
            else:
                texts.append(_text_of([item], f"{where}.content.{n}"))
        content = "\n\n".join(texts) or ("[an image]" if images else "")
    text = str(content)
    if block.get("is_error"):
        text = f"Error: {text}"
    message = {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
    return message, images


def _tool(tool: Any, param: str) -> dict[str, Any] | str:
    if isinstance(tool, str):
        return tool  # Parley's: a server tool by name, run by the agent
    if not isinstance(tool, dict) or not tool.get("name"):
        raise _bad("each tool needs a name", param)
    if tool.get("type") not in (None, "custom"):
        raise _bad(f"server tool {tool.get('type')!r} is not supported", f"{param}.type")
    function = {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
    }
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> dict[str, Any]:
    if choice is None:
        return {}
    if not isinstance(choice, dict):
        raise _bad("tool_choice must be an object", "tool_choice")
    out: dict[str, Any] = {}
    match choice.get("type"):
        case "auto":
            out["tool_choice"] = "auto"
        case "any":
            out["tool_choice"] = "required"
        case "none":
            out["tool_choice"] = "none"
        case "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        case other:
            raise _bad(f"tool_choice type {other!r} is not known", "tool_choice.type")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def _effort(thinking: Any) -> str | None:
    if not isinstance(thinking, dict):
        return None
    if thinking.get("type") == "disabled":
        return "none"
    if thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1:
        raise _bad("thinking.budget_tokens must be a positive integer", "thinking.budget_tokens")
    return "low" if budget < 4_096 else "medium" if budget < 16_384 else "high"


# --- back -------------------------------------------------------------------------------


def to_message(completion: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (Parley's JSON answer) as Anthropic's message."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        thought = message["reasoning_content"]
        content.append({"type": "thinking", "thinking": thought, "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": _arguments(function.get("arguments")),
            }
        )
    out = {
        "id": message_id(completion.get("id", "")),
        "type": "message",
        "role": "assistant",
        "model": completion.get("model", ""),
        "content": content,
        "stop_reason": STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": usage(completion.get("usage")),
    }
    if "parley" in completion:
        out["parley"] = completion["parley"]
    return out


def message_id(completion_id: str) -> str:
    return "msg_" + completion_id.removeprefix("chatcmpl-")


def usage(given: dict[str, Any] | None) -> dict[str, Any]:
    given = given or {}
    cached = (given.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": int(given.get("prompt_tokens") or 0) - int(cached),
        "output_tokens": int(given.get("completion_tokens") or 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": int(cached),
    }


def _arguments(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"_raw": text}


def error_body(message: str, kind: str) -> dict[str, Any]:
    """Anthropic's error body for Parley's error ``kind`` (an OpenAI error type)."""
    error = {"type": ERROR_TYPES.get(kind, "api_error"), "message": message}
    return {"type": "error", "error": error}


# --- for the API reference ----------------------------------------------------------------


class MessagesRequest(BaseModel):
    """Anthropic's Messages body (read by ``to_chat``; Parley's own fields may be added)."""

    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class AnthropicMessage(BaseModel):
    """Anthropic's message (and Parley's ``parley`` field)."""

    model_config = ConfigDict(extra="allow")
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage


class MessageStreamEvent(BaseModel):
    """One event of the stream (``message_start``, ``content_block_delta``, ...)."""

    model_config = ConfigDict(extra="allow")
    type: str


class AnthropicError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    """Anthropic's error body: every failure of ``/v1/messages``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["error"]
    error: AnthropicError
