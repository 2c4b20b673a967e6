"""``GET /v1/models`` (aliases, configured models and what the upstreams list) and
``GET /v1/models/{id}`` (one of them, or a name this server would serve)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.convertors import Convertor, register_url_convertor

from parley.api.openapi import answers
from parley.api.shapes import ModelEntry, ModelList
from parley.api.state import AppState
from parley.errors import NotFound, ParleyError

router = APIRouter()


@router.get("/v1/models", tags=["models"], **answers(ModelList))
async def list_models(request: Request) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    await state.auth.owner(request)
    models = await state.registry.list_models()
    return {"object": "list", "data": [_entry(m.id, m.owned_by) for m in models]}


class _ModelId(Convertor[str]):
    """A model id: slashes inside (``provider/model``), never at its ends (a trailing
    slash is a 404 here as on every route, answered before authentication)."""

    regex = r"[^/](?:.*[^/])?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("model_id", _ModelId())


@router.get("/v1/models/{model:model_id}", tags=["models"], **answers(ModelEntry, errors=(404,)))
async def get_model(model: str, request: Request) -> dict[str, Any]:
    """A model as ``GET /v1/models`` lists it; a name not listed that this server would
    still serve (an upstream's model asked for by its own name) is described too."""
    state: AppState = request.app.state.parley
    await state.auth.owner(request)
    for listed in await state.registry.list_models():
        if listed.id == model:
            return _entry(listed.id, listed.owned_by)
    try:
        resolved = state.registry.resolve(model)
    except ParleyError:
        resolved = None
    if resolved is None or not model:
        raise NotFound(
            f"The model {model[:200]!r} does not exist", param="model", code="model_not_found"
        )
    return _entry(model, resolved.provider.name)


def _entry(model_id: str, owned_by: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": owned_by}
