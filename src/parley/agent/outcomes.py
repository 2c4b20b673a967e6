"""What a step of the agent loop leads to, as values: the loop ``match``es on them.

A model step ends with its calls sorted by who deals with them (``triage``); the step
then leads to one ``NextStep``:

- ``RunAgain``: the server's tools ran; the model is called again with their results;
- ``FinalOutput``: the reply is the answer (or was cut short by the cap or a filter);
- ``HandOff``: calls to the client's own tools end the turn (``tool_calls``);
- ``Interruption``: calls wait for a person's approval; the turn pauses;
- ``Stopped``: the loop ended the turn itself (a budget, a repeating loop, shutdown).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from parley.agent.turn import Stop
from parley.events import StopReason
from parley.messages import ToolCallPart, ToolPolicy


@dataclass(frozen=True, slots=True)
class Triage:
    """A step's tool calls by who deals with them, each in the order the model made them."""

    server: tuple[ToolCallPart, ...] = ()
    """Calls to the server's tools, whatever their policy."""
    run: tuple[ToolCallPart, ...] = ()
    """Server calls that run now (policy ``auto``)."""
    ask: tuple[ToolCallPart, ...] = ()
    """Server calls that wait for a person (policy ``ask``)."""
    deny: tuple[ToolCallPart, ...] = ()
    """Server calls refused by policy (``deny``)."""
    client: tuple[ToolCallPart, ...] = ()
    """Calls to the client's tools: handed to the client, never run here."""

    def __bool__(self) -> bool:
        return bool(self.server or self.client)


def triage(
    calls: Iterable[ToolCallPart],
    *,
    client_tools: frozenset[str],
    policies: Mapping[str, ToolPolicy],
    passthrough: bool,
) -> Triage:
    """Sorts ``calls``. Without server tools (``passthrough``) every call is the client's."""
    calls = tuple(calls)
    if passthrough:
        return Triage(client=calls)
    server = tuple(c for c in calls if c.name not in client_tools)

    def having(policy: ToolPolicy) -> tuple[ToolCallPart, ...]:
        return tuple(c for c in server if policies.get(c.name, "auto") == policy)

    return Triage(
        server=server,
        run=having("auto"),
        ask=having("ask"),
        deny=having("deny"),
        client=tuple(c for c in calls if c.name in client_tools),
    )


class NextStep:
    """What a step leads to (one of the classes below)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class RunAgain(NextStep):
    """The step's server tools ran: the model is called again."""


@dataclass(frozen=True, slots=True)
class FinalOutput(NextStep):
    """The step's reply ends the turn."""

    reason: StopReason


@dataclass(frozen=True, slots=True)
class HandOff(NextStep):
    """The client runs these calls; the turn ends with ``tool_calls``."""

    calls: tuple[ToolCallPart, ...]
    streamed: bool
    """Their fragments already reached the client as they came (a pass-through step)."""


@dataclass(frozen=True, slots=True)
class Interruption(NextStep):
    """Calls wait for approval: the turn pauses, and resumes when they are decided."""

    pending: int


@dataclass(frozen=True, slots=True)
class Stopped(NextStep):
    """The loop ends the turn itself, saying why."""

    stop: Stop


Next = RunAgain | FinalOutput | HandOff | Interruption | Stopped
"""Every ``NextStep``, for exhaustive matching."""
