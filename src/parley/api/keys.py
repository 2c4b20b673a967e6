"""``/v1/keys``: API keys over HTTP, for admins (what ``parley keys`` does).

``GET`` lists every key (id, owner, name, prefix, admin, created_at, revoked_at: never
the key or its hash). ``POST {"name", "admin"?, "owner"?}`` makes a key and answers it
once, in ``key`` (201; ``owner`` defaults to the caller's own). ``DELETE /{key_id}``
revokes the active key with that id or prefix (404 when there is none): like ``parley
keys revoke``, its next request fails, its browser sessions end, and its running replies
end within ``auth.revocation_check_seconds`` on every instance. Anyone else gets 403
``admin_required``.

The first key made here ends keyless loopback use: from then on every request, this
browser's too, needs a key or a session.

These answers are never kept for an ``Idempotency-Key`` (``api/idempotency.py``): a
new key would be stored in the clear.

What does not belong here: making and storing keys (``api/auth.py``'s ``issue_key``,
``store/repository.py``'s ``KeyStore``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi import Path as PathParameter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from parley.api.auth import issue_key, mark_keys_changed
from parley.api.conversations import json_response
from parley.api.openapi import answers
from parley.api.pages import page
from parley.api.shapes import ApiKey, ApiKeyList, NewApiKey
from parley.api.state import AppState
from parley.errors import NotFound
from parley.store.keys import StoredKey

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200, description="A label for the key.")
    admin: bool = Field(default=False, description="May do what admins do.")
    owner: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Whose conversations the key reaches. Default: the caller's owner.",
    )


def key_json(key: StoredKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "object": "api_key",
        "owner": key.owner,
        "name": key.name,
        "prefix": key.prefix,
        "admin": key.admin,
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
    }


@router.get("", **answers(ApiKeyList))
async def list_keys(request: Request) -> dict[str, Any]:
    """Every key, oldest first (admins)."""
    state: AppState = request.app.state.parley
    await state.auth.admin(request)
    keys = await state.keys.list()
    return page(keys, len(keys), key_json)


@router.post("", **answers(NewApiKey, status=201))
async def create_key(request: Request, body: KeyCreate) -> Response:
    """Make a key; the answer is the only place it is shown (admins)."""
    state: AppState = request.app.state.parley
    caller = await state.auth.admin(request)
    owner = body.owner or caller.owner
    key, stored = await issue_key(state.keys, owner, body.name, admin=body.admin)
    _keys_changed(state)
    response = json_response(key_json(stored) | {"key": key}, status=201)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.delete("/{key_id}", **answers(ApiKey))
async def revoke_key(
    request: Request,
    key_id: str = PathParameter(max_length=64, description="The key's id or prefix."),
) -> dict[str, Any]:
    """Revoke a key: its next request fails and its sessions end (admins)."""
    state: AppState = request.app.state.parley
    await state.auth.admin(request)
    if not await state.keys.revoke(key_id):
        raise NotFound(f"no active key {key_id!r}", param="key_id", code="key_not_found")
    _keys_changed(state)
    revoked = [k for k in await state.keys.list() if key_id in (k.id, k.prefix)]
    return key_json(max(revoked, key=lambda k: k.revoked_at or 0.0))


def _keys_changed(state: AppState) -> None:
    """This instance reads the keys again at once; others (and this one's marker) see
    the change as ``parley keys`` makes them see it."""
    mark_keys_changed(state.settings.data_dir)
    state.auth.forget()
