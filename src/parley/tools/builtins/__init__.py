"""The built-in server tools, and ``build_registry``, which registers them all.

Each module holds a family of tools written with ``function_tool``: ``session.py``
(time, conversation search, capabilities, ``activate_tools``), ``web.py``
(``web_fetch``), ``workspace.py`` (the per-conversation file tools and the optional
shell), ``calculate.py`` (Langchain-Chatchat's ``calculate``, under its name; its
``search_local_knowledgebase`` is the Chatchat door's, ``api/chatchat/kb_tool.py``,
registered by the app when knowledge is on); the memory tools
(``memory/tools.py``) and knowledge tools (``knowledge/tools.py``) live with their
services. Registering a tool only makes it exist: a request still has to enable it by
name (or ``tools.default_tools``, or the knowledge and memory of its assistant).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parley.settings import Settings
    from parley.tools.protocol import Tool
    from parley.tools.registry import ToolRegistry


def build_registry(settings: Settings, *, extra: Sequence[Tool] = ()) -> ToolRegistry:
    """Every built-in tool; ``workspace_shell`` only when ``tools.shell.enabled``; then
    ``extra``
    (an application's own tools; a name taken by a built-in one is a ValueError).

    The tool modules are imported here, not when the package is: importing one family
    (``builtins.session``) does not pull in the others' dependencies.
    """
    from parley.knowledge.tools import KNOWLEDGE_TOOLS
    from parley.memory.tools import MEMORY_TOOLS
    from parley.tools.builtins.calculate import calculate
    from parley.tools.builtins.session import (
        activate_tools,
        conversation_search,
        current_time,
        get_session_capabilities,
    )
    from parley.tools.builtins.web import web_fetch
    from parley.tools.builtins.workspace import WORKSPACE_TOOLS, workspace_shell
    from parley.tools.registry import ToolRegistry

    registry = ToolRegistry()
    registry.register(current_time)
    registry.register(web_fetch)
    for tool in WORKSPACE_TOOLS:
        registry.register(tool)
    if settings.tools.shell.enabled:
        registry.register(workspace_shell)
    registry.register(conversation_search)
    for tool in (*MEMORY_TOOLS, *KNOWLEDGE_TOOLS):
        registry.register(tool)
    registry.register(calculate)
    registry.register(get_session_capabilities)
    registry.register(activate_tools)
    for added in extra:
        registry.register(added)
    return registry
