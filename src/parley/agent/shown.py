"""What the client has been shown of a turn's answer, so that the loop passes events on
right: a blank line between steps' text, and a ``Restart`` that says what to drop."""

from __future__ import annotations

from dataclasses import replace

from parley.events import Event, ReasoningDelta, Restart, TextDelta
from parley.messages import STEP_SEPARATOR


class Shown:
    """What the client has been shown of the turn's answer, to pass events on right:
    a blank line between steps' text, and a ``Restart`` that says what to drop."""

    def __init__(self) -> None:
        self.content_chars = 0
        self._step_start = 0
        self._separate = False
        self._separate_at_start = False
        self._attempt_shown = False

    def begin_step(self, *, separate: bool) -> None:
        self._step_start = self.content_chars
        self._separate = self._separate_at_start = separate
        self._attempt_shown = False

    @property
    def plain(self) -> bool:
        """Text goes on as it is (no step separator is due)."""
        return not self._separate

    def count(self, event: TextDelta) -> None:
        self.content_chars += len(event.text)
        self._attempt_shown = True

    def pass_on(self, event: Event, *, note: bool = False) -> list[Event]:
        if isinstance(event, Restart):
            restart = replace(event, clear=self._attempt_shown, keep_content_chars=self._step_start)
            self.content_chars = self._step_start
            self._separate = self._separate_at_start
            self._attempt_shown = False
            return [restart]
        if isinstance(event, TextDelta):
            out: list[Event] = []
            if self._separate or (note and self.content_chars):
                self._separate = False
                out.append(TextDelta(STEP_SEPARATOR + event.text))
            else:
                out.append(event)
            self.content_chars += len(out[0].text) if isinstance(out[0], TextDelta) else 0
            self._attempt_shown = True
            return out
        if isinstance(event, ReasoningDelta):
            self._attempt_shown = True
        return [event]
