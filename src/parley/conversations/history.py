"""Where a turn goes in a stored conversation, and what the model is shown before it.

Three ways in: a new message after the current branch (``continued``), a regenerate or
edit at a stored message (``anchored``), and decisions that carry a reply paused for
approval on (``resumed``). Each reads the branch once and says where the new messages
go, which stored parts the turn updates (client tool results, calls closed unrun), and
what the earlier replies cost.

What does not belong here: shaping what is sent (``outgoing.py``), running the turn
(``service.py``, ``generation.py``), the SQL (``store/``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from parley.agent.loop import Resume
from parley.conversations.approvals import apply_decisions, close_pending
from parley.conversations.turns import ChatTurn, ToolAnswer
from parley.errors import Conflict, InvalidRequest, NotFound
from parley.ids import client_conversation_id
from parley.messages import Message, Part, ToolCallPart, ToolResult, Usage
from parley.store.repository import ConversationStore, StoredMessage

TurnKind = Literal["new", "continued", "anchored", "resumed"]


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """Where a turn goes, read once from the request and the stored branch."""

    kind: TurnKind
    stored: tuple[StoredMessage, ...] = ()
    """The stored branch the model is shown before the new messages (updated parts in it)."""
    new: tuple[Message, ...] = ()
    """Messages the turn adds before its reply."""
    updates: Mapping[str, tuple[Part, ...]] = field(default_factory=dict)
    """Stored messages whose parts the turn changes (client tool results, calls closed)."""
    parent_id: str | None = None
    """What the new messages go under (None with ``root``: the conversation's start)."""
    root: bool = False
    copy_after: tuple[str, ...] = ()
    """Stored messages copied after the new reply (a regenerated reply's followers)."""
    settle: str | None = None
    """A reply paused for approval that the new message leaves behind."""
    prior_cost: float = 0.0
    """What the earlier replies of the branch cost (USD)."""
    resume: Resume | None = None
    """How a reply paused for approval carries on (``resumed``)."""
    reply_id: str | None = None
    """The reply's id when it exists already (``resumed``)."""
    create: bool = False
    """A new conversation is created for the turn."""

    @property
    def resumed_tools(self) -> tuple[str, ...]:
        """The tools a resumed reply called (they stay offered)."""
        if self.resume is None:
            return ()
        return tuple(p.name for p in self.resume.parts if isinstance(p, ToolCallPart))


class History:
    def __init__(self, store: ConversationStore, approval_ttl_seconds: float) -> None:
        self._store = store
        self._approval_ttl = approval_ttl_seconds

    async def claimed(self, turn: ChatTurn) -> str:
        """The stored conversation a client-made id (Chatchat's) names for this owner:
        the id itself when it is already one of theirs, else an id derived from the owner
        and the client's id. Owners never share a client-made id, so another owner's id
        answers exactly like a free one (a new conversation), and reveals nothing."""
        assert turn.conversation_id is not None
        try:
            await self._store.get_conversation(turn.owner, turn.conversation_id)
        except LookupError:
            return client_conversation_id(turn.owner, turn.conversation_id)
        return turn.conversation_id

    async def plan(self, turn: ChatTurn) -> TurnPlan:
        """Where ``turn`` goes: decisions carry a paused reply on, an anchor answers at a
        stored message, a conversation id continues its branch (or creates it, for a
        client-made id), and without one the request's messages are a new conversation."""
        if turn.approvals:
            return await self.resumed(turn)
        if turn.anchor is not None:
            return await self.anchored(turn)
        if turn.conversation_id is not None:
            try:
                return await self.continued(turn)
            except NotFound:
                if not turn.create_missing:
                    raise
                return TurnPlan("new", new=tuple(turn.messages), create=True)
        if turn.orphan_answers:
            answer = turn.orphan_answers[0]
            raise InvalidRequest(
                f"tool result for unknown call id {answer.call_id!r}", param=answer.param
            )
        return TurnPlan("new", new=tuple(turn.messages), create=True)

    async def _branch(self, turn: ChatTurn) -> list[StoredMessage]:
        """The stored branch of the turn's conversation (NotFound: no such conversation)."""
        assert turn.conversation_id is not None
        try:
            return await self._store.branch(turn.owner, turn.conversation_id)
        except LookupError:
            raise NotFound(
                f"conversation {turn.conversation_id!r} not found",
                param="conversation_id",
                code="conversation_not_found",
            ) from None

    async def resumed(self, turn: ChatTurn) -> TurnPlan:
        """The paused reply carried on, after the branch before it."""
        stored = await self._branch(turn)
        paused = stored[-1] if stored else None
        if paused is None or paused.status != "awaiting_approval":
            raise Conflict(
                "nothing in this conversation is waiting for approval",
                param="approvals",
                code="no_pending_approvals",
            )
        ttl = self._approval_ttl
        decided = apply_decisions(
            paused.parts,
            turn.approvals,
            now=time.time(),
            ttl_seconds=ttl,
            paused_at=paused.updated_at,
        )
        earlier = stored[:-1]
        usage = paused.usage or {}
        resume = Resume(
            parts=decided.parts,
            approved=decided.approved,
            usage=Usage.from_dict(usage),
            cost_usd=float(usage.get("response_usd") or 0.0),
            decided=decided.decided,
        )
        return TurnPlan(
            "resumed",
            stored=tuple(earlier),
            resume=resume,
            reply_id=paused.id,
            prior_cost=_cost(earlier),
        )

    async def anchored(self, turn: ChatTurn) -> TurnPlan:
        """A regenerate or an edit: the branch kept up to the anchor, a new reply (after
        the edited message) under it, and the replies after a regenerated one copied."""
        anchor = turn.anchor
        assert anchor is not None
        assert turn.conversation_id is not None
        try:
            path, later = await self._store.around(
                turn.owner, turn.conversation_id, anchor.message_id
            )
        except LookupError:
            raise NotFound(
                f"message {anchor.message_id!r} not found in conversation {turn.conversation_id!r}",
                param="message_id",
                code="message_not_found",
            ) from None
        target = path[-1]
        if anchor.edit:
            if target.role != "user":
                raise InvalidRequest(
                    "only a user message is edited with a new reply; "
                    "an assistant message is edited without one",
                    param="message_id",
                )
            kept, new, parent, copy = path[:-1], list(turn.messages), target.parent_id, []
        elif target.role == "assistant":
            if target.parent_id is None:
                raise InvalidRequest("this reply has nothing to answer", param="message_id")
            kept, new, parent, copy = path[:-1], [], target.parent_id, later
        elif target.role == "user":
            kept, new, parent, copy = path, [], target.id, []
        else:
            raise InvalidRequest("a system message cannot be regenerated", param="message_id")
        return TurnPlan(
            "anchored",
            stored=tuple(kept),
            new=tuple(new),
            parent_id=parent,
            root=parent is None,
            copy_after=tuple(copy),
            prior_cost=_cost(kept),
        )

    async def continued(self, turn: ChatTurn) -> TurnPlan:
        """A new message (or the client's tool results) after the stored branch."""
        stored = await self._branch(turn)
        cost = _cost(stored)
        updates: dict[str, tuple[Part, ...]] = {}
        settle: str | None = None
        if stored and stored[-1].status == "awaiting_approval":
            # a new message instead of decisions: the waiting calls are closed, unrun
            settle = stored[-1].id
            updates[settle] = close_pending(stored[-1].parts)
        plan = TurnPlan("continued", updates=updates, settle=settle, prior_cost=cost)
        if turn.trailing_answers:
            updates.update(_answer_calls(stored, turn.trailing_answers, updates))
            return replace(plan, stored=_updated(stored, updates))
        if not turn.messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        last = turn.messages[-1]
        if last.role != "user":
            raise InvalidRequest(
                "with conversation_id, the last message must be the new user message "
                "or tool results",
                param=f"messages.{len(turn.messages) - 1}.role",
            )
        if _is_retry(stored, last):
            # The same message again after a reply that failed before any output (a
            # client retrying): answer the stored message instead of storing it twice.
            return replace(plan, stored=_updated(stored, updates), parent_id=stored[-2].id)
        # The new message goes under what the model is shown, even if another turn
        # lands first (it then starts a branch of its own).
        parent = stored[-1].id if stored else None
        return replace(plan, stored=_updated(stored, updates), new=(last,), parent_id=parent)


def _is_retry(stored: list[StoredMessage], message: Message) -> bool:
    return (
        len(stored) >= 2
        and stored[-1].role == "assistant"
        and stored[-1].status == "failed"
        and not stored[-1].parts
        and stored[-2].role == "user"
        and stored[-2].parts == message.parts
    )


def _cost(messages: list[StoredMessage]) -> float:
    """What the replies among ``messages`` cost (USD)."""
    return sum(float((m.usage or {}).get("response_usd") or 0.0) for m in messages)


def _updated(
    stored: list[StoredMessage], updates: dict[str, tuple[Part, ...]]
) -> tuple[StoredMessage, ...]:
    return tuple(replace(m, parts=updates[m.id]) if m.id in updates else m for m in stored)


def _answer_calls(
    stored: list[StoredMessage],
    answers: tuple[ToolAnswer, ...],
    updates: dict[str, tuple[Part, ...]],
) -> dict[str, tuple[Part, ...]]:
    """Attach client tool results to the stored assistant calls they answer (on top of
    ``updates``). Only the client's calls take answers: a server tool's result, or a
    call waiting for approval, is not the client's to write."""
    by_call: dict[str, ToolAnswer] = {a.call_id: a for a in answers}
    target = next((m for m in reversed(stored) if m.role == "assistant" and m.parts), None)
    if target is None:
        answer = answers[0]
        raise InvalidRequest(
            f"tool result for unknown call id {answer.call_id!r}", param=answer.param
        )
    current = updates.get(target.id, target.parts)
    known = {
        p.id
        for p in current
        if isinstance(p, ToolCallPart)
        and p.approval == "auto"
        and (p.result is None or p.result.started_at is None)  # run by the server: set
    }
    for answer in answers:
        if answer.call_id not in known:
            raise InvalidRequest(
                f"tool result for unknown call id {answer.call_id!r}", param=answer.param
            )
    parts = tuple(
        replace(p, result=ToolResult(by_call[p.id].content))
        if isinstance(p, ToolCallPart) and p.id in by_call
        else p
        for p in current
    )
    return {target.id: parts}
