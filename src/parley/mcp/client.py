"""One MCP server connection, on the official ``mcp`` SDK.

``McpConnection`` connects lazily on first use and keeps the session alive. The SDK's
transports and ``ClientSession`` are anyio context managers whose task groups must be
entered and exited in the same task, so each connection lives in a dedicated runner task
that owns an ``AsyncExitStack``; callers in other tasks only send requests over the
session. The tool list is cached and dropped when the server says it changed.

Staying dependable against servers that misbehave:

- A connection known to be broken (the stdio process exited, the SSE stream closed, the
  HTTP server forgot the session or could not be reached, a ping went unanswered) is
  replaced on the next request, which never sees the old one.
- A request that fails before the server saw it (``transports.Attempt.unseen``: a refused
  connection, a ``404`` for a forgotten session) reconnects and is sent once more. One
  that fails after the server received it (the connection broke mid-call) is not retried,
  as it may have had effects: it raises ``McpConnectionLost``, and the next call
  reconnects. (So does a request sent in the instant the server dies, before the end of
  its stream is read: nothing tells it from one the server received.)
- Failed connects back off: after a second failure in a row, the next attempt waits
  ``reconnect_backoff_seconds``, doubling up to ``max_reconnect_backoff_seconds``; a
  request meanwhile fails at once with ``McpBackoff``, saying when the next attempt will
  be. A connect that succeeds resets it. (Quarantining a server that keeps failing is the
  manager's, above.)
- An idle session is pinged every ``ping_interval_seconds``; a failed ping drops it, so
  the next call reconnects instead of failing on a dead session.

Every failure is an ``McpClientError`` with the server's name and what happened, within
one connect timeout plus the request's own (a reconnect and second try included).

What does not belong here: the SDK transports and what they witness (``transports.py``),
checking the tools a server lists (``listing.py``; ``ToolInfo`` and ``SkippedTool`` are
re-exported here), converting results for the model and the ``Tool`` wrapper
(``tools.py``), the set of configured servers, admin rules and quarantine (``manager.py``
and above).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Self, TypeAlias, TypeVar

import mcp_types as types
from mcp.shared.exceptions import MCPError

from mcp import ClientSession
from parley.mcp.config import ServerConfig
from parley.mcp.listing import SkippedTool as SkippedTool
from parley.mcp.listing import ToolInfo as ToolInfo
from parley.mcp.listing import vet
from parley.mcp.transports import (
    CURRENT_ATTEMPT,
    Attempt,
    StderrTail,
    WatchedReadStream,
    describe,
    open_transport,
)

T = TypeVar("T")

CallResult: TypeAlias = types.CallToolResult
"""What a tool call returns: the SDK's result, converted for the model by ``tools.py``."""

_CLOSE_SECONDS = 8.0
"""How long ``close`` waits for a runner (the SDK gives a stdio server 2 s after stdin
closes, then SIGTERM, then SIGKILL after 2 s more) before cancelling it."""
_FIRST = asyncio.FIRST_COMPLETED
_SETTLE_SECONDS = 1.0
"""How long a failed request waits for its broken connection to wind down, to say why."""


@dataclass(frozen=True, slots=True)
class Health:
    connected: bool
    last_error: str | None
    tool_count: int
    latency_ms: float | None
    """Wall time of the last completed call."""
    skipped: tuple[SkippedTool, ...] = ()
    """Tools the last listing left out (their schema unusable), with the reasons."""


class McpClientError(Exception):
    """A server could not be reached or did not answer; ``str(error)`` is for the model."""


class McpConnectError(McpClientError):
    """Connecting or the initialize handshake failed."""


class McpBackoff(McpConnectError):
    """No connect was attempted: recent ones failed, and the next is ``retry_in`` s away."""

    def __init__(self, message: str, retry_in: float) -> None:
        super().__init__(message)
        self.retry_in = retry_in


class McpCallTimeout(McpClientError):
    """A request took longer than its timeout."""


class McpConnectionLost(McpClientError):
    """The connection broke after the request was sent. It may have run on the server, so
    it was not retried; the next request reconnects."""


class _Live:
    """One session (connecting or established) and the runner task that owns it."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.stop = asyncio.Event()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.is_closed = False
        self.reason: str | None = None
        """Why the connection broke, as first noticed."""
        self.failure: str | None = None
        """The transport's own error, if it ended with one (more precise than ``reason``)."""
        self.stream_errors: list[str] = []
        self.stderr_tail = ""
        self.busy = 0
        self.last_used = asyncio.get_running_loop().time()

    @property
    def usable(self) -> bool:
        return self.session is not None and not self.is_closed

    def break_(self, reason: str) -> None:
        """Mark the connection broken (the first reason wins) and let the runner close it."""
        if not self.is_closed:
            self.is_closed = True
            self.reason = reason
        self.stop.set()

    def why(self) -> str:
        text = self.failure or self.reason or "the connection closed"
        if self.stream_errors:
            text += f"; the server wrote invalid messages ({self.stream_errors[0]})"
        if self.stderr_tail:  # last: tools.py cuts it from what the model sees
            text += f"; stderr: {self.stderr_tail}"
        return text


class McpConnection:
    """A lazily connected, self-healing connection to one MCP server.

    ``clock`` (seconds, monotonic) times the reconnect backoff; tests may pass their own.
    """

    def __init__(
        self, config: ServerConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self._clock = clock
        self._live: _Live | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._tools: list[ToolInfo] | None = None
        self._skipped: tuple[SkippedTool, ...] = ()
        self._last_error: str | None = None
        self._latency_ms: float | None = None
        self._closed = False
        self._connect_failures = 0
        self._connect_error = ""
        self._retry_at = 0.0

    # -- public ---------------------------------------------------------------------------

    async def list_tools(self) -> list[ToolInfo]:
        """The server's tools, cached until the server sends ``tools/list_changed``; those
        whose schema a model could not use are left out (``health().skipped``)."""
        if self._tools is not None:
            return list(self._tools)
        tools = await self._with_retry(self._fetch_tools, self.config.timeout_seconds, "tools/list")
        self._tools = tools
        return list(tools)

    async def call(
        self, name: str, arguments: dict[str, Any], timeout_seconds: float | None = None
    ) -> CallResult:
        """Call one tool with a per-call timeout (default: the server's ``timeout_seconds``).

        Raises ``McpCallTimeout`` on timeout, ``McpConnectionLost`` if the connection broke
        during the call, ``McpConnectError`` (``McpBackoff``) if it cannot connect, and
        ``McpClientError`` for other failures; a server-side tool error is a result with
        ``is_error`` set, not an exception.
        """
        seconds = timeout_seconds if timeout_seconds is not None else self.config.timeout_seconds
        started = time.perf_counter()

        async def send(session: ClientSession) -> CallResult:
            return await session.call_tool(name, arguments, read_timeout_seconds=seconds)

        try:
            return await self._with_retry(send, seconds, f"the call to {name!r}")
        finally:
            self._latency_ms = (time.perf_counter() - started) * 1000

    def health(self) -> Health:
        live = self._live
        return Health(
            connected=live is not None and live.usable,
            last_error=self._last_error,
            tool_count=len(self._tools or ()),
            latency_ms=self._latency_ms,
            skipped=self._skipped,
        )

    def reconfigure(self, config: ServerConfig) -> None:
        """Use ``config`` from now on: the session is closed in the background and the
        next request connects afresh (tools listed again). Tools already handed out keep
        working through this same object."""
        self.config = config
        self._tools = None
        self._skipped = ()
        self._connect_failures = 0
        self._retry_at = 0.0
        live, self._live = self._live, None
        if live is not None:
            self._retire(live)

    async def close(self) -> None:
        """Close the session and stop a stdio process (killed if it does not exit)."""
        self._closed = True
        async with self._lock:
            live, self._live = self._live, None
        if live is not None:
            self._retire(live)
        tasks = set(self._retiring)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=_CLOSE_SECONDS)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- requests -------------------------------------------------------------------------

    async def _fetch_tools(self, session: ClientSession) -> list[ToolInfo]:
        tools: list[ToolInfo] = []
        skipped: list[SkippedTool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            # checking schemas takes milliseconds each: not on the event loop
            kept, left_out = await asyncio.to_thread(vet, self.config.name, page.tools)
            tools.extend(kept)
            skipped.extend(left_out)
            cursor = page.next_cursor
            if not cursor:
                self._skipped = tuple(skipped)
                return tools

    async def _with_retry(
        self, send: Callable[[ClientSession], Awaitable[T]], seconds: float, what: str
    ) -> T:
        """Send on a live session; reconnect and send again once if the server never saw it.

        All of it, connecting and a second try included, fits in one connect timeout plus
        ``seconds``."""
        try:
            async with asyncio.timeout(self.config.timeout_seconds + seconds + 1.0):
                return await self._tries(send, seconds, what)
        except TimeoutError:
            raise self._fail(McpCallTimeout(self._timeout_text(seconds))) from None

    async def _tries(
        self, send: Callable[[ClientSession], Awaitable[T]], seconds: float, what: str
    ) -> T:
        for try_number in (1, 2):
            session, live = await self._session()
            attempt = Attempt()
            live.busy += 1
            try:
                result = await asyncio.wait_for(_sent(send, session, attempt), seconds + 1.0)
            except Exception as exc:
                if _timed_out(exc):
                    raise self._fail(McpCallTimeout(self._timeout_text(seconds))) from None
                error: McpClientError
                if attempt.unseen:
                    await self._discard(live, settle=False)
                    if try_number == 1:
                        continue
                    error = McpClientError(
                        f"{self._label}: {what} was refused again after reconnecting ({live.why()})"
                    )
                elif self._closed:
                    error = McpClientError(
                        f"{self._label}: the connection was closed during {what}"
                    )
                elif live.is_closed or _closed(exc):
                    live.break_(exc.message if isinstance(exc, MCPError) else describe(exc))
                    await self._discard(live, settle=True)
                    error = McpConnectionLost(
                        f"{self._label}: the connection broke during {what} ({live.why()}); "
                        "it may have run, so it was not retried; the next request reconnects"
                    )
                elif isinstance(exc, MCPError):
                    error = McpClientError(f"{self._label}: {exc.message}")
                else:
                    error = McpClientError(f"{self._label}: {what} failed: {describe(exc)}")
                raise self._fail(error) from None
            finally:
                live.busy -= 1
                live.last_used = asyncio.get_running_loop().time()
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
        """The live session, connecting (or reconnecting a broken one) first if needed."""
        async with self._lock:
            if self._closed:
                raise McpClientError(f"{self._label}: the connection is closed")
            live = self._live
            if live is not None and live.usable:
                assert live.session is not None
                return live.session, live
            if live is not None:
                self._live = None
                self._retire(live)
            self._tools = None
            self._admit_connect()
            live = _Live()
            live.task = asyncio.create_task(self._run(live), name=f"mcp:{self.config.name}")
            try:
                await asyncio.wait_for(asyncio.shield(live.ready), self.config.timeout_seconds)
            except BaseException as exc:
                self._retire(live)
                if isinstance(exc, TimeoutError):
                    seconds = self.config.timeout_seconds
                    live.failure = f"no answer to initialize within {seconds:g} s"
                elif isinstance(exc, Exception):
                    live.failure = None if _closed(exc) else describe(exc)  # else: ``reason``
                else:
                    raise
                raise self._fail(self._connect_failed(live.why())) from None
            if live.session is None or live.is_closed:
                self._retire(live)
                raise self._fail(self._connect_failed(f"the connection broke ({live.why()})"))
            self._connect_failures = 0
            self._live = live
            return live.session, live

    def _admit_connect(self) -> None:
        """Raise ``McpBackoff`` while the wait after recent failed connects lasts."""
        if not self._connect_failures:
            return
        left = self._retry_at - self._clock()
        if left > 0:
            failures = self._connect_failures
            raise self._fail(
                McpBackoff(
                    f"{self._label}: not connected; will retry connecting in {left:.1f} s "
                    f"({failures} failed attempt{'s' if failures > 1 else ''} in a row; "
                    f"last: {self._connect_error})",
                    retry_in=left,
                )
            )

    def _connect_failed(self, reason: str) -> McpConnectError:
        self._connect_failures += 1
        self._connect_error = reason
        self._retry_at = self._clock() + self._backoff(self._connect_failures)
        return McpConnectError(f"{self._label}: could not connect: {reason}")

    def _backoff(self, failures: int) -> float:
        """The wait after ``failures`` failed connects in a row: none after the first (one
        quick second try rides out a blip), then ``reconnect_backoff_seconds``, doubling,
        up to ``max_reconnect_backoff_seconds``."""
        if failures < 2:
            return 0.0
        wait: float = self.config.reconnect_backoff_seconds * 2.0 ** min(failures - 2, 30)
        return min(wait, self.config.max_reconnect_backoff_seconds)

    async def _run(self, live: _Live) -> None:
        """The runner task: enters the transport and session, keeps them, exits them here."""
        errlog: StderrTail | None = None
        try:
            async with AsyncExitStack() as stack:
                if self.config.transport == "stdio":
                    errlog = StderrTail()  # an OSError (no pipe) fails the connect
                read, write = await stack.enter_async_context(
                    open_transport(self.config, errlog, lambda why: self._drop(live, why))
                )
                stdio = errlog is not None
                ended = "the server process exited" if stdio else "the server closed the stream"
                watched = WatchedReadStream(read, lambda: self._drop(live, ended))

                async def on_message(message: Any) -> None:
                    if isinstance(message, ValueError):  # a line or event that did not parse
                        if len(live.stream_errors) < 5:
                            live.stream_errors.append(describe(message)[:200])
                    elif isinstance(message, Exception):  # the transport's own failure
                        live.failure = live.failure or describe(message)
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
                live.last_used = asyncio.get_running_loop().time()
                live.ready.set_result(None)
                await self._keep_alive(live, session)
        except Exception as exc:
            if not live.ready.done():
                live.stderr_tail = errlog.text() if errlog is not None else ""
                live.ready.set_exception(exc)
            else:
                live.failure = None if _closed(exc) else describe(exc)
                self._drop(live, live.failure or "the connection closed")
        except BaseException:
            if not live.ready.done():
                live.ready.cancel()
            raise
        finally:
            live.break_("the connection closed")
            live.session = None
            if errlog is not None:
                live.stderr_tail = errlog.text()
                errlog.close()

    async def _keep_alive(self, live: _Live, session: ClientSession) -> None:
        """Wait until stopped, pinging the session whenever it has been idle an interval."""
        interval = self.config.ping_interval_seconds
        if interval <= 0:
            await live.stop.wait()
            return
        loop = asyncio.get_running_loop()
        while not live.stop.is_set():
            due = live.last_used + interval - loop.time()
            if due > 0 or live.busy:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(live.stop.wait(), max(due, interval / 4))
                continue
            # A task of its own, so that stopping (close) need not wait for the answer.
            ping = asyncio.ensure_future(session.send_ping())
            stopped = asyncio.ensure_future(live.stop.wait())
            seconds = self.config.timeout_seconds
            try:
                await asyncio.wait({ping, stopped}, timeout=seconds, return_when=_FIRST)
            finally:
                stopped.cancel()
                unanswered = not ping.done()
                if unanswered:
                    ping.cancel()
                ping.add_done_callback(_retrieve)
            if unanswered:
                if not live.stop.is_set():
                    self._drop(live, f"no answer to a ping within {seconds:g} s")
                return
            exc = ping.exception()
            if isinstance(exc, Exception):
                answered = isinstance(exc, MCPError) and not (_timed_out(exc) or _closed(exc))
                if live.is_closed or not answered:
                    self._drop(live, f"no answer to a ping ({describe(exc)})")
                    return
                # An error answer is still an answer: the server is there.
            live.last_used = loop.time()

    def _drop(self, live: _Live, reason: str) -> None:
        """The server's side broke ``live``: mark it, and say so in ``health`` if it is the
        connection in use (the next request reconnects)."""
        if live.is_closed:
            return
        live.break_(reason)
        if self._live is live:
            self._last_error = (
                f"{self._label}: the connection dropped ({reason}); the next request reconnects"
            )

    async def _discard(self, live: _Live, *, settle: bool) -> None:
        """Stop using ``live``; with ``settle``, give it a moment to say why it ended."""
        if self._live is live:
            self._live = None
            self._tools = None
        self._retire(live)
        if settle and live.task is not None:
            await asyncio.wait({live.task}, timeout=_SETTLE_SECONDS)

    def _retire(self, live: _Live) -> None:
        """Let ``live``'s runner close it in the background; ``close`` waits for it."""
        live.stop.set()
        task = live.task
        if task is None or task.done():
            _retrieve(live.ready)
            return
        if live.session is None:
            task.cancel()  # still connecting: nothing to close politely
        self._retiring.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._retiring.discard(task)
            _retrieve(live.ready)

        task.add_done_callback(done)


async def _sent(
    send: Callable[[ClientSession], Awaitable[T]], session: ClientSession, attempt: Attempt
) -> T:
    """``send`` with ``attempt`` current; the SDK hands the context on to the POST it sends."""
    token = CURRENT_ATTEMPT.set(attempt)
    try:
        return await send(session)
    finally:
        CURRENT_ATTEMPT.reset(token)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (it was reported, or does not matter)."""
    if future.done() and not future.cancelled():
        future.exception()


def _timed_out(exc: Exception) -> bool:
    return isinstance(exc, TimeoutError) or (
        isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT
    )


def _closed(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_closed(inner) for inner in exc.exceptions)
    return isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED
