"""``POST /v1/conversations/{id}/approvals``: decide on tool calls waiting for approval.

Body: ``{"decisions": [{"tool_call_id", "decision": "approve" | "deny" | "answer",
"reason"?, "answer"?, "arguments"?}], ...}`` plus any chat-completions option (``stream``,
``stream_options``, ``model``, sampling). The paused reply carries on and the answer is
exactly a chat completion's (streamed or not). While calls are still undecided it pauses
again at once: its last chunk lists them in ``parley.pending_approvals``.

Clients that speak only OpenAI send the same decisions as the ``approvals`` extension
field of ``POST /v1/chat/completions`` with the ``conversation_id``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import Field
from starlette.responses import Response

from parley.api.branches import usable_model
from parley.api.chat import CHAT_ERRORS, STREAM, answer, read_json_object
from parley.api.completion_shapes import ChatCompletion
from parley.api.openapi import answers, json_body
from parley.api.state import AppState
from parley.api.wire_models import ApprovalDecision, options_model
from parley.errors import InvalidRequest

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

ApprovalsRequest = options_model(
    "ApprovalsRequest",
    "Decisions on the calls the paused reply waits on, and the chat-completions options "
    "of the rest of the reply.",
    drop=("messages", "conversation_id", "approvals"),
    decisions=(list[ApprovalDecision], Field(min_length=1, max_length=256)),
)


@router.post(
    "/{conversation_id}/approvals",
    openapi_extra=json_body(
        ApprovalsRequest,
        examples={"approve": {"decisions": [{"tool_call_id": "call_1", "decision": "approve"}]}},
    ),
    **answers(ChatCompletion, errors=CHAT_ERRORS, content=STREAM),
)
async def decide(request: Request, conversation_id: str) -> Response:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    data = await read_json_object(request, state)
    for name in ("messages", "conversation_id", "approvals"):
        if name in data:
            raise InvalidRequest(f"{name} does not belong here", param=name)
    if "decisions" not in data:
        raise InvalidRequest("send decisions: a list of decisions", param="decisions")
    data["approvals"] = data.pop("decisions")
    data["messages"] = []
    data["conversation_id"] = conversation_id
    if data.get("model") is None:
        data["model"] = await _model_of_paused(state, caller.owner, conversation_id)
    return await answer(state, request, caller, data)


async def _model_of_paused(state: AppState, owner: str, conversation_id: str) -> str | None:
    """The paused reply's model, while it is configured (None: the default)."""
    try:
        branch = await state.conversations.branch(owner, conversation_id)
    except LookupError:
        return None  # the service reports it
    return usable_model(
        state, branch[-1].model if branch and branch[-1].role == "assistant" else None
    )
