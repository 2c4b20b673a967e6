"""Chatchat's POST /chat/feedback: a score and a reason stored on a reply.

Langchain-Chatchat 0.3.x (``chatchat/server/chat/feedback.py``; its client's
``ApiRequest.chat_feedback``) sends ``{message_id, score, reason}`` as JSON. Here
``message_id`` is the id every chat chunk carries as ``message_id`` (the reply's,
``msg_...``); the score (0-100) and the reason are kept on that reply with the time, the
last feedback replacing any earlier one, and shown with the message by
``GET /v1/conversations/{id}`` (``feedback``).

Answers are Chatchat's ``{code, msg, data}`` with HTTP 200: ``code`` 200 and
``已反馈聊天记录 <id>`` when it is kept, ``code`` 404 when the caller has no such reply
(a missing id, another owner's message and a message that is not a reply are answered
alike). A body that does not validate (no ``message_id``, a ``score`` that is not an
integer from 0 to 100) is HTTP 400 with ``code`` and ``msg`` beside the OpenAI error
object (``api/errors.py``).

Deviations: Chatchat gives ``message_id`` and ``score`` defaults ("" and 0) and does
not check the score's range; here both are required and the range is checked, so a
forgotten score is refused rather than kept as 0. Chatchat answers an unknown id with
``code`` 500; here it is 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from parley.api.chatchat.common import reply
from parley.api.chatchat.shapes import Reply
from parley.api.openapi import answers
from parley.api.state import AppState
from parley.store.feedback import FeedbackStore

router = APIRouter(tags=["langchain-chatchat"])

MAX_ID = 40
"""The longest message id there is (the ``messages.id`` column)."""
MAX_REASON = 2_000


class FeedbackBody(BaseModel):
    message_id: str = Field(
        min_length=1, max_length=MAX_ID, description="The reply's id: `message_id` of its chunks."
    )
    score: int = Field(strict=True, ge=0, le=100, description="0 to 100, higher is better.")
    reason: str = Field(default="", max_length=MAX_REASON, description="Why this score.")


@router.post("/chat/feedback", **answers(Reply))
async def chat_feedback(request: Request, body: FeedbackBody) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    store = FeedbackStore(state.database)
    kept = await store.give(owner, body.message_id, body.score, body.reason)
    if kept is None:
        return reply(404, f"chat record {body.message_id} not found")
    return reply(200, f"已反馈聊天记录 {body.message_id}")
