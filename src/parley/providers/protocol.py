"""The provider protocol: one small streaming interface per wire format.

A provider turns a ``ModelRequest`` into a stream of ``events.Event`` that ends with one
``Done``; a non-streaming reply is the collected stream. Failures are raised as
``errors.ProviderError``. Adapters know nothing of conversations, storage or HTTP
clients of Parley; they only speak to their upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    }
)
"""Request fields (OpenAI's names) that travel in ``ModelRequest.options``; each adapter
sends those its wire format knows."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    """The upstream's own model name (aliases are already resolved)."""
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
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

    def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        """Stream the reply. Raises ``ProviderError`` on failure."""
        ...

    async def list_models(self) -> list[str]:
        """Model names the upstream offers (may be empty)."""
        ...

    async def aclose(self) -> None: ...
