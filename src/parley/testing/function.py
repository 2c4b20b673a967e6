"""A provider whose replies a function of yours makes: a model for tests.

    def handler(request: ModelRequest) -> Reply:
        if not any(m.role == "tool" or m.tool_calls for m in request.messages):
            return [Call("current_time", {})]        # the model calls a tool
        return "It is late."                         # then answers

    provider = FunctionProvider(handler)

``handler`` gets each model request as Parley sends it upstream (messages after repair
and context shaping, tools, sampling) and returns text, tool calls, or events of its
own making; it may be async. Every request is kept in ``provider.requests``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from parley.events import Done, Event, TextDelta, ToolCallDelta, UsageEvent
from parley.ids import new_id
from parley.messages import Usage
from parley.providers.protocol import REQUEST_OPTIONS, ModelRequest


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call the model makes."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    """The arguments, as an object or as the JSON text a model would send."""
    id: str | None = None
    """The call's id (default: a new one)."""


Reply = str | Sequence[Call] | Sequence[Event]
"""Text, tool calls (the reply ends with ``tool_use``), or the events themselves (end
them with ``Done``)."""

Handler = Callable[[ModelRequest], Reply | Awaitable[Reply]]


class FunctionProvider:
    """A ``Provider`` whose every reply ``handler`` makes (streamed in small pieces, with
    a token count, as an upstream streams)."""

    def __init__(
        self,
        handler: Handler,
        *,
        name: str = "function",
        supports_tools: bool = True,
        chunk_chars: int = 8,
    ) -> None:
        self.name = name
        self.supports_tools = supports_tools
        self.options = REQUEST_OPTIONS | {"strict"}
        """It honours every request field (the requests are kept for the test to read)."""
        self.requests: list[ModelRequest] = []
        self._handler = handler
        self._chunk = max(1, chunk_chars)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        reply = self._handler(request)
        if inspect.isawaitable(reply):
            reply = await reply
        for event in self._events(reply):
            yield event

    def _events(self, reply: Reply) -> list[Event]:
        if isinstance(reply, str):
            text = [reply[i : i + self._chunk] for i in range(0, len(reply), self._chunk)]
            return [*map(TextDelta, text), _usage(len(text)), Done("end_turn")]
        items = list(reply)
        if items and all(isinstance(item, Call) for item in items):
            calls = [_delta(index, call) for index, call in enumerate(items)]  # type: ignore[arg-type]
            return [*calls, _usage(len(calls)), Done("tool_use")]
        if any(isinstance(item, Call) for item in items):
            raise TypeError("a reply is text, tool calls, or events: not calls and events")
        return items  # type: ignore[return-value]

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        return None


def _delta(index: int, call: Call) -> ToolCallDelta:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return ToolCallDelta(index, call.id or new_id("call"), call.name, arguments)


def _usage(output_tokens: int) -> UsageEvent:
    return UsageEvent(Usage(input_tokens=10, output_tokens=output_tokens))
