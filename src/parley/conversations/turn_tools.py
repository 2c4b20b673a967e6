"""Which server tools one turn is offered: the built-ins and knowledge and memory tools it
names or brings, and its MCP tools.

``TurnTools`` checks the request's tool names before anything runs (a client tool may not
share a server tool's name; an MCP name must name a server that exists), lists them in
the order they are offered, and joins the turn's MCP tools (``use_mcp``, the assistant's
``mcp_servers``, names in ``tools``, the tools of approved calls being resumed) into a
registry made for the turn. A server that is down costs the turn a note, never the turn.

What does not belong here: choosing and listing MCP servers (``mcp/service.py``), the
tools themselves (``tools/``), approval policies (``assistants.py``).
"""

from __future__ import annotations

from parley.conversations.turns import ChatTurn
from parley.errors import InvalidRequest
from parley.mcp.service import McpChoice, McpService, UnavailableTool, is_mcp_tool
from parley.providers.registry import ResolvedModel
from parley.settings import Settings
from parley.store.assistants import Assistant
from parley.tools.protocol import Tool
from parley.tools.registry import ToolRegistry, offer_order


class TurnTools:
    def __init__(self, settings: Settings, tools: ToolRegistry, mcp: McpService | None) -> None:
        self._settings = settings
        self._tools = tools
        self._mcp = mcp

    async def check(self, turn: ChatTurn, assistant: Assistant | None) -> None:
        """The request's tool names, checked (400s) before anything changes."""
        self.names(turn, assistant)
        named = [name for name in turn.server_tools if is_mcp_tool(name)]
        if named:
            if self._mcp is None:
                raise InvalidRequest(f"unknown server tool {named[0]!r}", param="tools")
            await self._mcp.refresh()  # a server added on another instance counts
            self._mcp.check(named)

    def names(
        self, turn: ChatTurn, assistant: Assistant | None = None, reached: tuple[str, ...] = ()
    ) -> tuple[str, ...]:
        """The request's server tools, the assistant's, the configured defaults and the
        knowledge and memory tools its reach brings (each once), in the order they are
        offered (``offer_order``)."""
        client = {spec.name for spec in turn.tools}
        clash = client & set(turn.server_tools)
        if clash:
            raise InvalidRequest(
                f"client tool names clash with server tools: {sorted(clash)}", param="tools"
            )
        # a configured default gives way to a client tool of the same name
        defaults = [n for n in self._settings.tools.default_tools if n not in client]
        own = [n for n in (assistant.tools if assistant else ()) if n not in client]
        brought = [n for n in reached if n not in client]
        names = dict.fromkeys((*turn.server_tools, *own, *defaults, *brought))
        return tuple(offer_order(name for name in names if name in self._tools))

    async def with_mcp(
        self,
        turn: ChatTurn,
        assistant: Assistant | None,
        model: ResolvedModel,
        server_tools: tuple[str, ...],
        resumed: tuple[str, ...],
        notes: list[str],
    ) -> tuple[ToolRegistry | None, tuple[str, ...]]:
        """The request's MCP tools joined to its server tools: (the registry with them,
        or None when there are none; the tools offered). ``resumed``: the tools a resumed
        reply called (its MCP ones stay offered). A server that is down costs a note in
        ``notes``, never the turn."""
        if self._mcp is None or not model.provider.supports_tools:
            return None, server_tools
        use = turn.use_mcp
        if use is None:  # Chatchat's route uses MCP only when asked, as Chatchat does
            use = self._mcp.settings.use_by_default and turn.source != "chatchat"
        own = assistant.tools if assistant is not None else ()
        named = (*turn.server_tools, *own, *self._settings.tools.default_tools)
        choice = McpChoice(
            every_server=use,
            servers=assistant.mcp_servers if assistant is not None else (),
            tools=tuple(dict.fromkeys(n for n in named if is_mcp_tool(n))),
            resumed=tuple(n for n in resumed if is_mcp_tool(n)),
        )
        if not choice:
            return None, server_tools
        chosen = await self._mcp.tools_for(choice)
        notes.extend(chosen.notes)
        client = {spec.name for spec in turn.tools}  # a client's tool of the same name wins
        tools: list[Tool] = [tool for tool in chosen.tools if tool.spec.name not in client]
        # an approved call whose server is down gets the reason, not "unknown tool"
        tools += [UnavailableTool(name, reason) for name, reason in chosen.missing.items()]
        if not tools:
            return None, server_tools
        names = (*server_tools, *(tool.spec.name for tool in tools))
        return self._tools.with_tools(tools), tuple(offer_order(dict.fromkeys(names)))
