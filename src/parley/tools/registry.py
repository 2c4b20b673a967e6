"""The registry of server-side tools: tools Parley runs itself (built-ins, MCP, knowledge).

Clients name them with plain strings in ``tools`` (the Langchain-Chatchat convention);
the registry expands a name into the full definition the model is offered and hands the
agent loop the ``Tool`` that runs it. The registry only knows what exists: which tools a
request may use, which are active this iteration (``lru.py``) and how their output is
capped (``output.py``) live elsewhere. The built-ins are registered by
``builtins.build_registry``; a request's MCP tools join them in a copy made for that
request (``with_tools``), since MCP servers come and go while the server runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from parley.messages import ToolSpec
from parley.tools.protocol import Tool


def offer_order(names: Iterable[str]) -> list[str]:
    """Server tools in the order the model is offered them (Rikkahub's): web search, the
    assistant's local tools, conversation search, the workspace shell, skills, MCP tools
    (``mcp__{server}__{tool}``), then memory and knowledge tools, and
    ``get_session_capabilities`` last. Within a group, the order given."""

    def group(name: str) -> int:
        if name.startswith("web_"):
            return 0
        if name == "conversation_search":
            return 2
        if name == "workspace_shell":
            return 3
        if name.startswith("skill"):
            return 4
        if name.startswith("mcp__"):
            return 5
        if name.startswith(("memory_", "kb_", "knowledge_")):
            return 6
        if name in ("get_session_capabilities", "activate_tools"):
            return 7
        return 1

    return sorted(names, key=group)


class ToolRegistry:
    """Server tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; a second tool with the same name is a ValueError."""
        name = tool.spec.name
        if name in self._tools:
            raise ValueError(f"a server tool named {name!r} is already registered")
        self._tools[name] = tool

    def with_tools(self, extra: Iterable[Tool]) -> ToolRegistry:
        """A new registry: these tools and ``extra`` (one request's MCP tools); a name
        already taken keeps its first tool."""
        combined = ToolRegistry()
        combined._tools = dict(self._tools)
        for tool in extra:
            combined._tools.setdefault(tool.spec.name, tool)
        return combined

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def spec(self, name: str) -> ToolSpec | None:
        tool = self._tools.get(name)
        return None if tool is None else tool.spec

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())
