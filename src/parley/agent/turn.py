"""The state of one agent turn: the assistant message being built, its usage and cost.

A turn is one assistant message however many steps it takes. Finished steps are
``committed`` parts (text, reasoning, and tool calls holding their results); the step
being read lives in a ``StreamAccumulator``. Usage and cost add up every model call of
the turn, discarded retry attempts included: what was spent is counted.

What does not belong here: deciding what to do next (``loop.py``), persistence
(``conversations/generation.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from parley.agent.stream import StreamAccumulator
from parley.events import StopReason
from parley.messages import Part, TextPart, ToolCallPart, Usage


@dataclass(frozen=True, slots=True)
class Stop:
    """Why the loop ended the turn on its own (a budget, a loop, a safety stop)."""

    code: str
    message: str


class TurnState:
    def __init__(self) -> None:
        self.committed: list[Part] = []
        self.step = StreamAccumulator()
        self._results: dict[str, ToolCallPart] = {}
        self.usage = Usage()
        self.cost_usd = 0.0
        self.unpriced_calls = 0
        """Model calls whose model has no price: the cost is then a lower bound."""
        self.model_calls = 0
        self.stop_reason: StopReason | None = None
        self.stop: Stop | None = None
        self.answered_by: str | None = None
        """The public name of the model that gave the last reply (a fallback, maybe)."""
        self.started = time.monotonic()
        self.last_progress = self.started
        self.resumed = False
        """A turn paused for approval, carried on (its earlier usage is included)."""

    # --- steps ------------------------------------------------------------------------

    def begin_step(self) -> StreamAccumulator:
        self.step = StreamAccumulator()
        self._results.clear()
        return self.step

    def record(self, call: ToolCallPart) -> None:
        """A call of the current step got its result (kept even if the step never ends)."""
        self._results[call.id] = call

    def commit_step(self) -> None:
        """The step is over: keep its parts, tool calls carrying their recorded results.

        A step is progress when it produced text or at least one tool succeeded; a run
        of steps whose tools all fail (or are refused) is not."""
        parts = self._step_parts()
        self.committed.extend(parts)
        if self.step.text.strip() or any(
            isinstance(p, ToolCallPart) and p.result is not None and not p.result.is_error
            for p in parts
        ):
            self.last_progress = time.monotonic()
        self.step = StreamAccumulator()
        self._results.clear()

    def resume(self, parts: tuple[Part, ...], usage: Usage, cost_usd: float) -> None:
        """Carry on a turn paused for approval: its parts so far, and what it cost."""
        self.committed = list(parts)
        self.resumed = True
        self.usage.add(usage)
        self.cost_usd += cost_usd

    def settle(self, call: ToolCallPart) -> None:
        """A committed call got its result (an approved call of a resumed turn)."""
        self.committed = [
            call if isinstance(p, ToolCallPart) and p.id == call.id else p for p in self.committed
        ]

    def replace_parts(self, parts: tuple[Part, ...]) -> None:
        """The finished turn as it was stored (after the finish transforms)."""
        self.committed = list(parts)
        self.step = StreamAccumulator()
        self._results.clear()

    def add_text(self, text: str) -> None:
        """Text the loop itself adds (a stop explanation), after everything else."""
        self.committed.append(TextPart(text))

    # --- accounting -------------------------------------------------------------------

    def count(self, usage: Usage | None, cost: float | None) -> None:
        """Add one model call's usage (kept or discarded) to the turn."""
        self.model_calls += 1
        if usage is not None:
            self.usage.add(usage)
        if cost is None:
            self.unpriced_calls += 1  # no price, or no usage reported: a lower bound
        else:
            self.cost_usd += cost

    # --- views ------------------------------------------------------------------------

    def parts(self) -> tuple[Part, ...]:
        return (*self.committed, *self._step_parts())

    def _step_parts(self) -> list[Part]:
        results = self._results
        return [
            results.get(p.id, p) if isinstance(p, ToolCallPart) else p for p in self.step.parts()
        ]

    @property
    def has_output(self) -> bool:
        return bool(self.committed) or self.step.has_output

    @property
    def has_text(self) -> bool:
        return any(isinstance(p, TextPart) and p.text for p in self.committed) or bool(
            self.step.text
        )

    def unanswered_calls(self) -> list[ToolCallPart]:
        """Calls left for the client to run (server calls end with a result, or wait
        for approval)."""
        return [
            p
            for p in self.parts()
            if isinstance(p, ToolCallPart) and p.result is None and p.approval != "pending"
        ]

    def pending_calls(self) -> list[ToolCallPart]:
        """Server calls waiting for a person's approval."""
        return [
            p
            for p in self.parts()
            if isinstance(p, ToolCallPart) and p.result is None and p.approval == "pending"
        ]

    def server_calls(self) -> list[ToolCallPart]:
        return [p for p in self.committed if isinstance(p, ToolCallPart) and p.result is not None]
