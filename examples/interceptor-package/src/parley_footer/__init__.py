"""An example third-party interceptor: a footer line under every finished answer.

It streams like the rest of the answer (``on_stream_event`` adds it just before the
reply's ``Done``), and only under replies that end the turn: an agent step that goes on
to call tools gets none. Configure it in Parley's settings by its entry-point name::

    interceptors:
      chain:
        - use: footer
          options: {text: "Checked by ACME's assistant"}
"""

from __future__ import annotations

from collections.abc import Sequence

from parley.events import Done, Event, TextDelta
from parley.interceptors import CallInfo, Interceptor


class Footer(Interceptor):
    order = 450  # the response-shaping band

    def __init__(self, text: str = "Answered through Parley.") -> None:
        if not text.strip():
            raise ValueError("the footer text is empty")
        self.text = text

    def describe(self) -> dict[str, str]:
        return {"text": self.text}

    def on_stream_event(self, event: Event, call: CallInfo) -> Event | Sequence[Event] | None:
        if (
            isinstance(event, Done)
            and call.purpose == "chat"
            and event.stop_reason in ("end_turn", "stop_sequence")
        ):
            return [TextDelta(f"\n\n-- {self.text}"), event]
        return None
