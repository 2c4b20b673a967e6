"""Rolling context routes under ``/v1/conversations/{id}``: read, compact, revert.

- ``GET .../summary``: ``{"conversation_id", "summary", "history"}``. ``summary`` is the
  current one (the newest not reverted) or null when there is none (200 either way: the
  conversation exists, it just has no summary); ``history`` is every earlier one, newest
  first, reverted ones too (``reverted_at`` set).
- ``POST .../compact`` with ``{"instructions"?, "model"?}``: summarise everything before
  the newest user message now and make it the current summary; answers
  ``{"conversation_id", "summary"}``. ``model`` writes the summary (default: the
  configured summary model, as for a turn). 400 ``nothing_to_summarise`` when there is
  nothing before the newest user message (or nothing new since the current summary and
  no instructions), 409 ``conversation_changed`` when the branch changed meanwhile, 502
  when the model failed or wrote an empty or over-long summary.
- ``DELETE .../summary``: revert the current summary; answers ``{"conversation_id",
  "reverted", "summary"}``: the one reverted (null when there was none) and the one
  current now (the previous one, or null).

A summary is ``{"id", "object": "conversation.summary", "text", "covers", "tokens",
"model", "instructions", "created_at", "reverted_at", "applies"}``: ``covers`` lists the
ids of the messages it replaces, oldest first; ``applies`` says whether they are still
exactly the start of the current branch (a summary is used only then).

Another owner's conversation answers 404 ``conversation_not_found``, like a missing one.
What does not belong here: planning and writing summaries (``conversations/outgoing.py``,
``conversations/rolling.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field

from parley.api.conversations import not_found
from parley.api.openapi import answers
from parley.api.shapes import Compacted, SummaryReverted, SummaryState
from parley.api.state import AppState
from parley.errors import Conflict, ParleyError
from parley.interceptors.protocol import TurnInfo
from parley.providers.registry import ResolvedModel
from parley.store.repository import StoredMessage
from parley.store.summaries import StoredSummary

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

SOURCE = "compact"
"""The ``source`` interceptors and the audit log see for a manual compaction."""


class CompactRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instructions: str | None = Field(default=None, max_length=4_000)
    """What the summary should keep or focus on."""
    model: str | None = Field(default=None, min_length=1, max_length=256)
    """The model that writes the summary (default: the configured summary model)."""


def summary_json(summary: StoredSummary, branch: Sequence[str]) -> dict[str, Any]:
    count = len(summary.covers)
    return {
        "id": summary.id,
        "object": "conversation.summary",
        "text": summary.text,
        "covers": list(summary.covers),
        "tokens": summary.tokens,
        "model": summary.model,
        "instructions": summary.instructions,
        "created_at": summary.created_at,
        "reverted_at": summary.reverted_at,
        "applies": 0 < count <= len(branch) and tuple(branch[:count]) == summary.covers,
    }


async def _branch(state: AppState, owner: str, conversation_id: str) -> list[StoredMessage]:
    try:
        return await state.conversations.branch(owner, conversation_id)
    except LookupError:
        raise not_found(conversation_id) from None


@router.get("/{conversation_id}/summary", **answers(SummaryState))
async def get_summary(request: Request, conversation_id: str) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    ids = [m.id for m in await _branch(state, owner, conversation_id)]
    rows = await state.summaries.history(owner, conversation_id)
    current = next((row for row in rows if row.reverted_at is None), None)
    return {
        "conversation_id": conversation_id,
        "summary": None if current is None else summary_json(current, ids),
        "history": [summary_json(row, ids) for row in rows if row is not current],
    }


@router.post("/{conversation_id}/compact", **answers(Compacted, errors=(409, 429, 502, 503, 504)))
async def compact(
    request: Request,
    conversation_id: str,
    body: Annotated[CompactRequest | None, Body()] = None,
) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    owner = caller.owner
    options = body or CompactRequest()
    branch = await _branch(state, owner, conversation_id)
    writer = state.registry.resolve(options.model) if options.model else None
    record = await state.outgoing.compact(
        owner=owner,
        conversation_id=conversation_id,
        model=_conversation_model(state, branch, writer),
        turn=TurnInfo(caller=caller, source=SOURCE, conversation_id=conversation_id),
        instructions=options.instructions,
        summary_model=writer,
    )
    rows = await state.summaries.history(owner, conversation_id)
    saved = next((row for row in rows if row.id == record.id), None)
    ids = [m.id for m in await _branch(state, owner, conversation_id)]  # 404 if deleted
    if saved is None:  # reverted or deleted meanwhile
        raise Conflict(
            "the summary changed while it was being written; read it again",
            param="conversation_id",
            code="conversation_changed",
        )
    return {"conversation_id": conversation_id, "summary": summary_json(saved, ids)}


@router.delete("/{conversation_id}/summary", **answers(SummaryReverted))
async def revert_summary(request: Request, conversation_id: str) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    ids = [m.id for m in await _branch(state, owner, conversation_id)]
    reverted = await state.summaries.current(owner, conversation_id)
    current = await state.summaries.revert(owner, conversation_id)
    if reverted is not None:
        rows = await state.summaries.history(owner, conversation_id)
        reverted = next((row for row in rows if row.id == reverted.id), reverted)
    return {
        "conversation_id": conversation_id,
        "reverted": None if reverted is None else summary_json(reverted, ids),
        "summary": None if current is None else summary_json(current, ids),
    }


def _conversation_model(
    state: AppState, branch: Sequence[StoredMessage], writer: ResolvedModel | None
) -> ResolvedModel:
    """The model that answered last on the branch (it sizes the summary); else the
    default model; else the one asked to write the summary."""
    last = next((m.model for m in reversed(branch) if m.role == "assistant" and m.model), None)
    if last is not None:
        try:
            return state.registry.resolve(last)
        except ParleyError:
            pass  # no longer configured
    try:
        return state.registry.resolve(None)
    except ParleyError:
        if writer is None:
            raise
        return writer
