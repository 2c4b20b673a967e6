"""``GET /v1/models``: aliases, configured models and what the upstreams list."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from parley.api.openapi import answers
from parley.api.shapes import ModelList
from parley.api.state import AppState

router = APIRouter()


@router.get("/v1/models", tags=["models"], **answers(ModelList))
async def list_models(request: Request) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    await state.auth.owner(request)
    models = await state.registry.list_models()
    return {
        "object": "list",
        "data": [
            {"id": m.id, "object": "model", "created": 0, "owned_by": m.owned_by} for m in models
        ],
    }
