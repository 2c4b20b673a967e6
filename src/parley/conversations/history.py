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
from dataclasses import replace

from parley.agent.loop import Resume
from parley.conversations.approvals import apply_decisions, close_pending
from parley.conversations.turns import ChatTurn, ToolAnswer
from parley.errors import Conflict, InvalidRequest, NotFound
from parley.ids import client_conversation_id
from parley.messages import Message, Part, ToolCallPart, ToolResult, Usage
from parley.store.repository import ConversationStore, StoredMessage


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

    async def resumed(self, turn: ChatTurn) -> tuple[list[StoredMessage], Resume, str, float]:
        """(the branch before the paused reply, how it carries on, its id, what the
        earlier replies cost)."""
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
        cost = _cost(earlier)
        return earlier, resume, paused.id, cost

    async def anchored(
        self, turn: ChatTurn
    ) -> tuple[list[StoredMessage], list[Message], str | None, bool, list[str], float]:
        """(the kept branch, new messages, their parent, whether they start at the root,
        ids to copy after the reply, what the kept history's replies cost)."""
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
        cost = _cost(kept)
        return kept, new, parent, parent is None, copy, cost

    async def continued(
        self, turn: ChatTurn
    ) -> tuple[
        list[StoredMessage],
        list[Message],
        dict[str, tuple[Part, ...]],
        str | None,
        float,
        str | None,
    ]:
        """(the branch (the updated parts in it), new messages, parts to update, parent of
        the new messages, what the branch's replies cost so far, a paused reply the new
        message leaves behind)."""
        stored = await self._branch(turn)
        cost = _cost(stored)
        updates: dict[str, tuple[Part, ...]] = {}
        settle: str | None = None
        if stored and stored[-1].status == "awaiting_approval":
            # a new message instead of decisions: the waiting calls are closed, unrun
            settle = stored[-1].id
            updates[settle] = close_pending(stored[-1].parts)
        if turn.trailing_answers:
            updates.update(_answer_calls(stored, turn.trailing_answers, updates))
            return _updated(stored, updates), [], updates, None, cost, settle
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
            return _updated(stored, updates), [], updates, stored[-2].id, cost, settle
        # The new message goes under what the model is shown, even if another turn
        # lands first (it then starts a branch of its own).
        parent = stored[-1].id if stored else None
        return _updated(stored, updates), [last], updates, parent, cost, settle


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
) -> list[StoredMessage]:
    return [replace(m, parts=updates[m.id]) if m.id in updates else m for m in stored]


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
