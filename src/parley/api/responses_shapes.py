"""OpenAI's Responses API in chat-completions words and back: a ``POST /v1/responses`` body
as the chat-completions body Parley runs (``to_chat``), and a finished chat completion as
a ``response`` object (``to_response``). The stream's events are
``responses.StreamTranslator``'s.

Mapped: ``instructions`` (a system message first); ``input`` as a string or items
(messages with ``input_text``, ``input_image`` or ``output_text`` parts, ``function_call``
and ``function_call_output``); function ``tools`` (a plain name: one of Parley's server
tools, run by its agent) and ``tool_choice``;
``max_output_tokens``, ``temperature``, ``top_p``, ``reasoning.effort``,
``parallel_tool_calls``, ``text.format`` (JSON schema or object), ``user``. Refused with
400: OpenAI's hosted tools (file and web search, code interpreter, computer use, ...),
``background``, and input items of other kinds (files, item references).

Conversations: a response is a message of a Parley conversation. With ``store`` (the
default), the first response starts a conversation and each ``previous_response_id``
continues it; the response's id names both (``resp_<message id>.<conversation id>``).
Continuing from a response that is no longer the latest of its conversation (a fork) is
refused with 409. ``store: false`` keeps nothing: such a response cannot be continued.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from parley.errors import InvalidRequest
from parley.messages import ReasoningPart, TextPart, ToolCallPart, Usage
from parley.store.repository import StoredMessage

HOSTED = "hosted tool {!r} is not supported: Parley offers its own server tools"


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def response_id(message_id: str, conversation_id: str | None) -> str:
    return f"resp_{message_id}" + (f".{conversation_id}" if conversation_id else "")


def parse_response_id(value: str) -> tuple[str, str | None]:
    """(message id, conversation id or None) of a response id (``InvalidRequest``)."""
    if not value.startswith("resp_msg_"):
        raise _bad(f"{value!r} is not a response id of this server", "previous_response_id")
    message, _, conversation = value.removeprefix("resp_").partition(".")
    return message, conversation or None


def to_chat(data: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body for a Responses body (raises ``InvalidRequest``)."""
    if data.get("background"):
        raise _bad("background responses are not supported", "background")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model is required", "model")
    messages: list[dict[str, Any]] = []
    if isinstance(data.get("instructions"), str) and data["instructions"]:
        messages.append({"role": "system", "content": data["instructions"]})
    given = data.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        for n, item in enumerate(given):
            _item(item, f"input.{n}", messages)
    else:
        raise _bad("input must be a string or a non-empty list of items", "input")
    body: dict[str, Any] = {"model": model, "messages": messages}
    for ours, theirs in (
        ("max_tokens", "max_output_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("user", "user"),
        ("metadata", "metadata"),
    ):
        if data.get(theirs) is not None:
            body[ours] = data[theirs]
    if data.get("stream"):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if data.get("tools"):
        body["tools"] = [_tool(tool, f"tools.{n}") for n, tool in enumerate(data["tools"])]
    if data.get("tool_choice") is not None:
        body["tool_choice"] = _tool_choice(data["tool_choice"])
    reasoning = data.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort"):
        body["reasoning_effort"] = reasoning["effort"]
    text = data.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        body["response_format"] = _format(text["format"])
    for key in ("conversation_id", "knowledge_bases", "assistant", "use_mcp", "tool_config"):
        if key in data:
            body[key] = data[key]  # Parley's own
    return body


def _item(item: Any, where: str, messages: list[dict[str, Any]]) -> None:
    if not isinstance(item, dict):
        raise _bad("each input item must be an object", where)
    kind = item.get("type", "message")
    if kind == "message":
        messages.append(_message(item, where))
    elif kind == "function_call":
        call = {
            "id": str(item.get("call_id", "")),
            "type": "function",
            "function": {"name": str(item.get("name", "")), "arguments": item.get("arguments", "")},
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
            last["tool_calls"].append(call)  # the calls of one step
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output", "")
        text = output if isinstance(output, str) else orjson.dumps(output).decode()
        messages.append(
            {"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": text}
        )
    elif kind != "reasoning":  # its own reasoning: Parley keeps that itself
        raise _bad(f"input items of type {kind!r} are not supported", f"{where}.type")


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise _bad("a message's role is user, assistant, system or developer", f"{where}.role")
    role = "system" if role == "developer" else role
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise _bad("content must be a string or a list of parts", f"{where}.content")
    parts: list[dict[str, Any]] = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": str(part["image_url"])}})
        else:
            raise _bad(f"content parts of type {kind!r} are not supported", f"{where}.content.{n}")
    if all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": parts}


def _tool(tool: Any, where: str) -> dict[str, Any] | str:
    if isinstance(tool, str):
        return tool  # Parley's: a server tool by name, run by the agent
    if not isinstance(tool, dict):
        raise _bad("each tool must be an object", where)
    if tool.get("type") != "function":
        raise _bad(HOSTED.format(tool.get("type")), f"{where}.type")
    function: dict[str, Any] = {
        "name": tool.get("name", ""),
        "description": tool.get("description") or "",
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "required", "none"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("tool_choice must be auto, required, none or a function", "tool_choice")


def _format(given: dict[str, Any]) -> dict[str, Any]:
    kind = given.get("type")
    if kind == "json_schema":
        schema = {
            key: given[key] for key in ("name", "schema", "strict", "description") if key in given
        }
        return {"type": "json_schema", "json_schema": schema}
    if kind in ("json_object", "text"):
        return {"type": kind}
    raise _bad(f"text.format type {kind!r} is not supported", "text.format.type")


# --- back -------------------------------------------------------------------------------


def to_response(completion: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (Parley's JSON answer) as the ``response`` object."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    ids = completion.get("parley") or {}
    message_id = str(ids.get("message_id") or completion.get("id", "").removeprefix("chatcmpl-"))
    output: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        output.append(reasoning_item(message_id, message["reasoning_content"]))
    if message.get("content"):
        output.append(message_item(message_id, message["content"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            call_item(
                str(call.get("id", "")), function.get("name", ""), function.get("arguments", "")
            )
        )
    stored = request.get("store", True) is not False
    out = envelope(
        response_id(message_id, ids.get("conversation_id") if stored else None),
        completion.get("model", ""),
        request,
        status="incomplete" if choice.get("finish_reason") == "length" else "completed",
        output=output,
        usage=usage(completion.get("usage")),
        created=completion.get("created"),
    )
    if ids:
        out["parley"] = ids  # Parley's extension: the ids, cost, citations, ...
    return out


def envelope(
    rid: str,
    model: str,
    request: dict[str, Any],
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    created: Any = None,
) -> dict[str, Any]:
    """The ``response`` object around ``output`` (the request's settings echoed)."""
    return {
        "id": rid,
        "object": "response",
        "created_at": int(created or time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": request.get("store", True),
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": usage,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def message_item(message_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": message_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [part] if text or status == "completed" else [],
    }


def call_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"fc_{call_id}",
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_item(message_id: str, text: str) -> dict[str, Any]:
    return {
        "id": f"rs_{message_id}",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
    }


def usage(given: dict[str, Any] | None) -> dict[str, Any]:
    given = given or {}
    prompt = int(given.get("prompt_tokens") or 0)
    completion = int(given.get("completion_tokens") or 0)
    cached = int((given.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((given.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def stored_response(message: StoredMessage, rid: str, previous: str | None) -> dict[str, Any]:
    """A stored assistant message as the ``response`` it was (``GET /v1/responses/{id}``)."""
    output: list[dict[str, Any]] = []
    thought = "".join(p.text for p in message.parts if isinstance(p, ReasoningPart))
    if thought:
        output.append(reasoning_item(message.id, thought))
    said = "".join(p.text for p in message.parts if isinstance(p, TextPart))
    if said:
        output.append(message_item(message.id, said))
    for part in message.parts:
        if not isinstance(part, ToolCallPart):
            continue
        if part.result is None or part.result.started_at is None:  # a client's tool
            output.append(call_item(part.id, part.name, part.arguments))
    counted = Usage.from_dict(message.usage)
    statuses = {"complete": "completed", "streaming": "in_progress", "failed": "failed"}
    status = statuses.get(message.status, "incomplete")
    if message.finish_reason == "length":
        status = "incomplete"
    return envelope(
        rid,
        message.model or "",
        {"previous_response_id": previous},
        status=status,
        output=output,
        usage={
            "input_tokens": counted.input_tokens,
            "input_tokens_details": {"cached_tokens": counted.cached_input_tokens},
            "output_tokens": counted.output_tokens,
            "output_tokens_details": {"reasoning_tokens": counted.reasoning_tokens},
            "total_tokens": counted.total_tokens,
        },
        created=message.created_at,
    )
