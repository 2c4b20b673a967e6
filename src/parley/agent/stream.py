"""The stream reader: folds a provider's events into message parts.

Text and reasoning deltas accumulate into parts in order of first appearance. Tool-call
fragments are merged by index, except that a fragment with a new id at a used index
starts a new call (Ollama numbers every parallel call 0); calls are renumbered 0, 1, 2
in order of appearance, a call without an id gets one, and a call that never got a name
is dropped. An "end turn" that carries tool calls is tool use. ``apply`` returns the
event as it should travel on: renumbered, with the id on a call's first fragment.
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
    upstream_id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    __slots__ = (
        "_calls",
        "_order",
        "_reasoning",
        "_signature",
        "_slots",
        "_text",
        "stop_reason",
        "usage",
    )

    def __init__(self) -> None:
        self._order: list[str] = []
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._signature: str | None = None
        self._calls: list[_Call] = []
        self._slots: dict[int, int] = {}  # upstream index -> position in _calls
        self.usage: Usage | None = None
        self.stop_reason: StopReason | None = None

    def apply(self, event: Event) -> Event:
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
            case ToolCallDelta():
                return self._tool_fragment(event)
            case UsageEvent(usage=usage):
                self.usage = usage
            case Done(stop_reason=reason):
                if reason == "end_turn" and any(call.name for call in self._calls):
                    event = Done("tool_use")
                self.stop_reason = event.stop_reason
            case _:
                pass
        return event

    def _tool_fragment(self, event: ToolCallDelta) -> ToolCallDelta:
        slot = self._slots.get(event.index)
        if slot is not None and event.id and event.id != self._calls[slot].upstream_id:
            slot = None  # a new call at an index already used
        if slot is None:
            slot = self._slots[event.index] = len(self._calls)
            call_id = event.id
            if not call_id or any(c.id == call_id for c in self._calls):
                call_id = new_id("call")  # missing, or reused for another call of the step
            self._calls.append(_Call(call_id, event.id))
            if "tools" not in self._order:
                self._order.append("tools")
            first = True
        else:
            first = False
        call = self._calls[slot]
        if event.name:
            call.name += event.name
        if event.arguments:
            call.arguments.append(event.arguments)
        return ToolCallDelta(
            slot, id=call.id if first else None, name=event.name, arguments=event.arguments
        )

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def has_output(self) -> bool:
        return bool(self._text or self._reasoning or self._calls)

    def tool_calls(self) -> list[ToolCallPart]:
        calls: list[ToolCallPart] = []
        for call in self._calls:
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


class ThinkTagReader:
    """Turns ``<think>...</think>`` at the start of a reply into reasoning.

    Models such as DeepSeek-R1 and Qwen send their reasoning inline as text. A tag split
    across chunks is still recognised: text that could be the start of a tag is held
    back until the next chunk (or ``flush``) decides. Only a tag before any visible text
    opens reasoning, so an answer that talks about ``<think>`` is left alone.
    """

    OPEN = "<think>"
    CLOSE = "</think>"

    __slots__ = ("_after", "_held", "_inside", "_settled")

    def __init__(self) -> None:
        self._held = ""
        self._inside = False
        self._settled = False  # past the point where an opening tag could appear
        self._after = False  # just closed: drop the blank lines that follow the tag

    @property
    def passes_through(self) -> bool:
        """Past any tag: text now goes on unchanged (the fast path for every chunk)."""
        return self._settled and not (self._inside or self._after or self._held)

    def feed(self, text: str) -> list[TextDelta | ReasoningDelta]:
        out: list[TextDelta | ReasoningDelta] = []
        buffer = self._held + text
        self._held = ""
        while buffer:
            if self._inside:
                end = buffer.find(self.CLOSE)
                if end >= 0:
                    if end:
                        out.append(ReasoningDelta(buffer[:end]))
                    buffer = buffer[end + len(self.CLOSE) :]
                    self._inside = False
                    self._settled = self._after = True
                    continue
                keep = _partial_suffix(buffer, self.CLOSE)
                if len(buffer) > keep:
                    out.append(ReasoningDelta(buffer[: len(buffer) - keep]))
                self._held = buffer[len(buffer) - keep :]
                break
            if self._after:
                buffer = buffer.lstrip("\r\n")
                if not buffer:
                    break
                self._after = False
            if not self._settled:
                stripped = buffer.lstrip()
                if stripped.startswith(self.OPEN):
                    self._inside = True
                    buffer = stripped[len(self.OPEN) :]
                    continue
                if self.OPEN.startswith(stripped):
                    self._held = buffer  # blank, or maybe the start of the tag
                    break
                self._settled = True
            out.append(TextDelta(buffer))
            break
        return out

    def flush(self) -> list[TextDelta | ReasoningDelta]:
        held, self._held = self._held, ""
        if not held:
            return []
        if self._inside:
            return [ReasoningDelta(held)]
        return [TextDelta(held)] if held.strip() or self._settled else []


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of ``text`` that is a proper start of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0
