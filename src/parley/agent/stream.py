"""The stream reader: folds a provider's events into message parts.

Text and reasoning deltas accumulate into parts in order of first appearance; tool-call
fragments are merged by index (a call without an id gets one; a call that never got a
name is dropped). The reader keeps the last usage and the stop reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parley.events import (
    Done,
    Event,
    ReasoningDelta,
    StopReason,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from parley.ids import new_id
from parley.messages import Part, ReasoningPart, TextPart, ToolCallPart, Usage


@dataclass(slots=True)
class _Call:
    id: str
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    __slots__ = ("_calls", "_order", "_reasoning", "_signature", "_text", "stop_reason", "usage")

    def __init__(self) -> None:
        self._order: list[str] = []
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._signature: str | None = None
        self._calls: dict[int, _Call] = {}
        self.usage: Usage | None = None
        self.stop_reason: StopReason | None = None

    def apply(self, event: Event) -> None:
        match event:
            case TextDelta(text=text):
                if not self._text:
                    self._order.append("text")
                self._text.append(text)
            case ReasoningDelta(text=text, signature=signature):
                if not self._reasoning and self._signature is None:
                    self._order.append("reasoning")
                if text:
                    self._reasoning.append(text)
                if signature:
                    self._signature = signature
            case ToolCallDelta(index=index):
                call = self._calls.get(index)
                if call is None:
                    call = self._calls[index] = _Call(event.id or new_id("call"))
                    if "tools" not in self._order:
                        self._order.append("tools")
                if event.name:
                    call.name += event.name
                if event.arguments:
                    call.arguments.append(event.arguments)
            case UsageEvent(usage=usage):
                self.usage = usage
            case Done(stop_reason=reason):
                self.stop_reason = reason
            case _:
                pass

    def call_id(self, index: int) -> str:
        """The id of the call at ``index`` (made up when the upstream sent none)."""
        return self._calls[index].id

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def has_output(self) -> bool:
        return bool(self._text or self._reasoning or self._calls)

    def tool_calls(self) -> list[ToolCallPart]:
        calls: list[ToolCallPart] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                continue
            calls.append(
                ToolCallPart(id=call.id, name=call.name, arguments="".join(call.arguments))
            )
        return calls

    def parts(self) -> tuple[Part, ...]:
        parts: list[Part] = []
        for kind in self._order:
            if kind == "text":
                parts.append(TextPart(self.text))
            elif kind == "reasoning":
                parts.append(ReasoningPart("".join(self._reasoning), self._signature))
            else:
                parts.extend(self.tool_calls())
        return tuple(parts)
