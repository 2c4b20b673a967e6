"""Langchain-Chatchat's tool names, as its WebUI sends them in ``tools``, in Parley's terms.

Chatchat's WebUI lists the server's tools (``GET /tools``) and sends the chosen ones by
name. Parley has its own tools under Chatchat's names where it has the same tool
(``search_local_knowledgebase``, ``calculate``: registered under those names); a few
others have a Parley equivalent under another name (below). A name Parley has no tool
for is skipped on Chatchat's route, as Chatchat skips tools it does not have, and the
reply says so in ``parley.notes``; on ``/v1`` it stays a 400 ``unknown_tool``, since an
OpenAI client that names a server tool means it.
"""

from __future__ import annotations

from parley.tools.registry import ToolRegistry

EQUIVALENTS: dict[str, str] = {
    "url_reader": "web_fetch",
    "shell": "workspace_shell",  # only when the server enables its shell
}
"""Chatchat's name to Parley's, where the tools do the same job."""


def resolve(name: str, registry: ToolRegistry) -> str | None:
    """The Parley tool a name given by a client stands for (None: Parley has none)."""
    if name in registry:
        return name
    equivalent = EQUIVALENTS.get(name)
    if equivalent is not None and equivalent in registry:
        return equivalent
    return None


def skipped_note(names: list[str]) -> str:
    """The reply's note on the tools it was given by name and does not have."""
    listed = ", ".join(names)
    return f"this server has no tool named {listed}: the reply was made without it"
