"""The registry of server-side tools: tools Parley runs itself (built-ins, MCP, knowledge).

Clients name them with plain strings in ``tools`` (the Langchain-Chatchat convention);
the registry expands a name into the full definition the model is offered. The agent
loop runs them; the registry only knows what exists.
"""

from __future__ import annotations

from parley.messages import ToolSpec


class ToolRegistry:
    def __init__(self, specs: list[ToolSpec] | None = None) -> None:
        self._specs = {spec.name: spec for spec in specs or ()}

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())
