"""Triage: a step's calls sorted by who deals with them (agent/outcomes.py)."""

from __future__ import annotations

from parley.agent.outcomes import Triage, triage
from parley.messages import ToolCallPart


def call(name: str, number: int) -> ToolCallPart:
    return ToolCallPart(f"call_{number}", name, "{}")


CALLS = (
    call("search", 1),
    call("client_lookup", 2),
    call("delete_file", 3),
    call("shell", 4),
    call("search", 5),
)
POLICIES = {"delete_file": "ask", "shell": "deny"}


def test_server_calls_are_sorted_by_policy_in_the_models_order() -> None:
    sorted_calls = triage(
        CALLS, client_tools=frozenset({"client_lookup"}), policies=POLICIES, passthrough=False
    )
    assert [c.id for c in sorted_calls.server] == ["call_1", "call_3", "call_4", "call_5"]
    assert [c.id for c in sorted_calls.run] == ["call_1", "call_5"]
    assert [c.id for c in sorted_calls.ask] == ["call_3"]
    assert [c.id for c in sorted_calls.deny] == ["call_4"]
    assert [c.id for c in sorted_calls.client] == ["call_2"]


def test_without_server_tools_every_call_is_the_clients() -> None:
    """A pass-through step: even a name a server tool has goes to the client."""
    sorted_calls = triage(CALLS, client_tools=frozenset(), policies=POLICIES, passthrough=True)
    assert sorted_calls.client == CALLS
    assert sorted_calls.server == sorted_calls.run == ()


def test_a_step_without_calls_is_empty() -> None:
    empty = triage((), client_tools=frozenset(), policies={}, passthrough=False)
    assert not empty
    assert empty == Triage()
    assert triage(CALLS[:1], client_tools=frozenset(), policies={}, passthrough=False)
