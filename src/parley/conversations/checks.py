"""What a turn must hold before anything is written: the model is shown more than
system messages, and a new user message says something."""

from __future__ import annotations

from parley.conversations.history import TurnPlan
from parley.conversations.turns import ChatTurn
from parley.errors import InvalidRequest
from parley.messages import FilePart, ImagePart, Message, TextPart
from parley.store.repository import StoredMessage


def check_plan(plan: TurnPlan, turn: ChatTurn) -> None:
    """The model must be shown something besides system messages; a new user message
    must say something."""
    if not any(m.role != "system" and usable(m) for m in plan.stored) and not any(
        m.role != "system" for m in plan.new
    ):
        raise InvalidRequest("messages must contain a non-system message", param="messages")
    if plan.new and plan.new[-1].role == "user":
        check_input(plan.new[-1], len(turn.messages) - 1)


def check_input(message: Message, index: int) -> None:
    if not _has_input(message):
        raise InvalidRequest(
            "the new user message is empty: send some text, an image or a file",
            param=f"messages.{index}.content",
            code="empty_message",
        )


def _has_input(message: Message) -> bool:
    """Whether a user message says anything: text that is not blank, an image or a file."""
    return any(
        isinstance(part, ImagePart | FilePart) or (isinstance(part, TextPart) and part.text.strip())
        for part in message.parts
    )


def usable(message: StoredMessage) -> bool:
    """Stored messages that become model context: anything with content."""
    return bool(message.parts)
