"""The interceptor protocol: hooks around every model call and every tool call.

An interceptor subclasses ``Interceptor`` and overrides only the hooks it needs; every
hook defaults to doing nothing. The chain (``chain.py``) runs them as an onion:

    before_request, before_tool_call   ascending order   (order 0 first: outermost)
    on_stream_event, after_response,   descending order  (the way the reply travels
    on_error, after_tool_call,                            back out)
    on_turn_end

A hook that returns an object replaces its input (the request, an event, the
response, the error, the tool call or its output); ``None`` leaves it as it was.

Failure policy: a hook that raises a ``ParleyError`` has made a decision (a usage limit
reached, content refused) and it always stands. Any other exception is a failure, and
the interceptor's ``fail_closed`` says what it means: True ends the call with a clear
error (a tool call gets an error result instead of running), False logs it and carries
on as if the hook had returned ``None``. Left as ``None``, it is True in the security
band (order 0-99) and False elsewhere.

Order bands (Snail AI's): 0-99 security, 100-199 infrastructure (logging, audit),
200-299 request shaping (metadata, content filters), 300-399 business rules, 400-499
response shaping, 500+ clean-up.

``on_stream_event`` runs for every chunk, so it is synchronous: it may change an event,
hold it back (return ``[]``) and release it later (return several), but do its I/O in
the other hooks. An interceptor keeps per-call state in ``call.data`` (a dict that lives
as long as the call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from parley.errors import ParleyError
from parley.events import Event, StopReason
from parley.identity import LOCAL_CALLER, Caller
from parley.messages import ToolCallPart, Usage
from parley.providers.protocol import ModelRequest
from parley.tools.protocol import ToolOutput

if TYPE_CHECKING:
    from parley.cluster import Cluster
    from parley.providers.pricing import PriceCatalog
    from parley.settings import Settings
    from parley.store.audit import AuditLog
    from parley.store.database import Database

SECURITY_BAND_END = 100
"""Orders below this are the security band: failures close the call by default."""

HOOK_NAMES = (
    "before_request",
    "on_stream_event",
    "after_response",
    "on_error",
    "before_tool_call",
    "after_tool_call",
    "on_turn_end",
)

Purpose = Literal["chat", "summary", "title", "tool", "ocr", "relevance"]


def _no_totals() -> tuple[Usage, float]:
    return Usage(), 0.0


@dataclass(slots=True)
class TurnInfo:
    """The turn a call belongs to: who asked, where from, and what it has cost so far."""

    caller: Caller = LOCAL_CALLER
    source: str = "api"
    """Which door the request came through: ``chat.completions``, ``chatchat``,
    ``tasks``, or ``internal`` for the server's own calls (titles, summaries)."""
    conversation_id: str | None = None
    message_id: str | None = None
    totals: Callable[[], tuple[Usage, float]] = _no_totals
    """The turn's running usage and cost in USD, read when asked."""


@dataclass(slots=True)
class CallInfo:
    """One model call (one attempt: retries and fallbacks are calls of their own) or one
    tool call, as the interceptors see it."""

    kind: Literal["model", "tool"]
    name: str
    """The model's public name, or the tool's name."""
    turn: TurnInfo
    purpose: Purpose = "chat"
    attempt: int = 0
    """0 for the first try; retries and fallback models count up."""
    provider: str | None = None
    upstream_model: str | None = None
    call_id: str | None = None
    """The tool call's id (tool calls only)."""
    request: ModelRequest | None = None
    """The request as sent upstream, once every ``before_request`` has run."""
    opened: bool = False
    """The upstream was asked (a failure before it cost nothing)."""
    usage: Usage | None = None
    """The usage the upstream reported so far (failed calls may have some)."""
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)
    data: dict[Any, Any] = field(default_factory=dict)
    """Scratch space for interceptors, for the life of this call (key it by ``self``)."""

    @property
    def caller(self) -> Caller:
        return self.turn.caller

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A model call's whole reply, as the client will have seen it (after the stream
    interceptors). Returning a changed one from ``after_response`` rewrites the reply:
    what is stored and what the loop acts on is the new one, and a streaming client is
    sent ``parley.restart`` (drop what was shown) and the new content. Plain OpenAI
    clients do not know ``parley.restart`` and would show both: to change a streamed
    reply, change its events in ``on_stream_event`` instead."""

    text: str
    reasoning: str
    tool_calls: tuple[ToolCallPart, ...]
    stop_reason: StopReason
    usage: Usage | None
    cost_usd: float | None
    """None when the model has no price or reported no usage."""
    seconds: float
    first_event_seconds: float | None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A server tool call about to run. ``before_tool_call`` may return one with other
    arguments (the tool stays the same) or a ``ToolOutput`` that stands in for running it
    (a refusal, a cached answer)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """A turn is over: what it answered and what it cost."""

    turn: TurnInfo
    text: str
    stop_reason: StopReason | None
    usage: Usage
    cost_usd: float
    tool_calls: int
    error: ParleyError | None = None


@dataclass(frozen=True, slots=True)
class Services:
    """What interceptors may use, handed to ``startup`` once the server is up."""

    settings: Settings
    pricing: PriceCatalog
    database: Database | None = None
    audit: AuditLog | None = None
    cluster: Cluster | None = None
    """The instances' shared part (``parley.cluster``); None: one instance."""


class CallCancelled(ParleyError):
    """What ``on_error`` is told when a call is abandoned (the client left, a timeout,
    shutdown). Never raised to anyone."""

    status = 499
    type = "cancelled"
    code = "cancelled"


class InterceptorFailed(ParleyError):
    """A fail-closed interceptor raised something that was not a decision."""

    status = 500
    type = "server_error"
    code = "interceptor_failed"


class Interceptor:
    """Base class: override the hooks you need. Set ``name``, ``order`` and
    ``fail_closed`` as class attributes or per instance (config options override them)."""

    name: str = ""
    order: int = 300
    fail_closed: bool | None = None

    # --- life cycle -----------------------------------------------------------------

    async def startup(self, services: Services) -> None:
        """The server is starting: open what you need."""

    async def shutdown(self) -> None:
        """The server is stopping: flush and close."""

    def describe(self) -> dict[str, Any]:
        """Extra facts for ``parley interceptors`` and the admin endpoint."""
        return {}

    # --- model calls ----------------------------------------------------------------

    async def before_request(self, request: ModelRequest, call: CallInfo) -> ModelRequest | None:
        return None

    def on_stream_event(self, event: Event, call: CallInfo) -> Event | Sequence[Event] | None:
        """Per event of the reply, ``Done`` included (flush anything held back there)."""
        return None

    async def after_response(self, response: ModelResponse, call: CallInfo) -> ModelResponse | None:
        return None

    async def on_error(self, error: ParleyError, call: CallInfo) -> ParleyError | None:
        """The call failed (or was abandoned: ``CallCancelled``). Return another error to
        replace it; a cancellation cannot be replaced."""
        return None

    # --- tool calls -----------------------------------------------------------------

    async def before_tool_call(
        self, tool_call: ToolCall, call: CallInfo
    ) -> ToolCall | ToolOutput | None:
        return None

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> ToolOutput | None:
        return None

    # --- turns ----------------------------------------------------------------------

    async def on_turn_end(self, end: TurnEnd) -> None:
        """An agent turn is over: answered, stopped, failed, or abandoned (``end.error``
        is then a ``CallCancelled``). Runs in the background, after the client's last
        chunk; the server waits for it at shutdown."""


def overrides(interceptor: Interceptor, hook: str) -> bool:
    """Whether ``interceptor`` does something in ``hook`` (the chain skips the rest)."""
    return getattr(type(interceptor), hook) is not getattr(Interceptor, hook)


def closes_on_failure(interceptor: Interceptor) -> bool:
    if interceptor.fail_closed is not None:
        return interceptor.fail_closed
    return interceptor.order < SECURITY_BAND_END


def label(interceptor: Interceptor) -> str:
    return interceptor.name or type(interceptor).__name__
