"""Stream events: what a provider yields and what the service hands to the HTTP edge.

A provider's stream is a sequence of these events ending in exactly one ``Done`` (or an
exception from ``errors``); the service's stream ends in ``Done`` or ``StreamError``.
The agent loop and the SSE encoder ``match`` on ``kind``.

Stop reasons are neutral: ``end_turn``, ``tool_use``, ``max_tokens``, ``stop_sequence``,
``content_filtered``. The OpenAI and Anthropic adapters map their own names onto these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from parley.errors import ParleyError
from parley.messages import Usage

StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filtered", "pending_approval"
]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str
    signature: str | None = None
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call; fragments with the same ``index`` belong together."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class Logprobs:
    """Log probabilities of output tokens, as the upstream gave them (the client asked
    with ``logprobs``): OpenAI's ``ChatCompletionTokenLogprob`` objects, for the
    content and for a refusal."""

    content: tuple[dict[str, Any], ...] = ()
    refusal: tuple[dict[str, Any], ...] = ()
    kind: Literal["logprobs"] = "logprobs"


@dataclass(frozen=True, slots=True)
class Status:
    """Progress that is not model output (thinking, tool started, retrying ...)."""

    name: str
    detail: str = ""
    kind: Literal["status"] = "status"


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A server-side tool call is about to run (never a client's tool)."""

    call_id: str
    name: str
    arguments: str
    kind: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    name: str
    arguments: str
    output: str
    is_error: bool
    seconds: float
    kind: Literal["tool_finished"] = "tool_finished"


@dataclass(frozen=True, slots=True)
class Restart:
    """The answer restarts (a retry or a fallback model): clients drop partial output."""

    reason: str
    attempt: int
    model: str
    delay_seconds: float
    clear: bool = True
    """Whether any of the abandoned attempt's output was shown (and must be dropped)."""
    keep_content_chars: int = 0
    """How much of the content already shown stays (earlier steps' text)."""
    kind: Literal["restart"] = "restart"


@dataclass(frozen=True, slots=True)
class StepDone:
    """An agent step (model call and its tools) is complete: a moment to persist."""

    iteration: int
    kind: Literal["step_done"] = "step_done"


@dataclass(frozen=True, slots=True)
class UsageEvent:
    usage: Usage
    kind: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class Done:
    stop_reason: StopReason
    kind: Literal["done"] = "done"


@dataclass(frozen=True, slots=True)
class StreamError:
    """The stream failed; nothing follows. Providers raise, the service emits this."""

    error: ParleyError
    kind: Literal["error"] = "error"


Event = (
    TextDelta
    | ReasoningDelta
    | ToolCallDelta
    | Logprobs
    | Status
    | ToolStarted
    | ToolFinished
    | Restart
    | StepDone
    | UsageEvent
    | Done
    | StreamError
)

FINISH_REASONS: dict[StopReason, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "content_filtered": "content_filter",
    "pending_approval": "stop",  # paused: parley.pending_approvals says what waits
}
"""Neutral stop reason -> OpenAI ``finish_reason``."""
