"""``/v1/assistants``: create, list (newest first, paginated), read, update, delete.

An assistant is named in the path by its id (``asst_...``) or by its name. Another
owner's assistant answers 404, exactly like one that does not exist; a name the owner
already uses answers 409. Besides the body's own validation (``conversations/
assistants.py``), the model must be one this server can resolve and each server tool
one it has (``mcp__...`` tools are accepted as they are: MCP servers come and go; a
missing one costs a chat a note), and each of ``mcp_servers`` a server that exists now.

What does not belong here: what the fields mean (``conversations/assistants.py``),
storage (``store/assistants.py``).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from parley.api.openapi import answers
from parley.api.pages import page
from parley.api.shapes import Assistant as AssistantShape
from parley.api.shapes import AssistantList, Deleted
from parley.api.state import AppState
from parley.conversations.assistants import Assistant, AssistantCreate, AssistantUpdate
from parley.errors import InvalidRequest, NotFound, ParleyError

router = APIRouter(prefix="/v1/assistants", tags=["assistants"])

MCP_PREFIX = "mcp__"


def _not_found(reference: str) -> NotFound:
    return NotFound(
        f"assistant {reference!r} not found", param="assistant_id", code="assistant_not_found"
    )


def assistant_json(assistant: Assistant) -> dict[str, Any]:
    return {
        "id": assistant.id,
        "object": "assistant",
        "name": assistant.name,
        "description": assistant.description,
        "system_prompt": assistant.system_prompt,
        "model": assistant.model,
        "sampling": assistant.sampling,
        "reasoning_effort": assistant.reasoning_effort,
        "tools": list(assistant.tools),
        "tool_policies": assistant.tool_policies,
        "knowledge_bases": list(assistant.knowledge_bases),
        "mcp_servers": list(assistant.mcp_servers),
        "memory": {
            "enabled": assistant.memory.enabled,
            "retrieval": assistant.memory.retrieval,
            "scope": assistant.memory.scope,
        },
        "regex_rules": [
            {
                "pattern": rule.pattern,
                "replacement": rule.replacement,
                "roles": list(rule.roles),
                "display_only": rule.display_only,
            }
            for rule in assistant.regex_rules
        ],
        "transformers": assistant.transformers,
        "generate_titles": assistant.generate_titles,
        "generate_suggestions": assistant.generate_suggestions,
        "created_at": assistant.created_at,
        "updated_at": assistant.updated_at,
    }


def _check_server_parts(state: AppState, fields: dict[str, Any]) -> None:
    """The model resolves and the server tools exist (checks the body cannot make)."""
    model = fields.get("model")
    if model is not None:
        try:
            state.registry.resolve(model)
        except ParleyError as exc:
            raise InvalidRequest(exc.message, param="model", code="model_not_found") from None
    for index, name in enumerate(fields.get("tools", ())):
        if name not in state.tools and not name.startswith(MCP_PREFIX):
            raise InvalidRequest(
                f"unknown server tool {name!r}", param=f"tools.{index}", code="unknown_tool"
            )
    for index, name in enumerate(fields.get("mcp_servers", ())):
        if not state.mcp.known(name):
            raise InvalidRequest(
                f"unknown MCP server {name!r} (GET /v1/mcp/servers lists them)",
                param=f"mcp_servers.{index}",
                code="unknown_mcp_server",
            )


@router.post("", **answers(AssistantShape, errors=(409,)))
async def create_assistant(request: Request, body: AssistantCreate) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    fields = body.fields()
    _check_server_parts(state, fields)
    return assistant_json(await state.assistants.create(owner, fields))


@router.get("", **answers(AssistantList))
async def list_assistants(
    request: Request,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = Query(default=None, max_length=64),
) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    rows = await state.assistants.list(owner, limit=limit + 1, after=after)
    return page(rows, limit, assistant_json)


@router.get("/{assistant_id}", **answers(AssistantShape))
async def get_assistant(request: Request, assistant_id: str) -> dict[str, Any]:
    """By id or by name."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    try:
        return assistant_json(await state.assistants.get(owner, assistant_id))
    except LookupError:
        raise _not_found(assistant_id) from None


@router.patch("/{assistant_id}", **answers(AssistantShape, errors=(409,)))
async def update_assistant(
    request: Request, assistant_id: str, body: AssistantUpdate
) -> dict[str, Any]:
    """Only the fields sent change, each replaced whole."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    fields = body.fields()
    _check_server_parts(state, fields)
    try:
        return assistant_json(await state.assistants.update(owner, assistant_id, fields))
    except LookupError:
        raise _not_found(assistant_id) from None


@router.delete("/{assistant_id}", **answers(Deleted))
async def delete_assistant(request: Request, assistant_id: str) -> Response:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    try:
        deleted = await state.assistants.delete(owner, assistant_id)
    except LookupError:
        raise _not_found(assistant_id) from None
    await state.memory.store.delete_all(owner, deleted)  # its own memories go with it
    body = {"id": deleted, "object": "assistant.deleted", "deleted": True}
    return Response(orjson.dumps(body), media_type="application/json")
