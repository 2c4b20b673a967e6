"""Neutral, provider-free message and part types.

Everything between the HTTP edge and the provider adapters speaks in these types. A
message is a role plus an ordered list of parts; a tool call holds its own result and
approval state, so a whole multi-step agent turn is one assistant message.

What does not belong here: wire formats (``api/``, ``providers/``), persistence
(``store/``). Conversions live with the wire format they convert to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
ApprovalState = Literal["auto", "pending", "approved", "denied", "answered"]
ToolPolicy = Literal["auto", "ask", "deny"]
MessageStatus = Literal[
    "streaming", "complete", "incomplete", "failed", "interrupted", "awaiting_approval"
]


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """A reference to an image: an http(s) URL or a ``data:`` URL."""

    url: str
    detail: str | None = None
    kind: Literal["image"] = "image"


@dataclass(frozen=True, slots=True)
class FilePart:
    """An attached document (the OpenAI ``file`` content part): a ``data:`` URL or bare
    base64 in ``data``. The document transformer turns it into text for the model; the
    stored message keeps the file itself."""

    name: str
    data: str
    media_type: str | None = None
    kind: Literal["file"] = "file"


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """Model reasoning. ``signature`` is the provider's opaque proof (Anthropic thinking)."""

    text: str
    signature: str | None = None
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolResult:
    content: str
    is_error: bool = False
    started_at: float | None = None
    """Unix time the server started running the tool (None for a client's tool)."""
    seconds: float | None = None
    """How long it ran."""


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """A call the model made. ``result`` is None until the call is answered."""

    id: str
    name: str
    arguments: str
    result: ToolResult | None = None
    approval: ApprovalState = "auto"
    approval_reason: str | None = None
    asked_at: float | None = None
    """Unix time the call began waiting for approval (its expiry counts from here)."""
    kind: Literal["tool_call"] = "tool_call"

    def answered(self, result: ToolResult | None) -> ToolCallPart:
        """This call with ``result`` (None: unanswered). Built directly, not with
        ``dataclasses.replace``: it runs for every call of every step."""
        return ToolCallPart(
            self.id,
            self.name,
            self.arguments,
            result,
            self.approval,
            self.approval_reason,
            self.asked_at,
        )

    def with_approval(
        self,
        approval: ApprovalState,
        result: ToolResult | None = None,
        reason: str | None = None,
        asked_at: float | None = None,
    ) -> ToolCallPart:
        """This call in another approval state (with the result that state gives it);
        when it was asked is kept."""
        return ToolCallPart(
            self.id, self.name, self.arguments, result, approval, reason, asked_at or self.asked_at
        )


@dataclass(frozen=True, slots=True)
class CitationPart:
    source_id: str
    title: str
    excerpt: str
    score: float | None = None
    kind: Literal["citation"] = "citation"


Part = TextPart | ImagePart | FilePart | ReasoningPart | ToolCallPart | CitationPart


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    parts: tuple[Part, ...]
    name: str | None = None

    @property
    def text(self) -> str:
        """The message's visible text: its text parts joined."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))


STEP_SEPARATOR = "\n\n"
"""Between the text of an agent turn's steps, wherever the reply is shown as one string."""


def reply_text(parts: tuple[Part, ...] | list[Part]) -> str:
    """An assistant reply's text as clients see it: each text part, a blank line between."""
    return STEP_SEPARATOR.join(p.text for p in parts if isinstance(p, TextPart) and p.text)


def text_message(role: Role, text: str) -> Message:
    return Message(role=role, parts=(TextPart(text),))


# --- JSON round trip (the store keeps parts as JSON) ---------------------------------


def part_to_dict(part: Part) -> dict[str, Any]:
    match part:
        case TextPart(text=text):
            return {"kind": "text", "text": text}
        case ImagePart(url=url, detail=detail):
            return {"kind": "image", "url": url, "detail": detail}
        case FilePart(name=name, data=data, media_type=media_type):
            return {"kind": "file", "name": name, "data": data, "media_type": media_type}
        case ReasoningPart(text=text, signature=signature):
            return {"kind": "reasoning", "text": text, "signature": signature}
        case ToolCallPart():
            result = part.result
            return {
                "kind": "tool_call",
                "id": part.id,
                "name": part.name,
                "arguments": part.arguments,
                "result": None if result is None else _result_to_dict(result),
                "approval": part.approval,
                "approval_reason": part.approval_reason,
                **({"asked_at": part.asked_at} if part.asked_at is not None else {}),
            }
        case CitationPart():
            return {
                "kind": "citation",
                "source_id": part.source_id,
                "title": part.title,
                "excerpt": part.excerpt,
                "score": part.score,
            }


def _result_to_dict(result: ToolResult) -> dict[str, Any]:
    data: dict[str, Any] = {"content": result.content, "is_error": result.is_error}
    if result.started_at is not None:
        data["started_at"] = result.started_at
        data["seconds"] = result.seconds
    return data


def part_from_dict(data: dict[str, Any]) -> Part:
    kind = data.get("kind")
    if kind == "text":
        return TextPart(data["text"])
    if kind == "image":
        return ImagePart(data["url"], data.get("detail"))
    if kind == "file":
        return FilePart(data["name"], data["data"], data.get("media_type"))
    if kind == "reasoning":
        return ReasoningPart(data["text"], data.get("signature"))
    if kind == "tool_call":
        raw = data.get("result")
        return ToolCallPart(
            id=data["id"],
            name=data["name"],
            arguments=data["arguments"],
            result=None
            if raw is None
            else ToolResult(
                raw["content"], bool(raw["is_error"]), raw.get("started_at"), raw.get("seconds")
            ),
            approval=data.get("approval", "auto"),
            approval_reason=data.get("approval_reason"),
            asked_at=data.get("asked_at"),
        )
    if kind == "citation":
        return CitationPart(data["source_id"], data["title"], data["excerpt"], data.get("score"))
    raise ValueError(f"unknown part kind: {kind!r}")


def parts_to_json(parts: tuple[Part, ...] | list[Part]) -> list[dict[str, Any]]:
    return [part_to_dict(p) for p in parts]


def parts_from_json(data: list[dict[str, Any]]) -> tuple[Part, ...]:
    return tuple(part_from_dict(d) for d in data)


@dataclass(slots=True)
class Usage:
    """Token counts for one model call or a sum of calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cached_input_tokens += other.cached_input_tokens

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(
            int(data.get("input_tokens") or 0),
            int(data.get("output_tokens") or 0),
            int(data.get("reasoning_tokens") or 0),
            int(data.get("cached_input_tokens") or 0),
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cached_input_tokens": self.cached_input_tokens,
        }


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: name, description and JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    """The client's ``function.strict`` (Structured Outputs), sent as given."""
