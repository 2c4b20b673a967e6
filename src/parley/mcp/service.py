"""The MCP servers Parley knows and which of their tools a request gets.

``McpService`` keeps the ``McpManager`` in step with the two places servers come from:
the ``mcp.servers`` of the settings (the operator's; read-only over the API) and the
servers added over the admin API (rows of ``store/mcp_servers.py``; re-read every
``mcp.refresh_seconds`` so that every instance sees a change). A stored server never
shadows a configured one of the same name.

A request chooses servers with an ``McpChoice``: every enabled server (``use_mcp``),
named servers (an assistant's ``mcp_servers``), and tools named in ``tools``
(``mcp__{server}__{tool}``, or ``mcp__{server}__*`` for all of a server's tools).
``tools_for`` lists what was chosen, waiting at most ``mcp.list_wait_seconds``; a server
that is down, quarantined or slow costs the request a note, never the reply.

What does not belong here: connections and quarantine (``client.py``, ``manager.py``),
the rows and the admin routes (``store/mcp_servers.py``, ``api/mcp.py``), putting the
tools in front of the model (``conversations/service.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from parley.errors import InvalidRequest, ParleyError
from parley.mcp.config import server_config
from parley.mcp.manager import Listing, McpManager
from parley.mcp.tools import McpTool
from parley.messages import ToolSpec
from parley.settings.mcp import McpServerSettings, McpSettings, StoredServer
from parley.tools.protocol import ToolContext, ToolOutput

log = logging.getLogger(__name__)

PREFIX = "mcp__"
EVERY_TOOL = "*"


class ServerRows(Protocol):
    """Where servers added over the API are kept (``store.mcp_servers.McpServerStore``)."""

    async def list(self) -> list[StoredServer]: ...


def is_mcp_tool(name: str) -> bool:
    return name.startswith(PREFIX)


def split_tool_name(name: str) -> tuple[str, str] | None:
    """``mcp__{server}__{tool}`` -> (server, tool); ``tool`` may be ``*``. None when the
    name is not of that form (server names never hold ``__``)."""
    if not is_mcp_tool(name):
        return None
    server, sep, tool = name[len(PREFIX) :].partition("__")
    if not server or not sep or not tool:
        return None
    return server, tool


@dataclass(frozen=True, slots=True)
class McpChoice:
    """Which MCP servers and tools one request may use."""

    every_server: bool = False
    """``use_mcp``: every enabled server."""
    servers: tuple[str, ...] = ()
    """Servers chosen by name (an assistant's ``mcp_servers``), all their tools."""
    tools: tuple[str, ...] = ()
    """Tool names from ``tools`` (``mcp__{server}__{tool}`` or ``mcp__{server}__*``)."""
    resumed: tuple[str, ...] = ()
    """Tools of approved calls a paused reply runs now: their servers are waited for as
    long as they take (their own ``timeout``), not ``list_wait_seconds``."""

    def __bool__(self) -> bool:
        return self.every_server or bool(self.servers) or bool(self.tools) or bool(self.resumed)

    def named_servers(self) -> list[str]:
        """The servers named by ``servers``, ``tools`` and ``resumed``, each once."""
        named = (*self.tools, *self.resumed)
        from_tools = [parts[0] for name in named if (parts := split_tool_name(name))]
        return list(dict.fromkeys((*self.servers, *from_tools)))


@dataclass(frozen=True, slots=True)
class ChosenTools:
    tools: list[McpTool]
    notes: list[str]
    """Why a chosen server or tool is missing from this reply, one sentence each."""
    missing: dict[str, str] = field(default_factory=dict)
    """Resumed tools that are not available -> why (their approved calls get that as
    their error result)."""


class McpService:
    def __init__(
        self,
        settings: McpSettings,
        rows: ServerRows | None = None,
        *,
        admit: Callable[[McpServerSettings], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``admit`` raises ``ParleyError`` for a stored server the current rules refuse
        (``api/mcp.py``'s allowlists, which may have been tightened since it was added):
        such a server stays listed, disabled, with the reason as ``refused``."""
        self.settings = settings
        self._rows = rows
        self._admit = admit
        self._refused: dict[str, str] = {}
        self._clock = clock
        self._stored: dict[str, StoredServer] = {}
        self._loaded_at: float | None = None
        self._lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        self.manager = McpManager(
            failures_to_quarantine=settings.failures_to_quarantine,
            quarantine_seconds=settings.quarantine_seconds,
            max_chars=settings.max_output_chars,
        )
        self._apply()

    # -- the set of servers ---------------------------------------------------------------

    async def start(self) -> None:
        """Read the stored servers, then re-read them every ``refresh_seconds`` in the
        background (a server deleted on another instance stops here too)."""
        await self.reload()
        if self._rows is not None and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_forever(), name="mcp-refresh")

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.refresh_seconds)
            await self.refresh()

    async def reload(self, *, older_than: float | None = None) -> None:
        """Read the stored servers now (after a change over the API); with
        ``older_than``, only if the last read is older than that many seconds."""
        if self._rows is None:
            return
        async with self._lock:
            loaded = self._loaded_at
            fresh = loaded is not None and self._clock() - loaded < (older_than or 0)
            if older_than is not None and fresh:
                return  # another request read them while this one waited
            rows = await self._rows.list()
            self._stored = {row.name: row for row in rows}
            self._loaded_at = self._clock()
            self._apply()

    async def refresh(self) -> None:
        """Re-read the stored servers if the last read is older than ``refresh_seconds``
        (another instance may have changed them); a failed read keeps the last one."""
        if self._rows is None:
            return
        loaded = self._loaded_at
        if loaded is not None and self._clock() - loaded < self.settings.refresh_seconds:
            return
        try:
            await self.reload(older_than=self.settings.refresh_seconds)
        except Exception:
            log.exception("could not read the MCP servers added over the API")
            self._loaded_at = self._clock()  # not again at once

    def _apply(self) -> None:
        configs = [server_config(name, server) for name, server in self.settings.servers.items()]
        self._refused = {}
        for name, row in self._stored.items():
            if name in self.settings.servers:
                continue
            server = row.settings
            if self._admit is not None:
                try:
                    self._admit(server)
                except ParleyError as exc:
                    self._refused[name] = exc.message
                    server = server.model_copy(update={"enabled": False})
            configs.append(server_config(name, server))
        self.manager.configure(configs)

    def configured(self, name: str) -> bool:
        """Whether the server is defined in the settings (and so not editable)."""
        return name in self.settings.servers

    def known(self, name: str) -> bool:
        return self.manager.config(name) is not None

    def describe(self) -> list[dict[str, Any]]:
        """Every server with its source and health (no secrets; see ``api/mcp.py`` for
        what admins see beside this)."""
        health = {entry["name"]: entry for entry in self.manager.health()}
        described: list[dict[str, Any]] = []
        for name in self.manager.names:
            stored = self._stored.get(name)
            entry = dict(health[name])
            entry["source"] = "config" if self.configured(name) else "api"
            entry["created_at"] = (
                stored.created_at if stored and not self.configured(name) else None
            )
            entry["refused"] = self._refused.get(name)
            described.append(entry)
        return described

    def settings_of(self, name: str) -> McpServerSettings | None:
        if name in self.settings.servers:
            return self.settings.servers[name]
        stored = self._stored.get(name)
        return None if stored is None else stored.settings

    # -- a request's tools ----------------------------------------------------------------

    def check(self, names: Iterable[str], param: str = "tools") -> None:
        """Refuse MCP tool names that are malformed or name a server that does not exist
        (a 400 before anything runs)."""
        for name in names:
            parts = split_tool_name(name)
            if parts is None:
                raise InvalidRequest(
                    f"bad MCP tool name {name!r}: use mcp__{{server}}__{{tool}} or "
                    "mcp__{server}__*",
                    param=param,
                    code="unknown_tool",
                )
            if not self.known(parts[0]):
                raise InvalidRequest(
                    f"unknown MCP server {parts[0]!r} in {name!r}", param=param, code="unknown_tool"
                )

    async def tools_for(self, choice: McpChoice) -> ChosenTools:
        """The chosen tools of the chosen servers, waiting at most ``list_wait_seconds``."""
        if not choice:
            return ChosenTools([], [])
        await self.refresh()
        named = choice.named_servers()
        everything = [
            name
            for name in self.manager.names
            if (config := self.manager.config(name)) is not None and config.enabled
        ]
        servers = list(dict.fromkeys((*everything, *named))) if choice.every_server else named
        if not servers:
            return ChosenTools([], [])  # the common case with no MCP servers at all
        patient = {parts[0] for name in choice.resumed if (parts := split_tool_name(name))}
        slow, quick = await asyncio.gather(
            self.manager.listing([name for name in servers if name in patient]),
            self.manager.listing(
                [name for name in servers if name not in patient],
                wait=self.settings.list_wait_seconds,
            ),
        )
        listing = Listing(slow.tools + quick.tools, {**slow.problems, **quick.problems})
        globs = [split_tool_name(name) for name in choice.tools]
        whole = set(choice.servers) | {g[0] for g in globs if g is not None and g[1] == EVERY_TOOL}
        exact = {
            name
            for name in (*choice.tools, *choice.resumed)
            if not name.endswith("__" + EVERY_TOOL)
        }
        chosen: list[McpTool] = []
        seen: set[str] = set()
        notes = [f"MCP tools left out: {problem}" for problem in listing.problems.values()]
        for tool in listing.tools:
            name = tool.spec.name
            server = tool.connection.config.name
            if not (choice.every_server or server in whole or name in exact):
                continue
            if name in seen:
                notes.append(f"MCP tools left out: two tools of {server!r} are named {name!r}")
                continue
            seen.add(name)
            chosen.append(tool)
        missing: dict[str, str] = {}
        for name in sorted(exact - seen):
            parts = split_tool_name(name)
            if parts is None:
                continue
            problem = listing.problems.get(parts[0])
            if problem is None:
                problem = f"server {parts[0]!r} has no tool {name!r}"
                notes.append(f"MCP tools left out: {problem}")
            if name in choice.resumed:
                missing[name] = problem
        return ChosenTools(chosen, notes, missing)

    def health(self) -> list[dict[str, Any]]:
        return self.manager.health()

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        await self.manager.close()


@dataclass(frozen=True, slots=True)
class UnavailableTool:
    """Stands in for an MCP tool whose server is not available when an approved call of a
    paused reply runs: the call gets the reason as its error result (not "unknown tool")."""

    name: str
    reason: str

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, "Unavailable now.", {"type": "object", "properties": {}})

    @property
    def pinned(self) -> bool:
        return False

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput(f"Not run: {self.reason}", is_error=True)
