"""The served OpenAPI schema, made to say what the server does.

FastAPI writes most of ``/openapi.json`` from the routes; ``install`` finishes it:

- **Security.** Every operation takes a key as ``Authorization: Bearer <key>`` (the
  ``bearer`` scheme) or ``x-api-key`` (``apiKey``), except those marked ``public()``.
  Keyless loopback use, which exists only while no key does, is not a scheme: it is the
  machine's own user, and is described in the schema's description.
- **Errors** are the OpenAI error object (``ErrorResponse``). FastAPI documents 422
  "Validation Error" for every route; Parley answers bad input with 400, OpenAI-style
  (``api/errors.py``), so 422 is replaced by 400. Every secured operation may answer 401
  and 403 (a key that is missing or wrong; a key that may not do this, or keyless access
  from a page elsewhere), one with parameters or a body 400, one with path parameters
  404. A route names its other failures itself: ``answers(..., errors=(409,))``. On
  Langchain-Chatchat's routes (``is_chatchat_path``) a failure also carries Chatchat's
  ``code`` and ``msg`` (``ChatchatErrorResponse``); on Anthropic's ``/v1/messages`` it is
  Anthropic's error body (``AnthropicErrorResponse``).
- **Idempotency-Key**: every POST and PATCH takes the header (``api/idempotency.py``),
  and may answer 409 and 422 for it (but those it does not cover: ``NOT_COVERED``).
- **Bodies declared by hand** (routes that read their own body, to authenticate first or
  to take several shapes) embed pydantic schemas whose ``$defs`` do not resolve in an
  OpenAPI document: they are moved into ``components/schemas``.

What belongs here: the helpers routes use to document what they answer (``answers``,
``json_body``, ``event_stream``, ``public``) and the finishing of the document. What does
not: the shapes of the answers (``api/shapes.py``, ``api/completion_shapes.py``,
``api/chatchat/shapes.py``), mapping errors to responses (``api/errors.py``).
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.api.anthropic_shapes import AnthropicErrorResponse
from parley.api.errors import is_anthropic_path, is_chatchat_path
from parley.api.idempotency import NOT_COVERED

REF = "#/components/schemas/{model}"
"""Where a schema embedded by hand refers to its parts."""
_DEFS_REF = "#/$defs/"
_COMPONENTS_REF = "#/components/schemas/"
SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"apiKey": []}]
METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})

FAILURES: dict[int, str] = {
    400: "Bad request: a parameter or the body is invalid; `param` names the field "
    "(`messages.0.role`).",
    401: "No valid API key: send `Authorization: Bearer <key>` or `x-api-key` (a browser: "
    "the session cookie of `POST /v1/session`, while its key is active).",
    403: "Not allowed: this needs an admin key, keyless loopback access came from a page "
    "elsewhere (Host or Origin not loopback), or a change signed in by the session cookie "
    "came from a page of another origin (`csrf_origin_mismatch`).",
    404: "Not found. Another owner's ids answer exactly like missing ones.",
    408: "The body did not arrive within `server.body_timeout_seconds`; the connection closes.",
    409: "Conflict with the current state (the code says which).",
    411: "An upload without Content-Length: its size is checked before it is read.",
    413: "The body is larger than the server takes.",
    422: "This `Idempotency-Key` was used with another request (`idempotency_key_reused`).",
    415: "The body must be `application/json`.",
    429: "Too many requests in flight for this key, or the upstream rate-limits (Retry-After).",
    502: "The upstream failed or gave an unusable answer.",
    503: "Overloaded, or the upstream is unavailable; try again after Retry-After seconds.",
    504: "The upstream timed out.",
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Sent again with the same request (by the same API key, within "
    "`server.idempotency_ttl_seconds`), it gets the first answer instead of a second run: "
    "joined while it runs, replayed after (`Idempotent-Replayed: true`). 409 while it runs "
    "elsewhere (`idempotency_key_in_use`) or when a restart cut it off "
    "(`idempotency_key_interrupted`); 422 under another request.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}


class ErrorObject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """The OpenAI error object, the body of every failure."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorObject


class ChatchatErrorResponse(BaseModel):
    """On Langchain-Chatchat's routes: the OpenAI error object, with Chatchat's ``code``
    (the HTTP status) and ``msg`` (the message) beside it, where its client looks."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorObject
    code: int
    msg: str


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A reference to ``model``'s schema, carrying its definitions (moved into the
    components when the document is finished)."""
    schema = model.model_json_schema(ref_template=REF)
    defs = schema.pop("$defs", {})
    return {"$ref": REF.format(model=model.__name__), "$defs": {**defs, model.__name__: schema}}


def failure(status: int, *, chatchat: bool = False, anthropic: bool = False) -> dict[str, Any]:
    """The documented response of one failure status (``chatchat``: on Chatchat's routes;
    ``anthropic``: on Anthropic's)."""
    body: type[BaseModel] = ErrorResponse
    if chatchat:
        body = ChatchatErrorResponse
    elif anthropic:
        body = AnthropicErrorResponse
    response: dict[str, Any] = {
        "description": FAILURES[status],
        "content": {"application/json": {"schema": model_schema(body)}},
    }
    if status in (429, 503):
        response["headers"] = _RETRY_AFTER
    return response


def answers(
    model: type[BaseModel] | None = None,
    *,
    status: int = 200,
    errors: Iterable[int] = (),
    description: str = "Successful Response",
    content: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for a route decorator: ``model`` (JSON) answered with ``status``,
    or ``content`` by media type, and the failures beyond those every operation shares
    (see the module's docstring). The schema is documentation only: the route's own
    code writes the body."""
    success: dict[str, Any] = {"description": description}
    media: dict[str, Any] = {}
    if model is not None:
        media["application/json"] = {"schema": model_schema(model)}
    media.update(content or {})
    if media:
        success["content"] = media
    responses: dict[int | str, dict[str, Any]] = {status: success}
    responses.update({code: failure(code) for code in errors})
    return {"status_code": status, "response_model": None, "responses": responses}


def event_stream(*events: type[BaseModel], description: str) -> dict[str, Any]:
    """A ``text/event-stream`` whose ``data:`` lines hold one of ``events`` as JSON; the
    stream may end with ``data: [DONE]`` and carry ``: ping`` comments."""
    json_data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"anyOf": [model_schema(event) for event in events]},
    }
    return {
        "text/event-stream": {
            "itemSchema": {
                "description": description,
                "type": "object",
                "required": ["data"],
                "properties": {
                    "data": {"anyOf": [{"type": "string", "const": "[DONE]"}, json_data]},
                    "event": {"type": "string"},
                },
            },
        }
    }


FILES = {"type": "array", "items": {"type": "string", "format": "binary"}}
"""A multipart field of uploaded files."""


def multipart_body(required: Iterable[str], **properties: dict[str, Any]) -> dict[str, Any]:
    """An operation's ``multipart/form-data`` request body: the form's fields."""
    schema = {"type": "object", "required": list(required), "properties": properties}
    return {"required": True, "content": {"multipart/form-data": {"schema": schema}}}


def json_body(
    model: type[BaseModel], *, required: bool = True, examples: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads its JSON body itself, with ``examples``
    (name -> body) for the reference and for clients."""
    media: dict[str, Any] = {"schema": model_schema(model)}
    if examples:
        media["examples"] = {name: {"value": value} for name, value in examples.items()}
    return {"requestBody": {"required": required, "content": {"application/json": media}}}


def public() -> dict[str, Any]:
    """``openapi_extra`` for a route that needs no key."""
    return {"security": []}


def install(app: FastAPI) -> None:
    """Serve the finished document, built once, on the first request for it, in a
    worker thread: building it takes about a second of Python, which on the event loop
    held every other request (and made admission refuse them for the loop's lag)."""
    build: Callable[[], dict[str, Any]] = app.openapi
    lock = threading.Lock()

    def openapi() -> dict[str, Any]:
        with lock:
            if app.openapi_schema is None:
                app.openapi_schema = finish(build())
            return app.openapi_schema

    async def serve(request: Request) -> Response:
        return JSONResponse(app.openapi_schema or await asyncio.to_thread(openapi))

    app.openapi = openapi  # type: ignore[method-assign]
    path = app.openapi_url
    app.router.routes[:] = [
        Route(path, serve, include_in_schema=False)
        if isinstance(route, Route) and route.path == path
        else route
        for route in app.router.routes
    ]


def finish(document: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document with Parley's security, errors and hoisted definitions."""
    document = copy.deepcopy(document)  # it shares dictionaries with the routes
    components = document.setdefault("components", {})
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "A Parley API key."},
        "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
    }
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            if method in METHODS:
                idempotent = method in ("post", "patch") and path not in NOT_COVERED
                _finish_operation(
                    operation,
                    idempotent=idempotent,
                    chatchat=is_chatchat_path(path),
                    anthropic=is_anthropic_path(path),
                )
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    found: dict[str, Any] = {}
    _hoist(document, found)
    for name, schema in found.items():
        if schemas.setdefault(name, schema) != schema:
            raise RuntimeError(f"two different schemas are named {name!r} in the API")
    return document


def _finish_operation(
    operation: dict[str, Any], *, idempotent: bool, chatchat: bool, anthropic: bool
) -> None:
    """Security and the shared failures; ``idempotent``: the operation takes an
    ``Idempotency-Key`` (POST and PATCH: ``api/idempotency.py``); ``chatchat``: it is one
    of Chatchat's routes, whose failures carry ``code`` and ``msg`` too."""
    responses: dict[str, Any] = operation.setdefault("responses", {})
    if responses.get("422", {}).get("description") == "Validation Error":
        del responses["422"]  # FastAPI's: Parley answers 400 (api/errors.py)
    parameters = operation.get("parameters", [])
    shared: list[int] = []
    if idempotent:
        operation["parameters"] = parameters = [*parameters, IDEMPOTENCY_KEY]
        shared += [409, 422]
    if parameters or "requestBody" in operation:
        shared.append(400)
    if operation.setdefault("security", SECURITY):
        shared += [401, 403]
    if any(p.get("in") == "path" for p in parameters):
        shared.append(404)
    for status in shared:
        responses.setdefault(str(status), failure(status))
    if chatchat or anthropic:  # the shared failures and those the route names (``answers``)
        for name, response in responses.items():
            code = int(name) if name.isdigit() else 0
            if code in FAILURES and response == failure(code):
                responses[name] = failure(code, chatchat=chatchat, anthropic=anthropic)
    operation["responses"] = dict(sorted(responses.items()))


def _hoist(node: Any, found: dict[str, Any]) -> None:
    """Collect every ``$defs`` into ``found`` and point its references to the components."""
    if isinstance(node, list):
        for item in node:
            _hoist(item, found)
        return
    if not isinstance(node, dict):
        return
    for name, schema in node.pop("$defs", {}).items():
        _hoist(schema, found)
        if found.setdefault(name, schema) != schema:
            raise RuntimeError(f"two different schemas are named {name!r} in the API")
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS_REF):
        node["$ref"] = _COMPONENTS_REF + ref.removeprefix(_DEFS_REF)
    for value in node.values():
        _hoist(value, found)
