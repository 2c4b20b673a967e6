"""What a generation writes when it starts: the paused reply carried on, or the turn's
new messages and its streaming reply (``TurnRecord``, ``store.NewTurn``)."""

from __future__ import annotations

from collections.abc import Sequence

from parley.conversations.assistants import Assistant
from parley.conversations.generation import TurnRecord
from parley.conversations.history import TurnPlan
from parley.conversations.turns import ChatTurn
from parley.ids import new_id
from parley.messages import Message
from parley.providers.registry import ResolvedModel
from parley.store.repository import NewMessage, NewTurn


def turn_record(
    turn: ChatTurn,
    plan: TurnPlan,
    conversation_id: str | None,
    message_id: str,
    model: ResolvedModel,
    assistant: Assistant | None,
) -> TurnRecord | None:
    """What the generation writes when it starts: the paused reply carried on, or the
    new messages and the streaming reply (None: the request is not stored)."""
    if plan.resume is not None:
        return TurnRecord(owner=turn.owner, resume=plan.resume.parts)
    if not turn.store or conversation_id is None:
        return None
    reply = NewMessage(message_id, "assistant", (), status="streaming", model=model.public_name)
    create = plan.create
    rows = NewTurn(
        owner=turn.owner,
        conversation_id=conversation_id,
        messages=(*(NewMessage(new_id("msg"), m.role, m.parts) for m in plan.new), reply),
        create=create,
        title=title_of(plan.new) if create or not plan.stored else None,
        update_parts=plan.updates,
        parent_id=plan.parent_id,
        root=plan.root,
        copy_after=plan.copy_after,
        settle=plan.settle,
        meta={"assistant_id": assistant.id} if create and assistant else {},
    )
    claim = create and turn.create_missing and turn.conversation_id is not None
    return TurnRecord(owner=turn.owner, rows=rows, claim=claim)


def title_of(messages: Sequence[Message]) -> str | None:
    for message in messages:
        if message.role == "user" and message.text.strip():
            line = message.text.strip().splitlines()[0]
            return line[:80]
    return None
