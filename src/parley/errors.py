"""The exception tree. Errors carry data; mapping to HTTP happens once, in ``api/errors.py``.

::

    ParleyError                      status, type, code, param
    ├── InvalidRequest               400  the client sent something we will not run
    │   ├── PayloadTooLarge          413
    │   ├── UnsupportedMediaType     415
    │   └── Unprocessable            422  well formed, but not what this can take
    ├── AuthenticationFailed         401
    ├── PermissionDenied             403
    ├── NotFound                     404  unknown or someone else's id, unknown model
    ├── Conflict                     409
    ├── Overloaded                   503  (or 429) with retry_after
    │   └── RateLimited              429  this caller's share is used up, with retry_after
    ├── ConfigurationError           raised at start-up for a bad settings file
    └── ProviderError                an upstream model call failed
        (status from upstream, provider name, retryable, retry_after)

A ``ProviderError`` maps to 429 (rate limited, Retry-After kept), 400/404 (the upstream
refused the request itself) or 502/503/504 (the upstream failed).
"""

from __future__ import annotations


class ParleyError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.retry_after = retry_after


class InvalidRequest(ParleyError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_value"


class PayloadTooLarge(InvalidRequest):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(InvalidRequest):
    status = 415
    code = "unsupported_media_type"


class Unprocessable(InvalidRequest):
    status = 422
    code = "unprocessable"


class AuthenticationFailed(ParleyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(ParleyError):
    status = 403
    type = "permission_error"
    code = "forbidden"


class NotFound(ParleyError):
    status = 404
    type = "not_found_error"
    code = "not_found"


class Conflict(ParleyError):
    status = 409
    type = "conflict_error"
    code = "conflict"


class Overloaded(ParleyError):
    status = 503
    type = "overloaded_error"
    code = "overloaded"


class RateLimited(Overloaded):
    """The caller has used up its own share (others are still served): retry later."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limited"


class ConfigurationError(ParleyError):
    code = "configuration_error"


class ProviderError(ParleyError):
    """An upstream call failed. ``upstream_status`` is None when no response came back."""

    type = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        upstream_status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, code=code or "upstream_error", retry_after=retry_after)
        self.provider = provider
        self.upstream_status = upstream_status
        self.retryable = retryable
        self.status = _client_status(upstream_status)
        if self.status == 429:
            self.type = "rate_limit_error"
            self.code = code or "rate_limit_exceeded"
        elif self.status in (400, 404):
            self.type = "invalid_request_error"
            self.code = code or ("model_not_found" if self.status == 404 else "upstream_rejected")


def _client_status(upstream_status: int | None) -> int:
    """The status Parley's client sees for an upstream failure."""
    if upstream_status is None:
        return 502
    if upstream_status == 429:
        return 429
    if upstream_status in (400, 404, 413, 422):
        return 400 if upstream_status != 404 else 404
    if upstream_status in (503, 529):
        return 503
    if upstream_status == 504:
        return 504
    return 502


def is_retryable_status(status: int) -> bool:
    return status in (408, 409, 429, 500, 502, 503, 504, 529)
