"""The registry of server-side tools: tools Parley runs itself (built-ins, MCP, knowledge).

Clients name them with plain strings in ``tools`` (the Langchain-Chatchat convention);
the registry expands a name into the full definition the model is offered and hands the
agent loop the ``Tool`` that runs it. The registry only knows what exists: which tools a
request may use, which are active this iteration (``lru.py``) and how their output is
capped (``output.py``) live elsewhere. The built-ins are registered by
``builtins.build_registry``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from parley.messages import ToolSpec
from parley.tools.protocol import Tool


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
