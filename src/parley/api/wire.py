"""An OpenAI Chat Completions request body (``wire_models.py``) turned into a ``ChatTurn``.

Every field of OpenAI's ``CreateChatCompletionRequest`` is read: those a provider can
honour travel in ``ChatTurn.options`` (``providers/options.py`` decides, per provider,
what is sent, refused or ignored), audio output and ``n`` > 1 are refused here, and the
legacy ``functions``/``function_call`` become tools. Other top-level fields are
accepted (clients send many). Parley's extension fields ride at the top level (the
OpenAI SDK's ``extra_body`` lands there): ``conversation_id``, ``assistant``,
``approvals``, ``knowledge_bases`` ...; a literal ``extra_body`` object
(Langchain-Chatchat) is read too.
Tools given as full definitions are the client's; plain strings name server tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from parley.api.chatchat.tool_names import resolve, skipped_note
from parley.api.wire_models import (
    MAX_DECISIONS,
    ApprovalDecision,
    ChatCompletionRequest,
    Content,
    FileContent,
    FileData,
    ImageContent,
    LegacyFunctionChoice,
    TextContent,
    WireMessage,
    WireTool,
)
from parley.conversations.approvals import Decision
from parley.conversations.turns import ChatTurn, ToolAnswer
from parley.errors import InvalidRequest
from parley.identity import Caller
from parley.mcp.service import is_mcp_tool
from parley.messages import (
    FilePart,
    ImagePart,
    Message,
    Part,
    Role,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolSpec,
)
from parley.providers.protocol import REQUEST_OPTIONS, TokensField
from parley.settings import ChatSettings
from parley.tools.registry import ToolRegistry
from parley.transforms.images import own_image_id

_PASSTHROUGH = sorted(REQUEST_OPTIONS)


def to_turn(
    body: ChatCompletionRequest,
    *,
    caller: Caller,
    source: str = "chat.completions",
    limits: ChatSettings,
    tools: ToolRegistry,
    create_missing: bool = False,
) -> ChatTurn:
    """Validate limits and convert the wire request into the service's ``ChatTurn``."""
    _check_limits(body, limits)
    extra = body.extra_body or {}
    skipped: list[str] = []  # Chatchat's route: tools named that Parley does not have
    messages, trailing, orphans = to_messages(body.messages)
    max_tokens = body.max_completion_tokens or body.max_tokens or None
    options = {
        name: getattr(body, name) for name in _PASSTHROUGH if getattr(body, name) is not None
    }
    asked = _tools_asked(body, tools, limits, skipped if source == "chatchat" else None)
    if asked.legacy:
        options.setdefault("parallel_tool_calls", False)  # a legacy reply names one call
    approvals = _decisions(body.approvals if body.approvals is not None else extra.get("approvals"))
    bases = body.knowledge_bases
    return ChatTurn(
        owner=caller.owner,
        caller=caller,
        source=source,
        model=body.model,
        messages=messages,
        trailing_answers=trailing,
        orphan_answers=orphans,
        conversation_id=body.conversation_id or _str_or_none(extra.get("conversation_id")),
        create_missing=create_missing,
        tools=asked.client,
        server_tools=asked.server,
        tool_choice=asked.choice,
        max_tokens=max_tokens,
        tokens_field=_tokens_field(body),
        temperature=body.temperature,
        top_p=body.top_p,
        stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        options=options,
        store=body.store is not False,
        stream=body.stream,
        approvals=approvals,
        assistant=body.assistant or _str_or_none(extra.get("assistant")),
        knowledge_bases=_names(
            bases if bases is not None else extra.get("knowledge_bases"), "knowledge_bases"
        ),
        use_mcp=_use_mcp(body.use_mcp if body.use_mcp is not None else extra.get("use_mcp")),
        notes=(skipped_note(list(dict.fromkeys(skipped))),) if skipped else (),
    )


def _tokens_field(body: ChatCompletionRequest) -> TokensField | None:
    """Which field the client capped the reply's tokens with (sent upstream as it was)."""
    if body.max_completion_tokens:
        return "max_completion_tokens"
    return "max_tokens" if body.max_tokens else None


@dataclass(frozen=True, slots=True)
class _ToolsAsked:
    client: tuple[ToolSpec, ...]
    """The client's own tools (it runs them)."""
    server: tuple[str, ...]
    """Server tools the request names."""
    choice: str | dict[str, Any] | None
    legacy: bool
    """Given as ``functions`` (the reply names one call)."""


def _tools_asked(
    body: ChatCompletionRequest,
    registry: ToolRegistry,
    limits: ChatSettings,
    skipped: list[str] | None,
) -> _ToolsAsked:
    """The request's tools: its ``tools`` (or legacy ``functions``), its choice, and the
    server tools ``tool_config`` names. ``skipped`` (Chatchat's route, which is lenient):
    collects the names Parley has no tool for, instead of refusing them."""
    extra = body.extra_body or {}
    legacy = body.functions is not None
    if body.functions is not None:  # legacy: the same as tools
        wire: list[WireTool | str] = [WireTool(function=f) for f in body.functions]
        choice = body.function_call
        named = choice.name if isinstance(choice, LegacyFunctionChoice) else choice
        client, server = _tool_specs(wire, registry, skipped)
        tool_choice = _tool_choice(named)
    else:
        client, server = _tool_specs(body.tools or [], registry, skipped)
        tool_choice = _tool_choice(body.tool_choice)
    if skipped is not None:
        tool_choice = _chatchat_choice(tool_choice, registry, skipped)
    config = body.tool_config if body.tool_config is not None else extra.get("tool_config")
    if isinstance(config, dict):
        if len(config) > limits.max_tools:
            raise InvalidRequest(
                f"too many tools ({len(config)} > {limits.max_tools})", param="tool_config"
            )
        configured = _server_tool_names([("tool_config", n) for n in config], registry, skipped)
        server = (*server, *(n for n in configured if n not in server))
    return _ToolsAsked(client, server, tool_choice, legacy)


def _use_mcp(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidRequest("use_mcp must be true or false", param="use_mcp")


def _names(value: Any, param: str) -> tuple[str, ...]:
    """A list of names from the body or ``extra_body``, each once."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(v, str) and 0 < len(v) <= 100 for v in value
    ):
        raise InvalidRequest(f"{param} must be a list of names", param=param)
    return tuple(dict.fromkeys(value))


def _decisions(raw: Any) -> tuple[Decision, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest("approvals must be a list of decisions", param="approvals")
    if len(raw) > MAX_DECISIONS:  # from extra_body: the field's own limit did not apply
        raise InvalidRequest(f"at most {MAX_DECISIONS} decisions", param="approvals")
    decisions: list[Decision] = []
    for index, item in enumerate(raw):
        param = f"approvals.{index}"
        try:
            wire = (
                item
                if isinstance(item, ApprovalDecision)
                else ApprovalDecision.model_validate(item)
            )
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise InvalidRequest(
                f"bad decision: {problem['msg']}", param=f"{param}.{where}" if where else param
            ) from None
        if wire.decision == "answer" and wire.answer is None:
            raise InvalidRequest("an answer decision needs answer", param=f"{param}.answer")
        text = wire.answer if wire.decision == "answer" else wire.reason
        decisions.append(Decision(wire.tool_call_id, wire.decision, text, wire.arguments, param))
    if not decisions:
        raise InvalidRequest("approvals is empty: send at least one decision", param="approvals")
    return tuple(decisions)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _check_limits(body: ChatCompletionRequest, limits: ChatSettings) -> None:
    _check_messages(body.messages, limits)
    if body.n is not None and body.n > 1:
        raise InvalidRequest("only n=1 is supported", param="n", code="unsupported_value")
    if body.audio is not None or "audio" in (body.modalities or ()):
        raise InvalidRequest(
            "audio output is not supported: Parley relays text replies",
            param="audio" if body.audio is not None else "modalities",
            code="unsupported_parameter",
        )
    if body.functions is not None and body.tools is not None:
        raise InvalidRequest("send tools or the legacy functions, not both", param="functions")
    if body.function_call is not None and body.functions is None:
        raise InvalidRequest("function_call needs functions", param="function_call")
    if body.tools is not None and len(body.tools) > limits.max_tools:
        raise InvalidRequest(
            f"too many tools ({len(body.tools)} > {limits.max_tools})", param="tools"
        )
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name)
        if value is not None and value > limits.max_tokens_limit:
            raise InvalidRequest(
                f"{name} is larger than this server allows ({limits.max_tokens_limit})",
                param=name,
            )
    stops = [body.stop] if isinstance(body.stop, str) else (body.stop or [])
    if len(stops) > 4:
        raise InvalidRequest("at most 4 stop sequences", param="stop")


def check_counts(data: dict[str, Any], limits: ChatSettings) -> None:
    """The counting limits of ``_check_messages`` (messages, tool calls in a message,
    parts in all), read from the parsed JSON before it is validated: validating 40,000
    tool calls only to refuse them held the event loop 0.3 s. What is not the expected
    type is left to validation."""
    messages = data.get("messages")
    if not isinstance(messages, list):
        return
    if len(messages) > limits.max_messages:
        raise InvalidRequest(
            f"too many messages ({len(messages)} > {limits.max_messages})", param="messages"
        )
    parts = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        calls = len(calls) if isinstance(calls, list) else 0
        if calls > limits.max_tool_calls:
            raise InvalidRequest(
                f"too many tool_calls in one message ({calls} > {limits.max_tool_calls})",
                param=f"messages.{index}.tool_calls",
            )
        content = message.get("content")
        parts += calls + (len(content) if isinstance(content, list) else content is not None)
    _check_parts(parts, limits)


def _check_parts(parts: int, limits: ChatSettings) -> None:
    if parts > limits.max_parts:
        raise InvalidRequest(
            "too many content parts and tool calls in all messages together "
            f"({parts} > {limits.max_parts})",
            param="messages",
        )


def _check_messages(messages: list[WireMessage], limits: ChatSettings) -> None:
    """How many messages, how long each, how many parts and calls: all bounded, as the
    work done on them (on the event loop) is."""
    if len(messages) > limits.max_messages:
        raise InvalidRequest(
            f"too many messages ({len(messages)} > {limits.max_messages})", param="messages"
        )
    parts = 0
    for index, message in enumerate(messages):
        size = _content_chars(message.content)
        if size > limits.max_message_chars:
            raise InvalidRequest(
                f"message too long ({size} > {limits.max_message_chars} characters)",
                param=f"messages.{index}.content",
                code="message_too_long",
            )
        calls = len(message.tool_calls or ())
        if calls > limits.max_tool_calls:
            raise InvalidRequest(
                f"too many tool_calls in one message ({calls} > {limits.max_tool_calls})",
                param=f"messages.{index}.tool_calls",
            )
        parts += calls + _content_items(message.content)
    _check_parts(parts, limits)


def _content_items(content: str | list[Content] | None) -> int:
    """How many parts ``content`` makes: a string is one."""
    if content is None:
        return 0
    return 1 if isinstance(content, str) else len(content)


def _content_chars(content: str | list[Content] | None) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    return sum(_content_item_chars(c) for c in content)


def _content_item_chars(item: Content) -> int:
    if isinstance(item, TextContent):
        return len(item.text)
    if isinstance(item, ImageContent):
        return len(item.image_url.url)
    return len(item.file.file_data or "")


def to_messages(
    wire: list[WireMessage],
) -> tuple[tuple[Message, ...], tuple[ToolAnswer, ...], tuple[ToolAnswer, ...]]:
    """Wire messages -> neutral messages, with tool results folded into their calls.

    A result answers the calls with its id in the latest assistant message before it
    that made one (the last result for a call wins). Linear: the results are gathered
    first, and each assistant message is rebuilt once.

    Returns (messages, trailing tool results, orphan tool results).
    """
    messages: list[Message] = []
    orphans: list[ToolAnswer] = []
    trailing: list[ToolAnswer] = []
    call_owner: dict[str, int] = {}
    answers: dict[int, dict[str, str]] = {}
    """Position of an assistant message -> its call ids -> their results."""
    legacy: dict[str, str] = {}
    """A function's name -> the id given to its latest legacy ``function_call``."""
    for index, item in enumerate(wire):
        if item.role == "tool" or item.role == "function":
            answer = (
                _tool_answer(item, index)
                if item.role == "tool"
                else _function_answer(item, index, legacy)
            )
            trailing.append(answer)
            position = call_owner.get(answer.call_id)
            if position is None:
                orphans.append(answer)
            else:
                answers.setdefault(position, {})[answer.call_id] = answer.content
            continue
        trailing = []
        role: Role = "system" if item.role == "developer" else item.role
        parts: list[Part] = _content_parts(item.content, index)
        if item.role == "assistant":
            for call in item.tool_calls or ():
                parts.append(ToolCallPart(call.id, call.function.name, call.function.arguments))
                call_owner[call.id] = len(messages)
            if item.function_call is not None:
                legacy_call = item.function_call
                call_id = legacy[legacy_call.name] = f"call_legacy_{index}"
                parts.append(ToolCallPart(call_id, legacy_call.name, legacy_call.arguments))
                call_owner[call_id] = len(messages)
        elif item.tool_calls or item.function_call:
            field = "tool_calls" if item.tool_calls else "function_call"
            raise InvalidRequest(
                f"only assistant messages carry {field}", param=f"messages.{index}.{field}"
            )
        messages.append(Message(role, tuple(parts), item.name))
    for position, results in answers.items():
        messages[position] = _answered(messages[position], results)
    return tuple(messages), tuple(trailing), tuple(orphans)


def _tool_answer(item: WireMessage, index: int) -> ToolAnswer:
    answer = ToolAnswer(
        call_id=item.tool_call_id or "",
        content=_text_of(item.content),
        param=f"messages.{index}.tool_call_id",
    )
    if not answer.call_id:
        raise InvalidRequest("tool messages need tool_call_id", param=answer.param)
    return answer


def _function_answer(item: WireMessage, index: int, calls: dict[str, str]) -> ToolAnswer:
    """A legacy ``function`` message: the result of the latest ``function_call`` of
    its ``name`` before it."""
    call_id = calls.get(item.name or "")
    if call_id is None:
        raise InvalidRequest(
            f"function message {item.name!r} answers no earlier function_call of that name",
            param=f"messages.{index}.name",
        )
    return ToolAnswer(call_id, _text_of(item.content), param=f"messages.{index}.name")


def _answered(message: Message, results: dict[str, str]) -> Message:
    """``message`` with each call whose id ``results`` holds answered by it."""
    parts = tuple(
        p.answered(ToolResult(results[p.id]))
        if isinstance(p, ToolCallPart) and p.id in results
        else p
        for p in message.parts
    )
    return Message(message.role, parts, message.name)


def _content_parts(content: str | list[Content] | None, index: int) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    parts: list[Part] = []
    for item in content:
        if isinstance(item, TextContent):
            parts.append(TextPart(item.text))
        elif isinstance(item, FileContent):
            parts.append(_file_part(item.file, index))
        else:
            parts.append(_image_part(item, index))
    return parts


def _image_part(item: ImageContent, index: int) -> ImagePart:
    """An http(s) or ``data:image`` URL, or the path of an image of this server
    (``/v1/files/{id}``). A URL of this server's own file stays a URL here: the service,
    which has the caller's images, sends it on as the image (``inline_own_images``)."""
    url = item.image_url.url
    if not url.startswith(("http://", "https://", "data:image/")) and not own_image_id(url):
        raise InvalidRequest(
            "image_url must be an http(s) or data:image URL, or /v1/files/{id} of this server",
            param=f"messages.{index}.content",
        )
    return ImagePart(url, item.image_url.detail)


def _file_part(file: FileData, index: int) -> FilePart:
    if file.file_id is not None and not file.file_data:
        raise InvalidRequest(
            "file_id is not supported: send the document inline as file_data",
            param=f"messages.{index}.content",
            code="unsupported_value",
        )
    data = file.file_data or ""
    if not data:
        raise InvalidRequest("a file part needs file_data", param=f"messages.{index}.content")
    media_type = None
    if data.startswith("data:"):
        header, _, _ = data.partition(",")
        if ";base64" not in header:
            raise InvalidRequest(
                "file_data must be a base64 data URL or bare base64",
                param=f"messages.{index}.content",
            )
        media_type = header[5:].split(";")[0] or None
    return FilePart(file.filename or "document", data, media_type)


def _text_of(content: str | list[Content] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(c.text for c in content if isinstance(c, TextContent))


def _server_tool_names(
    names: list[tuple[str, str]], registry: ToolRegistry, skipped: list[str] | None
) -> list[str]:
    """Server tools named by the request, as Parley names them (Chatchat's names
    resolved). A name Parley has no tool for is a 400, or, with ``skipped`` (Chatchat's
    route), left out and added to it. MCP tools are checked by the service."""
    found: list[str] = []
    for param, name in names:
        resolved = name if is_mcp_tool(name) else resolve(name, registry)
        if resolved is None and skipped is not None:
            skipped.append(name)
        elif resolved is None:
            raise InvalidRequest(f"unknown server tool {name!r}", param=param, code="unknown_tool")
        elif resolved not in found:
            found.append(resolved)
    return found


def _tool_specs(
    tools: list[WireTool | str], registry: ToolRegistry, skipped: list[str] | None = None
) -> tuple[tuple[ToolSpec, ...], tuple[str, ...]]:
    """(client tools, names of server tools given as plain strings)."""
    specs: list[ToolSpec] = []
    named = [(f"tools.{i}", tool) for i, tool in enumerate(tools) if isinstance(tool, str)]
    for tool in tools:
        if isinstance(tool, str):
            continue
        function = tool.function
        specs.append(
            ToolSpec(
                function.name,
                function.description or "",
                function.parameters or {"type": "object", "properties": {}},
                strict=function.strict,
            )
        )
    return tuple(specs), tuple(_server_tool_names(named, registry, skipped))


def _chatchat_choice(
    choice: str | dict[str, Any] | None, registry: ToolRegistry, skipped: list[str]
) -> str | dict[str, Any] | None:
    """On Chatchat's route, a choice of a tool by Chatchat's name is the Parley tool it
    stands for, and a choice of a skipped tool is no choice."""
    if not isinstance(choice, dict):
        return choice
    name = (choice.get("function") or {}).get("name")
    if not isinstance(name, str) or is_mcp_tool(name):
        return choice
    if name in skipped:
        return None
    resolved = resolve(name, registry)
    if resolved is None or resolved == name:
        return choice
    return {"type": "function", "function": {"name": resolved}}


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """A bare tool name becomes the OpenAI object (the Chatchat convention)."""
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": choice}}
    return choice
