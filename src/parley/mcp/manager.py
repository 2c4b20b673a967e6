"""The configured MCP servers as one set: their tools, their health and their quarantine.

``McpManager`` holds one ``McpConnection`` per enabled server, created on first use.
``tools()`` lists every server's tools concurrently, each under its own server's
``timeout_seconds``, so a server that cannot start, hangs or breaks loses only its own
tools, and ``health()`` says why. A server that fails ``failures_to_quarantine`` times in a
row (it cannot be connected, does not answer in time or drops the connection) is
quarantined: nothing connects to it and its tools are left out for ``quarantine_seconds``.
Then one more attempt is made; each further quarantine in a row doubles the period, up to
ten minutes, and a success ends the streak.

The set can change while it runs (``configure``: servers added over the admin API): a
server whose configuration changed reconnects with it on next use (the tools a running
turn holds follow), and a removed one is closed. A request
that cannot wait for a slow server (``listing(wait=...)``) goes on without its tools,
while the listing carries on in the background for the requests after it.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from parley.mcp.client import (
    CallResult,
    McpBackoff,
    McpCallTimeout,
    McpClientError,
    McpConnection,
    ToolInfo,
)
from parley.mcp.config import ServerConfig
from parley.mcp.tools import DEFAULT_MAX_CHARS, McpTool

MAX_QUARANTINE_SECONDS = 600.0
"""The longest a quarantine lasts, however many came before it in a row."""


class McpQuarantined(McpClientError):
    """The server is quarantined; no connection was attempted."""


@dataclass(frozen=True, slots=True)
class Listing:
    """The tools of the servers asked for, and why any of them brought none."""

    tools: list[McpTool]
    problems: dict[str, str]
    """Server name -> a sentence for the user (disabled, quarantined, still connecting,
    failed)."""


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
        self.listing: asyncio.Task[list[McpTool]] | None = None
        """The listing under way (requests share it; none when idle)."""
        self.listing_started = 0.0
        """When it began (``time.monotonic``): a request waits until ``wait`` after that,
        so a stuck listing delays the requests that arrive while it lasts once, not each."""

    @property
    def label(self) -> str:
        return f"MCP server {self.config.name!r}"

    def quarantined(self) -> bool:
        until = self.quarantined_until
        return until is not None and self.policy.clock() < until

    def quarantine_left(self) -> float | None:
        """Seconds of quarantine left (None: not quarantined)."""
        until = self.quarantined_until
        if until is None:
            return None
        left = until - self.policy.clock()
        return round(left, 1) if left > 0 else None

    def admit(self) -> None:
        """Raise ``McpQuarantined`` if the server may not be tried now."""
        until = self.quarantined_until
        if until is None:
            return
        if until - self.policy.clock() > 0:
            raise McpQuarantined(_quarantine_text(self))

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
        if self.quarantined():
            return  # a call that was already under way: one quarantine, not one per call
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
        super().__init__(server.config, clock=server.policy.clock)
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

    def adopt(self, server: _Server) -> None:
        """Report to ``server`` from now on and use its (changed) configuration."""
        self._server = server
        self.reconfigure(server.config)

    def _record_error(self, exc: McpClientError) -> None:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return  # abandoned by a deadline above, which records the failure itself
        if isinstance(exc, McpBackoff):
            self._server.last_error = str(exc)  # no attempt was made: nothing to count
            return
        if isinstance(exc, McpCallTimeout) or not self.health().connected:
            self._server.failed(str(exc))
        else:
            self._server.answered(str(exc))


class McpManager:
    """The configured MCP servers: their tools, health, quarantine and shutdown."""

    def __init__(
        self,
        configs: Sequence[ServerConfig] = (),
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
        self._policy = _Policy(failures_to_quarantine, quarantine_seconds, clock)
        self._servers: dict[str, _Server] = {}
        self._max_chars = max_chars
        self._background: set[asyncio.Future[Any]] = set()
        self._closed = False
        self.configure(configs)

    def configure(self, configs: Sequence[ServerConfig]) -> None:
        """Make the set exactly ``configs``: new servers join (connected on first use),
        changed ones are closed and start afresh, missing ones are closed."""
        wanted: dict[str, ServerConfig] = {}
        for config in configs:
            if config.name in wanted:
                raise ValueError(f"two MCP servers are named {config.name!r}")
            wanted[config.name] = config
        servers: dict[str, _Server] = {}
        for name, config in wanted.items():
            server = self._servers.pop(name, None)
            if server is not None and server.config != config:
                server = self._renew(server, config)
            servers[name] = server or _Server(config, self._policy)
        for server in self._servers.values():
            self._retire(server)
        self._servers = servers

    @property
    def names(self) -> list[str]:
        """Every configured server's name, enabled or not, in configuration order."""
        return list(self._servers)

    def config(self, name: str) -> ServerConfig | None:
        server = self._servers.get(name)
        return None if server is None else server.config

    async def tools(self) -> list[McpTool]:
        """Every reachable server's tools, listed concurrently.

        A server that is disabled, quarantined, failing or slower than its own
        ``timeout_seconds`` contributes nothing; the others are not held up by it.
        """
        return (await self.listing()).tools

    async def listing(
        self, names: Iterable[str] | None = None, *, wait: float | None = None
    ) -> Listing:
        """The tools of ``names`` (default: every server), listed concurrently, and a
        reason for each server that brought none.

        Each server is given its own ``timeout_seconds``; with ``wait``, this returns
        after at most ``wait`` seconds and a slower server's listing carries on in the
        background (its tools are cached for the next request).
        """
        problems: dict[str, str] = {}
        if self._closed:
            return Listing([], {})
        chosen: list[_Server] = []
        for name in dict.fromkeys(self._servers if names is None else names):
            server = self._servers.get(name)
            if server is None:
                problems[name] = f"there is no MCP server named {name!r}"
            elif not server.config.enabled:
                problems[name] = f"{server.label} is disabled"
            elif server.quarantined():
                problems[name] = _quarantine_text(server)
            else:
                chosen.append(server)
        tasks = {server.config.name: self._listing_task(server) for server in chosen}
        if wait is None:
            pending = [task for task in tasks.values() if not task.done()]
            if pending:
                await asyncio.wait(pending)
        else:
            # each listing is waited for until ``wait`` after it began: one that earlier
            # requests already waited for is not waited for again
            now = time.monotonic()
            deadlines = {
                tasks[server.config.name]: server.listing_started + wait
                for server in chosen
                if not tasks[server.config.name].done()
            }
            fresh = {task: end for task, end in deadlines.items() if end > now}
            if fresh:
                await asyncio.wait(fresh, timeout=max(fresh.values()) - now)
        tools: list[McpTool] = []
        for server in chosen:
            name = server.config.name
            task = tasks[name]
            if not task.done():
                problems[name] = (
                    f"{server.label} is still connecting; its tools will be offered once it answers"
                )
            elif task.cancelled() or task.exception() is not None:
                problems[name] = f"{server.label} was reconfigured while its tools were listed"
            elif found := task.result():
                tools.extend(found)
                connection = server.connection
                left_out = connection.health().skipped if connection is not None else ()
                if left_out:
                    problems[name] = (
                        f"{server.label}: {len(left_out)} tool(s) with a schema a model cannot "
                        f"use ({', '.join(t.name for t in left_out[:5])})"
                    )
            elif server.last_error is not None:
                problems[name] = f"{server.label} is unavailable ({_kind(server.last_error)})"
        return Listing(tools, problems)

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

        ``quarantined_for_seconds`` is how long the quarantine has left (None: none);
        ``latency_ms`` is that of the last successful call or listing;
        ``skipped_tools`` are the tools its last listing left out (unusable schemas).
        """
        report: list[dict[str, Any]] = []
        for server in self._servers.values():
            connection = server.connection
            skipped = connection.health().skipped if connection is not None else ()
            report.append(
                {
                    "name": server.config.name,
                    "transport": server.config.transport,
                    "enabled": server.config.enabled,
                    "connected": connection is not None and connection.health().connected,
                    "quarantined_for_seconds": server.quarantine_left(),
                    "consecutive_failures": server.failures,
                    "last_error": server.last_error,
                    "tool_count": server.tool_count,
                    "latency_ms": server.latency_ms,
                    "skipped_tools": [{"name": t.name, "reason": t.reason} for t in skipped],
                }
            )
        return report

    async def close(self) -> None:
        """Close every connection (stdio processes are stopped); the manager is then done."""
        self._closed = True
        for server in self._servers.values():
            self._retire(server)
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

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

    def _listing_task(self, server: _Server) -> asyncio.Task[list[McpTool]]:
        task = server.listing
        if task is None or task.done():
            task = asyncio.create_task(self._list(server), name=f"mcp-tools:{server.config.name}")
            server.listing = task
            server.listing_started = time.monotonic()
            self._keep(task)
        return task

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

    def _renew(self, server: _Server, config: ServerConfig) -> _Server:
        """A changed server: a fresh record, and its connection (the same object, which
        tools of a running turn hold) reconnects with the new settings on next use."""
        fresh = _Server(config, self._policy)
        if server.listing is not None:
            server.listing.cancel()
        connection = server.connection
        if connection is not None:
            connection.adopt(fresh)
            fresh.connection = connection
        return fresh

    def _retire(self, server: _Server) -> None:
        """Stop using ``server``: its listing is cancelled and its connection closed in
        the background (``close`` waits for both)."""
        if server.listing is not None:
            server.listing.cancel()
        connection, server.connection = server.connection, None
        if connection is not None:
            self._keep(asyncio.ensure_future(connection.close()))

    def _abandon(self, task: asyncio.Task[Any]) -> None:
        """Cancel a listing past its deadline and let it clean up in the background."""
        task.cancel()
        self._keep(task)

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(_forget(self._background))


def _kind(error: str) -> str:
    """What kind of failure ``error`` is, in words that hold no paths, output or
    addresses: users read it in notes; admins see ``last_error`` whole."""
    lowered = error.lower()
    if "did not answer within" in lowered or "did not list its tools within" in lowered:
        return "it did not answer in time"
    if "could not connect" in lowered or "backing off" in lowered or "retry" in lowered:
        return "it could not be reached or started"
    if "closed" in lowered or "exited" in lowered or "lost" in lowered:
        return "its connection was lost"
    return "it answered with an error"


def _quarantine_text(server: _Server) -> str:
    left = server.quarantine_left() or 0
    return (
        f"{server.label} is quarantined for another {left:.0f} s after "
        f"{server.failures} failures in a row ({_kind(server.last_error or '')})"
    )


def _forget(tasks: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    def done(task: asyncio.Future[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the deadline already recorded the failure

    return done


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
