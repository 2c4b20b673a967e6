"""``/v1/memories``: the caller's long-term memories: list (newest first, paginated),
create, read, edit, delete, search.

A memory belongs to one of the caller's assistants (``assistant_id``) or to none
(``assistant_id`` null: global). An ``assistant_id`` sent in a body or a query is looked
up among the caller's assistants, by id or by name, and stored as the id; one the caller
does not have answers 404 ``assistant_not_found``. Another owner's memory answers 404
``memory_not_found``, exactly like one that does not exist.

- ``GET ?assistant_id=`` keeps one assistant's memories, ``?scope=global`` the global
  ones (not both); neither: all of them.
- ``POST`` answers 201 with the memory; the same text again in the same scope answers
  the memory already kept.
- ``POST /search`` ``{query, assistant_id?, limit?}`` searches one scope (global when
  ``assistant_id`` is null) as memory retrieval does, and answers the memories best
  first, each with its fused ``score``.

What does not belong here: storage, ranking and embedding (``memory/``).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from parley.api.openapi import answers
from parley.api.pages import page
from parley.api.shapes import Deleted, MemoryHits, MemoryList, MemoryRecord
from parley.api.state import AppState
from parley.errors import InvalidRequest, NotFound
from parley.memory.store import GLOBAL, MAX_TEXT_CHARS, Memory

router = APIRouter(prefix="/v1/memories", tags=["memories"])

MAX_SEARCH_RESULTS = 50


class MemoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    assistant_id: str | None = Field(default=None, min_length=1, max_length=200)
    """An assistant's id or name; null: a global memory."""


class MemoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)


class MemorySearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=2_000)
    assistant_id: str | None = Field(default=None, min_length=1, max_length=200)
    limit: int = Field(default=6, ge=1, le=MAX_SEARCH_RESULTS)


def memory_json(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.id,
        "object": "memory",
        "text": memory.text,
        "assistant_id": memory.assistant_id,
        "source": memory.source,
        "conversation_id": memory.conversation_id,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
    }


def _not_found(memory_id: str) -> NotFound:
    return NotFound(f"memory {memory_id!r} not found", param="memory_id", code="memory_not_found")


async def _scope(state: AppState, owner: str, assistant: str | None) -> str:
    """The memory scope of an ``assistant_id`` as sent (id or name; None: global)."""
    if assistant is None:
        return GLOBAL
    try:
        return (await state.assistants.get(owner, assistant)).id
    except LookupError:
        raise NotFound(
            f"assistant {assistant!r} not found",
            param="assistant_id",
            code="assistant_not_found",
        ) from None


@router.get("", **answers(MemoryList, errors=(404,)))
async def list_memories(
    request: Request,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = Query(default=None, max_length=64),
    assistant_id: str | None = Query(default=None, min_length=1, max_length=200),
    scope: Literal["global"] | None = Query(default=None),
) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    if assistant_id is not None and scope is not None:
        raise InvalidRequest("send assistant_id or scope=global, not both", param="scope")
    chosen = GLOBAL if scope is not None else None
    if assistant_id is not None:
        chosen = await _scope(state, owner, assistant_id)
    rows = await state.memory.store.list(owner, limit=limit + 1, after=after, scope=chosen)
    return page(rows, limit, memory_json)


@router.post("", **answers(MemoryRecord, status=201, errors=(404,)))
async def create_memory(request: Request, body: MemoryCreate) -> Response:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    scope = await _scope(state, owner, body.assistant_id)
    memory = await state.memory.remember(owner, scope, body.text, source="api")
    return Response(
        orjson.dumps(memory_json(memory)), status_code=201, media_type="application/json"
    )


@router.post("/search", **answers(MemoryHits, errors=(404,)))
async def search_memories(request: Request, body: MemorySearch) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    scope = await _scope(state, owner, body.assistant_id)
    found = await state.memory.recall(owner, scope, body.query, top_k=body.limit)
    return {
        "object": "list",
        "data": [memory_json(hit.memory) | {"score": hit.score} for hit in found],
    }


@router.get("/{memory_id}", **answers(MemoryRecord))
async def get_memory(request: Request, memory_id: str) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    try:
        return memory_json(await state.memory.store.get(owner, memory_id))
    except LookupError:
        raise _not_found(memory_id) from None


@router.patch("/{memory_id}", **answers(MemoryRecord))
async def update_memory(request: Request, memory_id: str, body: MemoryPatch) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    try:
        return memory_json(await state.memory.update(owner, memory_id, body.text))
    except LookupError:
        raise _not_found(memory_id) from None


@router.delete("/{memory_id}", **answers(Deleted))
async def delete_memory(request: Request, memory_id: str) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    try:
        deleted = await state.memory.store.delete(owner, memory_id)
    except LookupError:
        raise _not_found(memory_id) from None
    return {"id": deleted, "object": "memory.deleted", "deleted": True}
