"""The server-tool registry's offer order."""

from __future__ import annotations

from parley.tools.registry import offer_order


def test_server_tools_are_offered_in_rikkahubs_order() -> None:
    names = [
        "get_session_capabilities",
        "mcp__github__issues",
        "kb_search",
        "workspace_shell",
        "conversation_search",
        "current_time",
        "web_fetch",
        "workspace_read",
        "mcp__files__read",
    ]
    assert offer_order(names) == [
        "web_fetch",
        "current_time",
        "workspace_read",
        "conversation_search",
        "workspace_shell",
        "mcp__github__issues",
        "mcp__files__read",
        "kb_search",
        "get_session_capabilities",
    ]
