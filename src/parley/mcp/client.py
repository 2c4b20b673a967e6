"""One MCP server connection, on the official ``mcp`` SDK.

``McpConnection`` connects lazily on first use and keeps the session alive. The SDK's
transports and ``ClientSession`` are anyio context managers whose task groups must be
entered and exited in the same task, so each connection lives in a dedicated runner task
that owns an ``AsyncExitStack``; callers in other tasks only send requests over the
session. The tool list is cached and dropped when the server says it changed. A call that
finds the connection already broken (the stdio process exited while idle, the stream hit
EOF) reconnects and is retried once; a call that fails after it was sent is not retried.

What does not belong here: converting results for the model and the ``Tool`` wrapper
(``tools.py``), the set of configured servers, admin rules and quarantine (above).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, TypeVar

import httpx2
import mcp_types as types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from mcp import ClientSession

T = TypeVar("T")

CallResult: TypeAlias = types.CallToolResult
"""What a tool call returns: the SDK's result, converted for the model by ``tools.py``."""

_INHERITED_ENV = ("PATH", "HOME", "LANG")
_CLOSE_SECONDS = 8.0
"""How long ``close`` waits for the runner (the SDK gives a stdio server 2 s after stdin
closes, then SIGTERM, then SIGKILL after 2 s more) before cancelling it."""
_MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
_STDERR_TAIL = 400


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One MCP server as configured: a stdio command or a streamable HTTP URL."""

    name: str
    transport: Literal["stdio", "http"] = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token: str | None = field(default=None, repr=False)
    timeout_seconds: float = 30.0
    enabled: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an MCP server needs a name")
        if not 1 <= self.timeout_seconds <= 300:
            raise ValueError("timeout_seconds must be between 1 and 300")
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.transport == "http" and not self.url:
            raise ValueError(f"MCP server {self.name!r}: an http server needs a url")


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Health:
    connected: bool
    last_error: str | None
    tool_count: int
    latency_ms: float | None
    """Wall time of the last completed call."""


class McpClientError(Exception):
    """A server could not be reached or did not answer; ``str(error)`` is for the model."""


class McpConnectError(McpClientError):
    """Connecting or the initialize handshake failed."""


class McpCallTimeout(McpClientError):
    """A request took longer than its timeout."""


class _ConnectionBroken(McpClientError):
    """The connection was already closed when a request was about to be sent."""


class _WatchedReadStream:
    """The transport's read stream, noting when it ends (EOF, closed) for the connection."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_end: Any) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except BaseException:
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self._on_end()
            raise

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def stdio_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The whole environment a stdio server gets: PATH, HOME, LANG and its own ``env``.

    Parley's own secrets (API keys in the environment) never reach the process.
    """
    env = {key: os.environ[key] for key in _INHERITED_ENV if key in os.environ}
    env.update(extra)
    return env


class _Live:
    """One established session and the runner task that owns it."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.stop = asyncio.Event()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.is_closed = False
        self.stream_errors: list[str] = []

    def mark_closed(self) -> None:
        self.is_closed = True


class McpConnection:
    """A lazily connected, self-healing connection to one MCP server."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._live: _Live | None = None
        self._lock = asyncio.Lock()
        self._tools: list[ToolInfo] | None = None
        self._last_error: str | None = None
        self._latency_ms: float | None = None
        self._closed = False

    # -- public ---------------------------------------------------------------------------

    async def list_tools(self) -> list[ToolInfo]:
        """The server's tools, cached until the server sends ``tools/list_changed``."""
        if self._tools is not None:
            return list(self._tools)
        tools = await self._with_retry(self._fetch_tools, self.config.timeout_seconds)
        self._tools = tools
        return list(tools)

    async def call(
        self, name: str, arguments: dict[str, Any], timeout_seconds: float | None = None
    ) -> CallResult:
        """Call one tool with a per-call timeout (default: the server's ``timeout_seconds``).

        Raises ``McpCallTimeout`` on timeout and ``McpClientError`` for other failures;
        a server-side tool error is a result with ``is_error`` set, not an exception.
        """
        seconds = timeout_seconds if timeout_seconds is not None else self.config.timeout_seconds
        started = time.perf_counter()

        async def send(session: ClientSession) -> CallResult:
            return await session.call_tool(name, arguments, read_timeout_seconds=seconds)

        try:
            return await self._with_retry(send, seconds)
        finally:
            self._latency_ms = (time.perf_counter() - started) * 1000

    def health(self) -> Health:
        live = self._live
        return Health(
            connected=live is not None and live.session is not None and not live.is_closed,
            last_error=self._last_error,
            tool_count=len(self._tools or ()),
            latency_ms=self._latency_ms,
        )

    async def close(self) -> None:
        """Close the session and stop a stdio process (killed if it does not exit)."""
        self._closed = True
        async with self._lock:
            await self._shutdown()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- requests -------------------------------------------------------------------------

    async def _fetch_tools(self, session: ClientSession) -> list[ToolInfo]:
        tools: list[ToolInfo] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(
                ToolInfo(
                    name=tool.name,
                    description=tool.description or tool.title or tool.name,
                    input_schema=dict(tool.input_schema),
                    title=tool.title,
                )
                for tool in page.tools
            )
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def _with_retry(self, send: Callable[[ClientSession], Awaitable[T]], seconds: float) -> T:
        """Send on a live session; reconnect and retry once if it was already broken."""
        for attempt in (1, 2):
            session, live = await self._session()
            try:
                if live.is_closed:
                    raise _ConnectionBroken("connection closed")
                result: T = await asyncio.wait_for(send(session), seconds + 1.0)
            except _ConnectionBroken:
                if attempt == 2:
                    raise self._fail(McpClientError(f"{self._label}: connection closed")) from None
                await self._discard(live)
                continue
            except TimeoutError:
                raise self._fail(McpCallTimeout(self._timeout_text(seconds))) from None
            except MCPError as exc:
                if exc.code == types.REQUEST_TIMEOUT:
                    raise self._fail(McpCallTimeout(self._timeout_text(seconds))) from None
                if exc.code == types.CONNECTION_CLOSED:
                    await self._discard(live)
                    raise self._fail(
                        McpClientError(f"{self._label}: the connection closed during the request")
                    ) from None
                raise self._fail(McpClientError(f"{self._label}: {exc.message}")) from None
            except McpClientError as exc:
                raise self._fail(exc) from None
            except Exception as exc:
                raise self._fail(McpClientError(f"{self._label}: {_describe(exc)}")) from None
            self._last_error = None
            return result
        raise AssertionError("unreachable")

    @property
    def _label(self) -> str:
        return f"MCP server {self.config.name!r}"

    def _timeout_text(self, timeout: float) -> str:
        return f"{self._label} did not answer within {timeout:g} s"

    def _fail(self, error: McpClientError) -> McpClientError:
        self._last_error = str(error)
        return error

    # -- the connection -------------------------------------------------------------------

    async def _session(self) -> tuple[ClientSession, _Live]:
        async with self._lock:
            if self._closed:
                raise McpClientError(f"{self._label}: the connection is closed")
            live = self._live
            if live is not None and live.session is not None:
                return live.session, live
            live = _Live()
            live.task = asyncio.create_task(self._run(live), name=f"mcp:{self.config.name}")
            try:
                await asyncio.wait_for(asyncio.shield(live.ready), self.config.timeout_seconds)
            except BaseException as exc:
                await self._stop(live)
                if isinstance(exc, TimeoutError):
                    reason = f"no answer to initialize within {self.config.timeout_seconds:g} s"
                elif isinstance(exc, Exception):
                    reason = _describe(exc)
                else:
                    raise
                error = McpConnectError(self._connect_text(live, reason))
                raise self._fail(error) from None
            assert live.session is not None
            self._live = live
            return live.session, live

    def _connect_text(self, live: _Live, reason: str) -> str:
        text = f"{self._label}: could not connect: {reason}"
        if live.stream_errors:
            text += f"; the server wrote invalid messages ({live.stream_errors[0]})"
        return text

    async def _run(self, live: _Live) -> None:
        """The runner task: enters the transport and session, waits, exits them here."""
        errlog: Any = None
        if self.config.transport == "stdio":
            errlog = tempfile.TemporaryFile(mode="w+t")  # noqa: SIM115 - closed below
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(errlog))
                watched = _WatchedReadStream(read, live.mark_closed)

                async def on_message(message: Any) -> None:
                    if isinstance(message, Exception):
                        if len(live.stream_errors) < 5:
                            live.stream_errors.append(_describe(message)[:200])
                    elif isinstance(message, types.ToolListChangedNotification):
                        self._tools = None

                session = await stack.enter_async_context(
                    ClientSession(
                        watched,
                        write,
                        message_handler=on_message,
                        client_info=types.Implementation(name="parley", version="1"),
                    )
                )
                await session.initialize()
                live.session = session
                live.ready.set_result(None)
                await live.stop.wait()
        except Exception as exc:
            if not live.ready.done():
                live.ready.set_exception(_with_stderr(exc, errlog))
        except BaseException:
            if not live.ready.done():
                live.ready.cancel()
            raise
        finally:
            live.is_closed = True
            live.session = None
            if errlog is not None:
                errlog.close()

    def _transport(self, errlog: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=stdio_environment(config.env),
                cwd=config.cwd,
            )
            return _stdio(params, errlog)
        assert config.url is not None
        headers = dict(config.headers)
        if config.bearer_token:
            headers["Authorization"] = f"Bearer {config.bearer_token}"
        return _http(config.url, headers, config.timeout_seconds)

    async def _discard(self, live: _Live) -> None:
        async with self._lock:
            if self._live is live:
                self._live = None
                self._tools = None
        await self._stop(live)

    async def _shutdown(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            await self._stop(live)

    async def _stop(self, live: _Live) -> None:
        live.stop.set()
        task = live.task
        if task is None:
            return
        if not task.done():
            if live.session is None:
                task.cancel()  # still connecting: nothing to close politely
            done, _ = await asyncio.wait({task}, timeout=_CLOSE_SECONDS)
            if not done:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if live.ready.done() and not live.ready.cancelled():
            live.ready.exception()  # retrieved: a failed connect was already reported


@contextlib.asynccontextmanager
async def _stdio(params: StdioServerParameters, errlog: Any) -> Any:
    # stdio_client merges our env over the SDK's defaults (HOME, LOGNAME, PATH, SHELL,
    # TERM, USER): none of those carry secrets.
    async with stdio_client(params, errlog=errlog) as streams:
        yield streams


@contextlib.asynccontextmanager
async def _http(url: str, headers: dict[str, str], seconds: float) -> Any:
    client = httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(seconds, read=max(seconds, 300.0))
    )
    async with (
        client,
        streamable_http_client(
            url, http_client=client, max_sse_event_size=_MAX_SSE_EVENT_BYTES
        ) as streams,
    ):
        yield streams


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text


def _with_stderr(exc: Exception, errlog: Any) -> Exception:
    if errlog is None:
        return exc
    try:
        errlog.flush()
        errlog.seek(0)
        tail = errlog.read()[-_STDERR_TAIL:].strip()
    except (OSError, ValueError):
        return exc
    if not tail:
        return exc
    return McpConnectError(f"{_describe(exc)}; stderr: {tail}")
