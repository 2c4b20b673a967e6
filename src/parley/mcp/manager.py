"""The configured MCP servers as one set: their tools, their health and their quarantine.

``McpManager`` holds one ``McpConnection`` per enabled server, created on first use.
``tools()`` lists every server's tools concurrently, each under its own server's
``timeout_seconds``, so a server that cannot start, hangs or breaks loses only its own
tools, and ``health()`` says why. A server that fails ``failures_to_quarantine`` times in a
row (it cannot be connected, does not answer in time or drops the connection) is
quarantined: nothing connects to it and its tools are left out for ``quarantine_seconds``.
Then one more attempt is made; each further quarantine in a row doubles the period, up to
ten minutes, and a success ends the streak.

Tool calls count as well: the connections the manager hands to ``McpTool`` report every
list and call outcome here and refuse to connect while their server is quarantined, and
``call()`` calls a tool by server and tool name. A tool's own error result, and an error
answer from a live server, are answers, not failures.

What does not belong here: the protocol, the transports and reconnecting (``client.py``),
turning tools and results into what the model sees (``tools.py``), where the server
configs come from, who may change them, and wiring the tools into the agent loop (above).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parley.mcp.client import (
    CallResult,
    McpCallTimeout,
    McpClientError,
    McpConnection,
    ServerConfig,
    ToolInfo,
)
from parley.mcp.tools import DEFAULT_MAX_CHARS, McpTool

MAX_QUARANTINE_SECONDS = 600.0
"""The longest a quarantine lasts, however many came before it in a row."""


class McpQuarantined(McpClientError):
    """The server is quarantined; no connection was attempted."""


@dataclass(frozen=True, slots=True)
class _Policy:
    failures_to_quarantine: int
    quarantine_seconds: float
    clock: Callable[[], float]


class _Server:
    """One configured server: its connection (once made) and its record of outcomes."""

    def __init__(self, config: ServerConfig, policy: _Policy) -> None:
        self.config = config
        self.policy = policy
        self.connection: _ManagedConnection | None = None
        self.failures = 0
        """Failures in a row."""
        self.quarantines = 0
        """Quarantines in a row (each one doubles the next)."""
        self.quarantined_until: float | None = None
        self.last_error: str | None = None
        self.latency_ms: float | None = None
        self.tool_count = 0
        self.outcomes = 0
        """How many outcomes were recorded (to tell whether an attempt recorded its own)."""

    @property
    def label(self) -> str:
        return f"MCP server {self.config.name!r}"

    def quarantined(self) -> bool:
        until = self.quarantined_until
        return until is not None and self.policy.clock() < until

    def admit(self) -> None:
        """Raise ``McpQuarantined`` if the server may not be tried now."""
        until = self.quarantined_until
        if until is None:
            return
        left = until - self.policy.clock()
        if left > 0:
            raise McpQuarantined(
                f"{self.label} is quarantined for another {left:.0f} s after "
                f"{self.failures} failures in a row; last error: {self.last_error}"
            )

    def succeeded(self, latency_ms: float, tool_count: int | None = None) -> None:
        self.outcomes += 1
        self.failures = 0
        self.quarantines = 0
        self.quarantined_until = None
        self.last_error = None
        self.latency_ms = latency_ms
        if tool_count is not None:
            self.tool_count = tool_count

    def answered(self, error: str) -> None:
        """The server answered with an error: it is alive, but the request failed."""
        self.outcomes += 1
        self.failures = 0
        self.quarantines = 0
        self.quarantined_until = None
        self.last_error = error

    def failed(self, error: str) -> None:
        self.outcomes += 1
        self.last_error = error
        self.failures += 1
        if self.failures < self.policy.failures_to_quarantine:
            return
        self.quarantines += 1
        base = self.policy.quarantine_seconds
        period = base * 2 ** min(self.quarantines - 1, 20)
        period = min(period, max(base, MAX_QUARANTINE_SECONDS))
        self.quarantined_until = self.policy.clock() + period


class _ManagedConnection(McpConnection):
    """A connection that reports each listing and call to its server's record, and makes
    no attempt while the server is quarantined. ``McpTool`` runs through it unchanged."""

    def __init__(self, server: _Server) -> None:
        super().__init__(server.config)
        self._server = server

    async def list_tools(self) -> list[ToolInfo]:
        if self._tools is not None:
            return list(self._tools)  # the cache proves nothing about the server
        self._server.admit()
        started = time.perf_counter()
        try:
            tools = await super().list_tools()
        except McpClientError as exc:
            self._record_error(exc)
            raise
        self._server.succeeded(_ms_since(started), len(tools))
        return tools

    async def call(
        self, name: str, arguments: dict[str, Any], timeout_seconds: float | None = None
    ) -> CallResult:
        self._server.admit()
        started = time.perf_counter()
        try:
            result = await super().call(name, arguments, timeout_seconds)
        except McpClientError as exc:
            self._record_error(exc)
            raise
        self._server.succeeded(_ms_since(started))
        return result

    def _record_error(self, exc: McpClientError) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return  # abandoned by a deadline above, which records the failure itself
        if isinstance(exc, McpCallTimeout) or not self.health().connected:
            self._server.failed(str(exc))
        else:
            self._server.answered(str(exc))


class McpManager:
    """The configured MCP servers: their tools, health, quarantine and shutdown."""

    def __init__(
        self,
        configs: Sequence[ServerConfig],
        *,
        failures_to_quarantine: int = 3,
        quarantine_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        if failures_to_quarantine < 1:
            raise ValueError("failures_to_quarantine must be at least 1")
        if quarantine_seconds <= 0:
            raise ValueError("quarantine_seconds must be positive")
        policy = _Policy(failures_to_quarantine, quarantine_seconds, clock)
        self._servers: dict[str, _Server] = {}
        for config in configs:
            if config.name in self._servers:
                raise ValueError(f"two MCP servers are named {config.name!r}")
            self._servers[config.name] = _Server(config, policy)
        self._max_chars = max_chars
        self._abandoned: set[asyncio.Task[Any]] = set()
        self._closed = False

    async def tools(self) -> list[McpTool]:
        """Every reachable server's tools, listed concurrently.

        A server that is disabled, quarantined, failing or slower than its own
        ``timeout_seconds`` contributes nothing; the others are not held up by it.
        """
        if self._closed:
            return []
        servers = [
            server
            for server in self._servers.values()
            if server.config.enabled and not server.quarantined()
        ]
        listed = await asyncio.gather(*(self._list(server) for server in servers))
        return [tool for tools in listed for tool in tools]

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        timeout_seconds: float | None = None,
    ) -> CallResult:
        """Call ``tool`` on ``server`` and record the outcome (raises ``McpClientError``)."""
        return await self._connection(self._enabled(server)).call(tool, arguments, timeout_seconds)

    def health(self) -> list[dict[str, Any]]:
        """One entry per configured server, in configuration order.

        ``quarantined_until`` is on the manager's clock (``time.monotonic`` unless given);
        ``latency_ms`` is that of the last successful call or listing.
        """
        report: list[dict[str, Any]] = []
        for server in self._servers.values():
            connection = server.connection
            report.append(
                {
                    "name": server.config.name,
                    "transport": server.config.transport,
                    "enabled": server.config.enabled,
                    "connected": connection is not None and connection.health().connected,
                    "quarantined_until": (
                        server.quarantined_until if server.quarantined() else None
                    ),
                    "consecutive_failures": server.failures,
                    "last_error": server.last_error,
                    "tool_count": server.tool_count,
                    "latency_ms": server.latency_ms,
                }
            )
        return report

    async def close(self) -> None:
        """Close every connection (stdio processes are stopped); the manager is then done."""
        self._closed = True
        for task in self._abandoned:
            task.cancel()
        connections = [s.connection for s in self._servers.values() if s.connection is not None]
        await asyncio.gather(
            *(connection.close() for connection in connections),
            *self._abandoned,
            return_exceptions=True,
        )

    async def __aenter__(self) -> McpManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ------------------------------------------------------------------------

    def _enabled(self, name: str) -> _Server:
        server = self._servers.get(name)
        if server is None:
            raise McpClientError(f"there is no MCP server named {name!r}")
        if not server.config.enabled:
            raise McpClientError(f"{server.label} is disabled")
        return server

    def _connection(self, server: _Server) -> _ManagedConnection:
        if self._closed:
            raise McpClientError(f"{server.label}: the MCP manager is closed")
        if server.connection is None:
            server.connection = _ManagedConnection(server)
        return server.connection

    async def _list(self, server: _Server) -> list[McpTool]:
        """One server's tools within its deadline; never raises ``McpClientError``."""
        connection = self._connection(server)
        seconds = server.config.timeout_seconds
        outcomes = server.outcomes
        task = asyncio.create_task(connection.list_tools(), name=f"mcp-list:{server.config.name}")
        try:
            done, _ = await asyncio.wait({task}, timeout=seconds)
        except BaseException:
            self._abandon(task)
            raise
        if not done:
            self._abandon(task)
            if server.outcomes == outcomes:
                server.failed(f"{server.label} did not list its tools within {seconds:g} s")
            return []
        try:
            infos = task.result()
        except McpClientError:
            return []  # recorded by the connection
        return [McpTool(connection, info, self._max_chars) for info in infos]

    def _abandon(self, task: asyncio.Task[Any]) -> None:
        """Cancel a listing past its deadline and let it clean up in the background."""
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(_forget(self._abandoned))


def _forget(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the deadline already recorded the failure

    return done


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
