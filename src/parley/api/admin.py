"""The interceptor chain and the audit log over HTTP.

- ``GET /v1/admin/interceptors``: the active chain, outermost first (admins only).
- ``GET /v1/audit``: audit rows, newest first, paginated with ``before_id``. A caller
  sees their own owner's rows; an admin sees everyone's, or one owner's with ``owner``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request

from parley.api.openapi import answers
from parley.api.shapes import AuditList, InterceptorList
from parley.api.state import AppState
from parley.errors import PermissionDenied

router = APIRouter(tags=["admin"])


@router.get("/v1/admin/interceptors", **answers(InterceptorList))
async def list_interceptors(request: Request) -> dict[str, Any]:
    """The interceptor chain as it runs: before-hooks in this order, after-hooks reversed."""
    state: AppState = request.app.state.parley
    await state.auth.admin(request)
    return {"object": "list", "data": state.interceptors.describe()}


@router.get("/v1/audit", **answers(AuditList))
async def list_audit(
    request: Request,
    kind: Literal["model", "tool", "detection"] | None = None,
    name: str | None = Query(default=None, max_length=256),
    conversation_id: str | None = Query(default=None, max_length=64),
    owner: str | None = Query(default=None, max_length=200, description="Admins only."),
    since: float | None = Query(
        default=None, ge=0, le=1e11, allow_inf_nan=False, description="Unix time, inclusive."
    ),
    until: float | None = Query(
        default=None, ge=0, le=1e11, allow_inf_nan=False, description="Unix time, exclusive."
    ),
    before_id: int | None = Query(
        default=None, ge=1, le=2**63 - 1, description="The next page (a row id)."
    ),
    limit: int = Query(default=100, ge=1, le=1000),
) -> dict[str, Any]:
    """Audit rows: one per model call, tool call and content detection."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    if caller.admin:
        scope = owner
    elif owner is not None and owner != caller.owner:
        raise PermissionDenied("only admins may read another owner's audit rows", param="owner")
    else:
        scope = caller.owner
    rows = await state.audit.query(
        owner=scope,
        kind=kind,
        name=name,
        conversation_id=conversation_id,
        since=since,
        until=until,
        before_id=before_id,
        limit=limit + 1,
    )
    page = rows[:limit]
    return {
        "object": "list",
        "data": page,
        "has_more": len(rows) > limit,
        "next_before_id": page[-1]["id"] if len(rows) > limit else None,
    }
