"""Shared HTTP handling for upstream adapters: error bodies, Retry-After, transport faults.

Upstream error bodies are summarised, never echoed whole, and request headers (which
carry provider keys) are never part of a message.
"""

from __future__ import annotations

import base64
import email.utils
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import unquote_to_bytes

import httpx
import orjson

from parley.errors import ProviderError, is_retryable_status
from parley.events import Event
from parley.settings import ProviderSettings

_MAX_ERROR_BODY = 16 * 1024
log = logging.getLogger(__name__)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def error_from_response(provider: str, response: httpx.Response) -> ProviderError:
    """Read (a bounded part of) an error response and turn it into a ProviderError."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _MAX_ERROR_BODY:
            break
    detail = _error_message(body[:_MAX_ERROR_BODY])
    status = response.status_code
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    retry_after_ms = parse_retry_after(response.headers.get("retry-after-ms"))
    if retry_after is None and retry_after_ms is not None:
        retry_after = retry_after_ms / 1000
    if status in (401, 403):
        # The upstream's text can quote part of the key: it goes to the log only.
        log.warning("upstream %r answered %d: %s", provider, status, detail)
        message = (
            f"upstream {provider!r} rejected Parley's credentials ({status}); "
            "check the provider's api_key"
        )
    else:
        message = f"upstream {provider!r} answered {status}: {detail}"
    return ProviderError(
        message,
        provider=provider,
        upstream_status=status,
        retryable=is_retryable_status(status),
        retry_after=retry_after,
    )


def _error_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", errors="replace").strip()
        return text[:500] or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or error
            return str(message)[:500]
        return str(error)[:500]
    return str(data)[:500]


def transport_error(provider: str, exc: httpx.HTTPError) -> ProviderError:
    """A connection-level failure: no usable response came back."""
    if isinstance(exc, httpx.TimeoutException):
        error = ProviderError(
            f"upstream {provider!r} timed out ({type(exc).__name__})",
            provider=provider,
            retryable=True,
            code="upstream_timeout",
        )
        error.status = 504
        return error
    return ProviderError(
        f"could not reach upstream {provider!r}: {type(exc).__name__}: {exc}",
        provider=provider,
        retryable=True,
        code="upstream_unreachable",
    )


async def fetch_models(
    client: httpx.AsyncClient,
    provider: str,
    url: str,
    headers: dict[str, str],
    params: dict[str, str | int] | None = None,
) -> list[str]:
    """The model ids an upstream's models route lists; a ProviderError says why not."""
    try:
        response = await client.get(url, headers=headers, params=params, timeout=5.0)
        if response.status_code != 200:
            raise await error_from_response(provider, response)
        data = response.json().get("data") or []
    except httpx.HTTPError as exc:
        raise transport_error(provider, exc) from exc
    except (ValueError, AttributeError) as exc:  # not JSON, or not an object
        raise ProviderError(
            f"upstream {provider!r} answered its models route with something else",
            provider=provider,
            code="upstream_bad_response",
        ) from exc
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def provider_timeout(config: ProviderSettings) -> httpx.Timeout:
    return httpx.Timeout(config.timeout_seconds, connect=config.connect_timeout_seconds)


async def stream_events(
    client: httpx.AsyncClient,
    provider: str,
    url: str,
    body: bytes,
    headers: dict[str, str],
    limits: httpx.Timeout,
    parse: Callable[[httpx.Response], AsyncIterator[Event]],
) -> AsyncIterator[Event]:
    """POST ``body`` and yield what ``parse`` reads from the streamed response; an error
    status or a transport fault (before or during the stream) is a ProviderError."""
    try:
        async with client.stream(
            "POST", url, content=body, headers=headers, timeout=limits
        ) as response:
            if response.status_code >= 400:
                raise await error_from_response(provider, response)
            async for event in parse(response):
                yield event
    except httpx.HTTPError as exc:
        raise transport_error(provider, exc) from exc


async def listed_models(
    config: ProviderSettings, check: Callable[[], Awaitable[list[str]]]
) -> list[str]:
    """``Provider.list_models``: the configured models, else what ``check`` asks the
    upstream (nothing when it fails, or when ``list_upstream_models`` is off)."""
    if config.models or not config.list_upstream_models:
        return list(config.models)
    try:
        return await check()
    except ProviderError:
        return []


def data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a ``data:`` URL; None for any other URL."""
    if not url.startswith("data:"):
        return None
    header, _, payload = url[len("data:") :].partition(",")
    media_type, *params = header.split(";")
    if "base64" in params:
        return media_type, payload
    return media_type, base64.b64encode(unquote_to_bytes(payload)).decode("ascii")
