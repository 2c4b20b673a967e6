"""The provider protocol: one small streaming interface per wire format.

A provider turns a ``ModelRequest`` into a stream of ``events.Event`` that ends with one
``Done``; a non-streaming reply is the collected stream. Failures are raised as
``errors.ProviderError``. Adapters know nothing of conversations, storage or HTTP
clients of Parley; they only speak to their upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from parley.events import Event
from parley.messages import Message, ToolSpec

SAMPLING_OPTIONS = frozenset(
    {
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "response_format",
        "user",
        "parallel_tool_calls",
        "logit_bias",
        "reasoning_effort",
        "logprobs",
        "top_logprobs",
        "verbosity",
    }
)
"""The options an assistant preset may set (OpenAI's names)."""

ADVISORY_OPTIONS = frozenset(
    {
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "metadata",
        "store",
        "service_tier",
        "modalities",
    }
)
"""Request fields that say who asks or how the upstream should keep and bill the call,
never what the reply is (``modalities`` reaches a provider only as ``["text"]``, the
default: audio is refused where the request is read): a provider that has no use for
one ignores it, and the response names it (``x-parley-ignored-params``)."""

REQUEST_OPTIONS = SAMPLING_OPTIONS | ADVISORY_OPTIONS | {"prediction", "web_search_options"}
"""Every Chat Completions request field that travels in ``ModelRequest.options``; each
adapter sends those its wire format has (``Provider.options``). ``strict`` is not one
(it rides on each ``ToolSpec``) but is named in ``Provider.options`` when honoured."""

TokensField = Literal["max_tokens", "max_completion_tokens"]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    """The upstream's own model name (aliases are already resolved)."""
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
    """The reply's token cap; None: none sent (the upstream's default), where the wire
    format has one (Anthropic requires it: its adapter sends a default)."""
    tokens_field: TokensField | None = None
    """The name the client gave ``max_tokens`` under, sent unchanged to an upstream
    that speaks Chat Completions (None: the provider's configured field)."""
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    """Other sampling options passed through where the wire format has them
    (seed, presence_penalty, frequency_penalty, response_format, user, ...)."""
    incremental: bool = True
    """False when nobody watches the reply arrive (a non-streaming client): an adapter
    may then ask its upstream for one whole reply and yield it as a few events."""


class Provider(Protocol):
    """A model backend. ``supports_tools`` False means: send no tool definitions."""

    name: str
    supports_tools: bool
    options: frozenset[str]
    """The ``REQUEST_OPTIONS`` (and ``strict``) it honours. A request that sends any
    other but the ``ADVISORY_OPTIONS`` is refused for it, naming the field."""

    def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        """Stream the reply. Raises ``ProviderError`` on failure."""
        ...

    async def list_models(self) -> list[str]:
        """Model names the upstream offers (may be empty)."""
        ...

    async def aclose(self) -> None: ...
