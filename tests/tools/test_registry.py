"""The tool registry: tools by name, in registration order, names unique."""

from __future__ import annotations

import pytest

from parley.settings import Settings
from parley.tools.builtins import build_registry
from parley.tools.function import FunctionTool, function_tool
from parley.tools.registry import ToolRegistry


def make(name: str) -> FunctionTool:
    async def tool() -> str:
        """A tool."""
        return name

    return function_tool(tool, name=name)


def test_register_and_look_up() -> None:
    first, second = make("first"), make("second")
    registry = ToolRegistry([first])
    registry.register(second)
    assert len(registry) == 2
    assert registry.names() == ["first", "second"]
    assert registry.get("second") is second
    assert registry.get("third") is None
    assert registry.spec("first") == first.spec
    assert registry.spec("third") is None
    assert registry.specs() == [first.spec, second.spec]
    assert "first" in registry
    assert "third" not in registry
    assert list(registry) == [first, second]


def test_a_duplicate_name_is_refused() -> None:
    registry = ToolRegistry([make("same")])
    with pytest.raises(ValueError, match="same"):
        registry.register(make("same"))
    assert len(registry) == 1


def test_empty() -> None:
    registry = ToolRegistry()
    assert len(registry) == 0
    assert registry.specs() == []
    assert registry.names() == []


def test_build_registry_has_every_builtin() -> None:
    names = build_registry(Settings()).names()
    assert set(names) == {
        "current_time",
        "web_fetch",
        "workspace_list",
        "workspace_read",
        "workspace_write",
        "workspace_search",
        "conversation_search",
        "get_session_capabilities",
        "activate_tools",
    }
    registry = build_registry(Settings(tools={"shell": {"enabled": True}}))
    assert "workspace_shell" in registry
    assert len(registry) == len(names) + 1
    tools = list(registry)
    assert [t.spec.name for t in tools if t.pinned] == ["activate_tools"]
    for tool in tools:  # every built-in is fit to offer a model
        assert tool.spec.description
        assert tool.spec.parameters["type"] == "object"
