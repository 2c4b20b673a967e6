"""A scripted provider for tests: replies are queued by the test, requests are recorded.

Each queued reply is a list of events (ending in ``Done``) or an exception to raise,
optionally after some events. ``ScriptedProvider.say("hi")`` is the short form.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence

from parley.events import Done, Event, TextDelta, UsageEvent
from parley.messages import Usage
from parley.providers.protocol import REQUEST_OPTIONS, ModelRequest

Step = Event | BaseException | float
"""An event to yield, an exception to raise, or seconds to sleep."""


class ScriptedProvider:
    def __init__(
        self,
        name: str = "scripted",
        *,
        supports_tools: bool = True,
        options: frozenset[str] = REQUEST_OPTIONS | {"strict"},
    ) -> None:
        self.name = name
        self.supports_tools = supports_tools
        self.options = options
        """What it honours: by default everything (the requests are recorded)."""
        self.requests: list[ModelRequest] = []
        self._replies: deque[Sequence[Step]] = deque()

    def queue(self, *steps: Step) -> None:
        self._replies.append(steps)

    def say(self, text: str, *, chunk: int = 4, usage: Usage | None = None) -> None:
        pieces: list[Step] = [TextDelta(text[i : i + chunk]) for i in range(0, len(text), chunk)]
        pieces.append(UsageEvent(usage or Usage(input_tokens=10, output_tokens=len(pieces))))
        pieces.append(Done("end_turn"))
        self.queue(*pieces)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        if not self._replies:
            raise AssertionError("ScriptedProvider: no reply queued")
        for step in self._replies.popleft():
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, float):
                await asyncio.sleep(step)
                continue
            yield step

    async def list_models(self) -> list[str]:
        return ["scripted"]

    async def aclose(self) -> None:
        return None
