"""Tool approval: a person's decisions on server tool calls the model made.

A server tool whose policy is ``ask`` does not run: its call is saved as ``pending`` and
the turn pauses (the reply's status is ``awaiting_approval``; the stream's last chunk
lists the calls in ``parley.pending_approvals``). Decisions then come over HTTP:

- ``approve``: the call runs, once, with the arguments the model gave;
- ``deny`` (with an optional reason): the model gets an error result naming the reason;
- ``answer`` (with text): the model gets the person's text as the call's result.

The turn resumes only when no call is pending any more. A decision is bound to its call
(the id, in the paused reply of that conversation), to the call's arguments (a decision
that quotes other arguments is refused) and to an expiry (an expired call can still be
denied or answered, not approved). Each call is decided once: the resume is a single
conditional write, so two racing requests cannot both run a call.

A new user message instead of decisions closes the pending calls as not approved.

What does not belong here: running the calls and the loop (``agent/loop.py``), the HTTP
shapes (``api/``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from parley.errors import Conflict, InvalidRequest
from parley.messages import Part, ToolCallPart, ToolResult

DecisionKind = Literal["approve", "deny", "answer"]

DENIED = "[DENIED] The user did not allow this call of '{name}'{reason}. Do not retry it."
NOT_DECIDED = "[Not run: the user sent a new message instead of deciding on this call]"


@dataclass(frozen=True, slots=True)
class Decision:
    call_id: str
    decision: DecisionKind
    text: str | None = None
    """The reason of a denial, or the answer."""
    arguments: str | None = None
    """The arguments the decision was made on, when the client quotes them."""
    param: str = "approvals"
    """Where it came from in the request, for error messages."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A paused reply's parts with the decisions applied."""

    parts: tuple[Part, ...]
    approved: tuple[ToolCallPart, ...]
    """The calls to run now (empty while any call is still pending)."""
    decided: tuple[str, ...]
    still_pending: int


def pending(parts: Sequence[Part]) -> list[ToolCallPart]:
    return [
        p
        for p in parts
        if isinstance(p, ToolCallPart) and p.approval == "pending" and p.result is None
    ]


def apply_decisions(
    parts: Sequence[Part],
    decisions: Sequence[Decision],
    *,
    now: float,
    ttl_seconds: float,
    paused_at: float,
) -> Decided:
    """Apply ``decisions`` to a paused reply's ``parts``. Raises the request's errors:
    an unknown call, a call decided twice, other arguments, approving an expired call
    (one asked more than ``ttl_seconds`` ago; ``paused_at`` stands in for a call that
    does not say when it was asked)."""
    waiting = {call.id: call for call in pending(parts)}
    known = {p.id: p for p in parts if isinstance(p, ToolCallPart)}
    chosen: dict[str, ToolCallPart] = {}
    for decision in decisions:
        call = waiting.get(decision.call_id)
        if decision.call_id in chosen:
            raise InvalidRequest(
                f"call {decision.call_id!r} is decided twice in this request",
                param=decision.param,
            )
        if call is None:
            if decision.call_id in known:
                raise Conflict(
                    f"call {decision.call_id!r} is not waiting for approval "
                    f"(it is {known[decision.call_id].approval})",
                    param=decision.param,
                    code="approval_already_decided",
                )
            raise InvalidRequest(
                f"no call {decision.call_id!r} is waiting for approval here",
                param=decision.param,
                code="unknown_tool_call",
            )
        if decision.arguments is not None and decision.arguments != call.arguments:
            raise Conflict(
                f"call {call.id!r} has other arguments than the ones approved",
                param=decision.param,
                code="arguments_mismatch",
            )
        asked = call.asked_at if call.asked_at is not None else paused_at
        if decision.decision == "approve" and now - asked > ttl_seconds:
            raise Conflict(
                f"the approval of call {call.id!r} has expired: deny or answer it, or send "
                "a new message",
                param=decision.param,
                code="approval_expired",
            )
        chosen[call.id] = _decide(call, decision)
    updated = tuple(chosen.get(p.id, p) if isinstance(p, ToolCallPart) else p for p in parts)
    left = len(pending(updated))
    approved = (
        ()
        if left
        else tuple(
            p
            for p in updated
            if isinstance(p, ToolCallPart) and p.approval == "approved" and p.result is None
        )
    )
    return Decided(updated, approved, tuple(chosen), left)


def close_pending(parts: Sequence[Part]) -> tuple[Part, ...]:
    """The calls still pending get a "not run" result (the person moved on)."""
    return tuple(
        p.with_approval("denied", ToolResult(NOT_DECIDED, is_error=True), "not decided")
        if isinstance(p, ToolCallPart) and p.approval == "pending" and p.result is None
        else p
        for p in parts
    )


def _decide(call: ToolCallPart, decision: Decision) -> ToolCallPart:
    match decision.decision:
        case "approve":
            return call.with_approval("approved")
        case "deny":
            reason = (decision.text or "").strip()
            text = DENIED.format(name=call.name, reason=f": {reason}" if reason else "")
            return call.with_approval("denied", ToolResult(text, is_error=True), reason or None)
        case "answer":
            return call.with_approval("answered", ToolResult(decision.text or ""))
