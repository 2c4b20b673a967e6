"""``/v1/session``: who a browser is, and signing it in and out.

- ``GET`` always answers 200: whether keys are required, whether this request is signed
  in (by a key in a header, the session cookie, or keyless loopback use) and as whom.
  A cookie that no longer signs in (signed out, expired, its key revoked) is cleared.
- ``POST {"api_key"}`` exchanges an active key for a session of
  ``web.session_ttl_seconds``: a random token in the ``parley_session`` cookie
  (HttpOnly, SameSite=Strict, Secure over https), of which only the SHA-256 is stored
  (``store/sessions.py``). A wrong key is 401; with no key in existence there is nothing
  to sign in to (400 ``sign_in_not_needed``). A browser page of another origin may not
  post it (403 ``csrf_origin_mismatch``). A session the request already held ends.
- ``DELETE`` ends the request's session and clears the cookie; it answers as ``GET``
  would without the cookie.

These answers are never kept for an ``Idempotency-Key`` (``api/idempotency.py``): they
set the cookie's token, which is stored nowhere.

What does not belong here: the cookie, its lookups and the same-origin rule
(``api/cookies.py``), accepting the cookie on other routes (``api/auth.py``).
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from parley.api.auth import Identity, presented_key
from parley.api.chat import read_body
from parley.api.conversations import json_response
from parley.api.cookies import (
    COOKIE,
    check_not_cross_site,
    check_same_origin,
    hash_token,
    session_token,
    set_cookie,
)
from parley.api.errors import validation_error
from parley.api.openapi import answers, json_body, public
from parley.api.shapes import Session
from parley.api.state import AppState
from parley.errors import AuthenticationFailed, InvalidRequest, PermissionDenied

router = APIRouter(prefix="/v1/session", tags=["session"])

MAX_BODY_BYTES = 4096


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    api_key: str = Field(min_length=1, max_length=512, description="An active API key.")


@router.get("", openapi_extra=public(), **answers(Session))
async def get_session(request: Request) -> Response:
    """Whether keys are required, and whether (and as whom) this request is signed in."""
    state: AppState = request.app.state.parley
    identity = await _identity(state, request)
    response = _answer(await state.auth.keys_required(), identity)
    stale = COOKIE in request.cookies and (identity is None or identity.session is None)
    if stale and not presented_key(request):
        response.headers.append("set-cookie", set_cookie(request, "", 0))
    return response


@router.post(
    "",
    openapi_extra={**public(), **json_body(SignIn)},
    **answers(Session, errors=(401, 403, 413)),
)
async def sign_in(request: Request) -> Response:
    """Exchange an API key for a session cookie."""
    state: AppState = request.app.state.parley
    check_not_cross_site(request)
    body = _sign_in_body(await read_body(request, MAX_BODY_BYTES))
    if not await state.auth.keys_required():
        raise InvalidRequest(
            "no API key exists yet: this server serves clients on its own machine without "
            "one, so there is nothing to sign in to",
            param="api_key",
            code="sign_in_not_needed",
        )
    caller = await state.auth.sign_in_caller(body.api_key)
    await _end_session(state, request)
    token = secrets.token_urlsafe(32)
    ttl = state.settings.web.session_ttl_seconds
    session = await state.sessions.create(hash_token(token), caller.key_id, ttl)
    response = _answer(True, Identity(caller, session))
    response.headers.append("set-cookie", set_cookie(request, token, max(1, math.ceil(ttl))))
    return response


@router.delete("", openapi_extra=public(), **answers(Session, errors=(403,)))
async def sign_out(request: Request) -> Response:
    """End this browser's session and clear its cookie."""
    state: AppState = request.app.state.parley
    if session_token(request) is not None:
        check_same_origin(request)
    await _end_session(state, request)
    identity = await _identity(state, request, cookie=False)
    response = _answer(await state.auth.keys_required(), identity)
    response.headers.append("set-cookie", set_cookie(request, "", 0))
    return response


def session_json(keys_required: bool, identity: Identity | None) -> dict[str, Any]:
    caller = None if identity is None else identity.caller
    keyed = identity is not None and not identity.keyless
    session = None if identity is None else identity.session
    return {
        "object": "session",
        "keys_required": keys_required,
        "signed_in": caller is not None,
        "owner": None if caller is None else caller.owner,
        "key_id": caller.key_id if caller is not None and keyed else None,
        "key_name": caller.key_name if caller is not None and keyed else None,
        "admin": caller is not None and caller.admin,
        "expires_at": None if session is None else session.expires_at,
    }


def _answer(keys_required: bool, identity: Identity | None) -> Response:
    response = json_response(session_json(keys_required, identity))
    response.headers["Cache-Control"] = "no-store"
    return response


async def _identity(state: AppState, request: Request, *, cookie: bool = True) -> Identity | None:
    """Who the request is signed in as, or None."""
    try:
        return await state.auth.identify(request, cookie=cookie)
    except (AuthenticationFailed, PermissionDenied):
        return None


async def _end_session(state: AppState, request: Request) -> None:
    token = session_token(request)
    if token is not None:
        token_hash = hash_token(token)
        await state.sessions.delete(token_hash)
        state.auth.forget_session(token_hash)


def _sign_in_body(raw: bytes) -> SignIn:
    try:
        return SignIn.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc) from None
