"""Branch routes under ``/v1/conversations/{id}``: regenerate, edit, select a version,
delete a version, fork.

Regenerate and edit answer exactly like ``POST /v1/chat/completions`` (streaming or not,
the same chunks, errors and extension fields); their bodies take the same sampling and
tool fields, every one optional (``messages`` and ``conversation_id`` come from the
route). Select, delete and fork answer with the conversation as ``GET`` shows it.

What does not belong here: what a regenerate or an edit sends to the model
(``conversations/service.py``), how versions are stored (``store/branches.py``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from parley.api.chat import CHAT_ERRORS, STREAM, answer, read_json_object
from parley.api.completion_shapes import ChatCompletion
from parley.api.conversations import conversation_body, json_response, not_found
from parley.api.openapi import answers, json_body
from parley.api.shapes import ConversationDetail
from parley.api.state import AppState
from parley.api.wire_models import Content, options_model
from parley.conversations.turns import Anchor
from parley.errors import InvalidRequest, NotFound, ParleyError

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_id: str | None = Field(default=None, max_length=40)
    """The last message to copy (default: the whole current branch)."""
    title: str | None = Field(default=None, min_length=1, max_length=500)


RegenerateRequest = options_model(
    "RegenerateRequest",
    "The chat-completions options of a regenerated reply (all optional; the model is "
    "that of the reply redone while it is configured).",
    drop=("messages", "conversation_id"),
)
EditRequest = options_model(
    "EditRequest",
    "The user message's new content, and the chat-completions options of its reply.",
    drop=("messages", "conversation_id"),
    content=(str | list[Content], Field(description="As a chat message's content.")),
)
_LIKE_CHAT = answers(ChatCompletion, errors=CHAT_ERRORS, content=STREAM)


def _message_not_found(message_id: str) -> NotFound:
    return NotFound(
        f"message {message_id!r} not found", param="message_id", code="message_not_found"
    )


@router.post(
    "/{conversation_id}/messages/{message_id}/regenerate",
    openapi_extra=json_body(
        RegenerateRequest, required=False, examples={"answer": {}, "streamed": {"stream": True}}
    ),
    **_LIKE_CHAT,
)
async def regenerate(request: Request, conversation_id: str, message_id: str) -> Response:
    """A new version of an assistant message (what followed it is kept), or a new reply
    to a user message."""
    return await _answer_at(request, conversation_id, message_id, edit=False)


@router.post(
    "/{conversation_id}/messages/{message_id}/edit",
    openapi_extra=json_body(
        EditRequest,
        examples={
            "answer": {"content": "Name a colour, in one word."},
            "streamed": {"content": "Name a colour, in one word.", "stream": True},
        },
    ),
    **_LIKE_CHAT,
)
async def edit(request: Request, conversation_id: str, message_id: str) -> Response:
    """A new version of a user message (``content``, as in a chat message) and a new
    reply to it."""
    return await _answer_at(request, conversation_id, message_id, edit=True)


async def _answer_at(
    request: Request, conversation_id: str, message_id: str, *, edit: bool
) -> Response:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    data = await read_json_object(request, state, empty=None if edit else {})
    for name in ("messages", "conversation_id"):
        if name in data:
            raise InvalidRequest(f"{name} comes from the route here", param=name)
    if edit:
        if "content" not in data:
            raise InvalidRequest("send the message's new content", param="content")
        data["messages"] = [{"role": "user", "content": data.pop("content")}]
    else:
        data["messages"] = []
    if data.get("model") is None:
        data["model"] = await _model_of(state, caller.owner, conversation_id, message_id)
    return await answer(
        state,
        request,
        caller,
        data,
        conversation_id=conversation_id,
        anchor=Anchor(message_id, edit=edit),
        store=True,
    )


async def _model_of(
    state: AppState, owner: str, conversation_id: str, message_id: str
) -> str | None:
    """The model that wrote the reply being redone, when it still exists (a regenerate
    without ``model`` uses it); None means the default."""
    try:
        path, _ = await state.conversations.around(owner, conversation_id, message_id)
    except LookupError:
        return None  # the service reports it
    return usable_model(state, path[-1].model if path[-1].role == "assistant" else None)


def usable_model(state: AppState, model: str | None) -> str | None:
    """``model`` while it still resolves (gone from the configuration since: None, and
    the default answers)."""
    if model is None:
        return None
    try:
        state.registry.resolve(model)
    except ParleyError:
        return None
    return model


@router.post("/{conversation_id}/messages/{message_id}/select", **answers(ConversationDetail))
async def select_version(request: Request, conversation_id: str, message_id: str) -> Response:
    """Make this version the selected one at its position; the branch continues where it
    was last left below it."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    await _owned(state, owner, conversation_id)
    try:
        await state.conversations.select_version(owner, conversation_id, message_id)
    except LookupError:
        raise _message_not_found(message_id) from None
    return json_response(await conversation_body(state, owner, conversation_id))


@router.delete("/{conversation_id}/messages/{message_id}", **answers(ConversationDetail))
async def delete_version(request: Request, conversation_id: str, message_id: str) -> Response:
    """Delete one version and everything after it. A reply being generated below it is
    stopped first."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    await _owned(state, owner, conversation_id)
    tree = await state.conversations.tree(owner, conversation_id)
    if message_id not in tree.rows:
        raise _message_not_found(message_id)
    running = state.service.running_message(owner, conversation_id)
    if running is not None and running in tree.subtree(message_id):
        await state.service.cancel(owner, conversation_id)
    try:
        await state.conversations.delete_version(owner, conversation_id, message_id)
    except LookupError:
        raise _message_not_found(message_id) from None
    return json_response(await conversation_body(state, owner, conversation_id))


@router.post(
    "/{conversation_id}/fork",
    openapi_extra=json_body(ForkRequest, required=False, examples={"copy": {"title": "A copy"}}),
    **answers(ConversationDetail, status=201, errors=(413, 415)),
)
async def fork(request: Request, conversation_id: str) -> Response:
    """A new conversation with a copy of the current branch (up to ``message_id``)."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    data = await read_json_object(request, state, empty={})
    try:
        body = ForkRequest.model_validate(data)
    except ValueError as exc:
        raise InvalidRequest(f"bad fork request: {exc}") from None
    await _owned(state, owner, conversation_id)
    try:
        fork_id = await state.conversations.fork(
            owner, conversation_id, body.message_id, body.title
        )
    except LookupError:
        raise _message_not_found(body.message_id or "") from None
    return json_response(await conversation_body(state, owner, fork_id), status=201)


async def _owned(state: AppState, owner: str, conversation_id: str) -> None:
    try:
        await state.conversations.get_conversation(owner, conversation_id)
    except LookupError:
        raise not_found(conversation_id) from None
