"""Reading a Server-Sent Events stream as a browser's EventSource does: events with
their ``id`` and ``data``, and resuming one with ``Last-Event-ID``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx


class Served(Protocol):
    """A server, or a proxy in front of several: where requests go."""

    @property
    def url(self) -> str: ...


WORDS = [f"w{i} " for i in range(30)]
"""A reply long enough to leave in the middle of (with a delay between its chunks)."""


@dataclass(frozen=True, slots=True)
class Event:
    id: str | None
    data: str

    @property
    def done(self) -> bool:
        return self.data == "[DONE]"

    def json(self) -> Any:
        return json.loads(self.data)

    @property
    def text(self) -> str:
        """The content delta of a chat completion chunk ("" for any other event)."""
        if self.done:
            return ""
        choices = self.json().get("choices") or [{}]
        return str((choices[0].get("delta") or {}).get("content") or "")


def events(response: httpx.Response) -> Iterator[Event]:
    """The events of a streaming response, as they arrive."""
    event_id: str | None = None
    data: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if data:
                yield Event(event_id, "\n".join(data))
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def text_of(stream: list[Event]) -> str:
    return "".join(event.text for event in stream)


def new_conversation(server: Served) -> str:
    """The id of a new, empty conversation on ``server``."""
    return str(httpx.post(f"{server.url}/v1/conversations", json={}).json()["id"])


def body(conversation_id: str) -> dict[str, Any]:
    return {
        "model": "fast",
        "messages": [{"role": "user", "content": "a long story"}],
        "stream": True,
        "conversation_id": conversation_id,
    }


def first_events(server: Served, data: dict[str, Any], count: int) -> list[Event]:
    """Read ``count`` events of a new streamed reply, then hang up."""
    got: list[Event] = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=data) as response:
        assert response.status_code == 200
        for event in events(response):
            got.append(event)
            if len(got) == count:
                break
    return got


def resume(server: Served, last_event_id: str, **headers: str) -> list[Event]:
    url = f"{server.url}/v1/chat/completions"
    sent = {"last-event-id": last_event_id, **headers}
    with httpx.stream("POST", url, json={}, headers=sent, timeout=30) as response:
        assert response.status_code == 200, response.read()
        return list(events(response))
