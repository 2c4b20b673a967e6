"""The wire under one MCP connection: the SDK transport a ``ServerConfig`` names (stdio,
streamable HTTP, or the older HTTP+SSE) and the witnesses that tell the connection what
happened on it.

``open_transport`` enters the SDK's own client transport. Around it, small wrappers report
to the connection through one ``on_broken(reason)`` callback: ``WatchedReadStream`` when
the server's stream ends (a stdio process exited, an SSE stream closed), and, for the HTTP
transports, an ``httpx2`` client that notices messages (POSTs) the server never accepted:
a refused TCP connection, a ``404`` for a session the server forgot (the spec's signal
that the client must initialize again), an SSE message the server refused. Such a message
also marks the caller's ``Attempt`` as ``unseen``, which is what makes a retry safe: the
attempt is found through a context variable that the SDK carries from the caller to the
task that sends the POST (it does so for tracing).

A stdio server's stderr goes to a pipe that ``StderrTail`` reads for the process's life,
keeping only the last ``STDERR_KEEP_BYTES``: errors quote its tail.

What does not belong here: sessions, retries, backoff and pings (``client.py``), turning
results into tool output (``tools.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TextIO, TypeAlias, assert_never

import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

if TYPE_CHECKING:
    from parley.mcp.config import ServerConfig

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
OnBroken = Callable[[str], None]

INHERITED_ENV = ("PATH", "HOME", "LANG")
"""Passed on from Parley's environment, beside the SDK's own defaults (``HOME``,
``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``): none of these carry secrets."""
MAX_SSE_EVENT_BYTES = 64 * 1024 * 1024
"""The largest streamable HTTP event (one result) accepted. The SSE transport keeps the
SDK's own limit of 1 MiB, which it does not let a caller change."""
SSE_READ_SECONDS = 300.0
"""How long an HTTP response stream may stay silent before it counts as broken."""
STDERR_TAIL = 400
"""The characters of a stdio server's stderr shown in an error."""
STDERR_KEEP_BYTES = 16 * 1024
"""The bytes of a stdio server's stderr kept (the latest): it is read from a pipe for the
process's life, so a chatty server costs no disk and no more memory than this."""
_READ_BYTES = 64 * 1024
_DRAIN_READS = 32
"""Reads for what waits in the pipe when the tail is asked for (a pipe holds 64 KiB to
1 MiB; a server still writing is not waited for)."""


@dataclass(slots=True)
class Attempt:
    """One try at one request. ``unseen`` is set when the server provably did not receive
    it (it could not be reached, or refused the session), so that sending it again cannot
    run it twice."""

    unseen: bool = False


CURRENT_ATTEMPT: ContextVar[Attempt | None] = ContextVar("parley_mcp_attempt", default=None)


def stdio_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment a stdio server gets: PATH, HOME, LANG and its own ``env`` (to which
    the SDK adds its defaults, not overriding these).

    Parley's own secrets (API keys in the environment) never reach the process.
    """
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env.update(extra)
    return env


def open_transport(
    config: ServerConfig, errlog: StderrTail | None, on_broken: OnBroken
) -> contextlib.AbstractAsyncContextManager[Streams]:
    """The SDK transport for ``config``; ``errlog`` receives a stdio server's stderr."""
    match config.transport:
        case "stdio":
            assert config.command is not None
            assert errlog is not None
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=stdio_environment(config.env),
                cwd=config.cwd,
                # A stray invalid byte costs one unparsable line, not the connection.
                encoding_error_handler="replace",
            )
            return _stdio(params, errlog)
        case "http" | "sse":
            assert config.url is not None
            headers = dict(config.headers)
            if config.bearer_token:
                headers["Authorization"] = f"Bearer {config.bearer_token}"
            if config.transport == "http":
                return _http(config.url, headers, config.timeout_seconds, on_broken)
            return _sse(config.url, headers, config.timeout_seconds, on_broken)
        case _:
            assert_never(config.transport)


@contextlib.asynccontextmanager
async def _stdio(params: StdioServerParameters, errlog: StderrTail) -> AsyncIterator[Streams]:
    # stdio_client merges our env over the SDK's defaults (HOME, LOGNAME, PATH, SHELL,
    # TERM, USER): none of those carry secrets.
    try:
        async with stdio_client(params, errlog=errlog.writer) as streams:
            errlog.spawned()  # the child holds the pipe's write end now: ours can go
            yield streams
    finally:
        errlog.spawned()


@contextlib.asynccontextmanager
async def _http(
    url: str, headers: dict[str, str], seconds: float, on_broken: OnBroken
) -> AsyncIterator[Streams]:
    client = _WitnessClient(
        _session_forgotten,
        on_broken,
        headers=headers,
        timeout=httpx2.Timeout(seconds, read=max(seconds, SSE_READ_SECONDS)),
    )
    async with (
        client,
        streamable_http_client(
            url, http_client=client, max_sse_event_size=MAX_SSE_EVENT_BYTES
        ) as streams,
    ):
        yield streams


@contextlib.asynccontextmanager
async def _sse(
    url: str, headers: dict[str, str], seconds: float, on_broken: OnBroken
) -> AsyncIterator[Streams]:
    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return _WitnessClient(
            _message_refused, on_broken, headers=headers, timeout=timeout, auth=auth
        )

    async with sse_client(
        url,
        headers=headers,
        timeout=seconds,
        sse_read_timeout=max(seconds, SSE_READ_SECONDS),
        httpx_client_factory=factory,
    ) as streams:
        yield streams


Refused: TypeAlias = tuple[str, bool] | None
"""A response that leaves the connection unusable: (why, whether the request went unseen)."""
Refusal: TypeAlias = Callable[[httpx2.Request, httpx2.Response], Refused]


def _session_forgotten(request: httpx2.Request, response: httpx2.Response) -> Refused:
    """Streamable HTTP: a 404 to a request carrying a session id means the server does
    not know the session (it restarted or expired it) and ran nothing."""
    status = response.status_code
    if request.method == "POST" and status == 404 and MCP_SESSION_ID in request.headers:
        return "the server no longer knows the session (HTTP 404)", True
    return None


def _message_refused(request: httpx2.Request, response: httpx2.Response) -> Refused:
    """SSE: the SDK stops sending after a refused message POST, so the connection is done;
    a 4xx means the message was not taken."""
    status = response.status_code
    if request.method == "POST" and status >= 400:
        return f"the server refused a message (HTTP {status})", status < 500
    return None


class _WitnessClient(httpx2.AsyncClient):
    """An ``httpx2`` client that reports requests the server never accepted."""

    def __init__(self, refusal: Refusal, on_broken: OnBroken, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._refusal = refusal
        self._on_broken = on_broken

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            response = await super().send(request, **kwargs)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            if request.method == "POST":  # a message; the GET stream has retries of its own
                _mark_unseen()
                self._on_broken(f"the server could not be reached ({describe(exc)})")
            raise
        refused = self._refusal(request, response)
        if refused is not None:
            reason, unseen = refused
            if unseen:
                _mark_unseen()
            self._on_broken(reason)
        return response


def _mark_unseen() -> None:
    attempt = CURRENT_ATTEMPT.get()
    if attempt is not None:
        attempt.unseen = True


class WatchedReadStream:
    """The transport's read stream, reporting when it ends (EOF, closed) to ``on_end``."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]
    ) -> None:
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


class StderrTail:
    """A stdio server's stderr: a pipe, read on the event loop for the process's life,
    of which the last ``limit`` bytes are kept. (A file would grow for as long as the
    server runs; the child writes to it directly, so it could not be capped.)

    Make it in the event loop's thread; hand ``writer`` to the process, call ``spawned``
    once the process has it, and ``close`` when done."""

    def __init__(self, limit: int = STDERR_KEEP_BYTES) -> None:
        self.limit = limit
        self.received = 0
        """Bytes read in all."""
        self._kept = bytearray()
        self._loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()  # neither is inherited but as the child's stderr
        self._fd: int | None = read_fd
        try:
            os.set_blocking(read_fd, False)
            self._loop.add_reader(read_fd, self._read)
        except BaseException:
            os.close(read_fd)
            os.close(write_fd)
            raise
        self.writer: TextIO = os.fdopen(write_fd, "w")

    def __len__(self) -> int:
        return len(self._kept)

    def spawned(self) -> None:
        """Close Parley's copy of the write end, so the pipe ends when the process does."""
        self.writer.close()

    def text(self, chars: int = STDERR_TAIL) -> str:
        """The last ``chars`` characters written, once what waits in the pipe is read."""
        self._read(reads=_DRAIN_READS)
        return self._kept.decode(errors="replace")[-chars:].strip()

    def close(self) -> None:
        self.writer.close()
        fd, self._fd = self._fd, None
        if fd is not None:
            self._loop.remove_reader(fd)
            os.close(fd)

    def _read(self, reads: int = 1) -> None:
        """Up to ``reads`` reads (one per wake-up: a flood cannot hold the loop)."""
        for _ in range(reads):
            if self._fd is None:
                return
            try:
                chunk = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # every writer has closed it
                self._loop.remove_reader(self._fd)
                return
            self.received += len(chunk)
            self._kept += chunk
            if len(self._kept) > self.limit:
                del self._kept[: len(self._kept) - self.limit]


def describe(exc: BaseException) -> str:
    """``Type: message`` for an exception, flattening exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
