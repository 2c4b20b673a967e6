"""Mapping errors to HTTP: the OpenAI error object, the right status, in one place.

``{"error": {"message", "type", "param", "code"}}`` for every failure, including
unknown routes, wrong methods and request validation. 429 and 503 carry Retry-After;
an upstream failure of a chat answer says ``x-should-retry`` (``api/chat.py``).
A body FastAPI refuses before any dependency runs (not JSON, not UTF-8, invalid) is
answered 401 or 403 when the caller is not let in: authentication comes first.
Messages never include request headers or provider keys.

On Langchain-Chatchat's routes (``is_chatchat_path``) the body also carries Chatchat's
``code`` (the HTTP status) and ``msg`` (the message) beside ``error``: Chatchat's client
(``ApiRequest``, ``check_error_msg``) sees a failure only there, and the OpenAI SDKs on
``/chat/chat/completions`` still read ``error``. ``ErrorResponse`` decides it when it is
sent, from the request's path, so the refusals of the middlewares (admission,
idempotency), which hold no request, get it too. The status stays the same.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from parley.api.anthropic_shapes import error_body as anthropic_error
from parley.api.sse import error_body
from parley.errors import InvalidRequest, ParleyError

log = logging.getLogger(__name__)


CHATCHAT_ROUTES = ("/chat", "/knowledge_base", "/tools", "/other", "/server")
"""The roots of Langchain-Chatchat's routes: its client reads failures as ``code``/``msg``."""


ANTHROPIC_MESSAGES = "/v1/messages"
"""Anthropic's route: its failures are Anthropic's error bodies (``anthropic_shapes``)."""


def is_anthropic_path(path: str) -> bool:
    """Whether ``path`` is Anthropic's (``/v1/messages`` and its ``count_tokens``)."""
    return path == ANTHROPIC_MESSAGES or path.startswith(ANTHROPIC_MESSAGES + "/")


def is_chatchat_path(path: str) -> bool:
    """Whether ``path`` is one of Chatchat's routes (or a path under one of its roots,
    an unknown one too: Chatchat's client is what calls there)."""
    return any(path == root or path.startswith(root + "/") for root in CHATCHAT_ROUTES)


class ErrorResponse(Response):
    """The OpenAI error body of ``error``; sent on a Chatchat route (``is_chatchat_path``),
    with ``code`` and ``msg`` added at the top level."""

    media_type = "application/json"

    def __init__(self, error: ParleyError, headers: dict[str, str]) -> None:
        self.error = error
        super().__init__(
            error_body(error.message, error.type, error.code, error.param),
            status_code=error.status,
            headers=headers,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_chatchat_path(scope["path"]):
            body = {**orjson.loads(self.body), "code": self.status_code, "msg": self.error.message}
            self.body = orjson.dumps(body)
            self.headers["content-length"] = str(len(self.body))
        elif scope["type"] == "http" and is_anthropic_path(scope["path"]):
            self.body = orjson.dumps(anthropic_error(self.error.message, self.error.type))
            self.headers["content-length"] = str(len(self.body))
        await super().__call__(scope, receive, send)


def error_response(error: ParleyError, *, retry: bool | None = None) -> ErrorResponse:
    """``retry``: whether a client should send the request again, as the OpenAI SDKs
    read it (``x-should-retry``, which they obey over their own rules; None: unsaid)."""
    headers: dict[str, str] = {}
    if error.retry_after is not None or error.status in (429, 503):
        headers["retry-after"] = str(max(1, math.ceil(error.retry_after or 1)))
    if retry is not None:
        headers["x-should-retry"] = "true" if retry else "false"
    return ErrorResponse(error, headers)


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}


def validation_error(exc: ValidationError | RequestValidationError) -> InvalidRequest:
    """The first validation problem, naming the field as ``messages.0.role``."""
    errors: list[Any] = list(exc.errors())
    if not errors:
        return InvalidRequest("invalid request")
    first = errors[0]
    location = [str(part) for part in first.get("loc", ()) if part not in ("body",)]
    # unions add the member's type to the path: keep the field path only
    location = [part for part in location if part not in _TYPE_TAGS and "[" not in part]
    param = ".".join(location) or None
    message = first.get("msg", "invalid value")
    if param:
        message = f"{param}: {message}"
    return InvalidRequest(message, param=param)


async def _stranger(request: Request) -> ParleyError | None:
    """Why the caller is refused (401, 403), or None. FastAPI parses a body before any
    dependency runs, authentication included: a caller without a valid key must get
    401 for a malformed body too, never its details."""
    try:
        await request.app.state.parley.auth.caller(request)
    except ParleyError as refused:
        return refused
    return None


def install(app: FastAPI) -> None:
    @app.exception_handler(ParleyError)
    async def _parley(_request: Request, exc: ParleyError) -> Response:
        if exc.status >= 500:
            log.warning("%s: %s", type(exc).__name__, exc.message)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        refused = await _stranger(request)
        return error_response(refused or validation_error(exc))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 400:  # a body FastAPI could not parse
            refused = await _stranger(request)
            if refused is not None:
                return error_response(refused)
        error = ParleyError(str(exc.detail))
        error.status = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        error.code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error_response(error)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, _exc: ClientDisconnect) -> Response:
        # the client left while sending its body: nobody reads an answer, and it is
        # not a server fault worth a traceback
        log.info("%s %s: the client left while sending the body", request.method, request.url.path)
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def _crash(_request: Request, exc: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(ParleyError("internal server error"))
