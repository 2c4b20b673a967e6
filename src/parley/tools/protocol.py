"""The tool protocol: what the agent loop needs from a server-side tool.

A server tool has a ``spec`` (what the model is offered), says whether it is ``pinned``
(never hidden by the active-tool LRU), and ``run``s with parsed arguments and a
``ToolContext``. Expected failures are raised as ``ToolError`` (the message goes back to
the model as an error result); a tool never crashes the turn.

What does not belong here: how tools are written (``function.py``), which exist
(``registry.py``), how their output is capped or spilled (``output.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from parley.messages import ToolSpec

if TYPE_CHECKING:
    from parley.knowledge.service import KnowledgeService
    from parley.memory.service import MemoryService
    from parley.patterns import Budget
    from parley.settings import ToolSettings
    from parley.store.search import MessageMatch


@dataclass(frozen=True, slots=True)
class ToolOutput:
    content: str
    is_error: bool = False


class ToolError(Exception):
    """A tool's expected failure; ``str(error)`` is what the model is told."""


class Session(Protocol):
    """What a tool may ask of the turn that runs it."""

    def activate(self, names: Sequence[str]) -> list[str]:
        """Bring hidden tools back; returns the names now active."""
        ...

    def capabilities(self) -> dict[str, Any]:
        """The tools and retrieval this request really has."""
        ...


@dataclass(frozen=True, slots=True)
class Reach:
    """The knowledge and memory a turn may reach (its tools and its retrieval)."""

    assistant_id: str | None = None
    knowledge_bases: tuple[str, ...] = ()
    """Knowledge base ids, already checked to be the owner's."""
    knowledge: KnowledgeService | None = None
    memory: MemoryService | None = None
    memory_scope: str | None = None
    """An assistant id (its own memories), "global", or None (memory is off)."""
    memory_retrieval: bool = False
    """Memories are retrieved per request (else the newest are put in the prompt)."""
    citations: CitationSink | None = None
    searches: Budget | None = None
    """What the regular expressions of the turn's workspace searches may take in all."""

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools this reach brings: knowledge tools with knowledge bases, memory
        tools with memory."""
        names: tuple[str, ...] = ()
        if self.knowledge_bases and self.knowledge is not None:
            names += ("kb_search", "kb_list")
        if self.memory_scope is not None and self.memory is not None:
            names += ("memory_remember", "memory_recall", "memory_forget")
        return names


NO_REACH = Reach()


class MessageSearch(Protocol):
    """The owner's stored messages, searched (``conversation_search``)."""

    async def search_messages(self, owner: str, query: str, *, limit: int) -> list[MessageMatch]:
        """The owner's messages holding ``query``, newest first."""
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may use for one call: who asks and where, the ``tools`` settings,
    and what the turn may reach. Nothing else of the server's."""

    owner: str
    """The caller (API key owner); tools only ever see this owner's data."""
    conversation_id: str | None
    call_id: str
    workspace: Path
    """This conversation's folder (may not exist yet; tools that write create it)."""
    settings: ToolSettings
    """The ``tools`` section (caps, the address guard, the shell)."""
    reach: Reach = NO_REACH
    """The knowledge and memory this request may reach, where a knowledge tool records
    what it returned (citations), and the budget of the turn's workspace searches."""
    messages: MessageSearch | None = None
    """The stored messages (None: this request cannot search them)."""
    session: Session | None = None


class CitationSink(Protocol):
    def add(self, snippets: Sequence[Any]) -> list[int]:
        """Record knowledge snippets a tool returned; returns their citation numbers."""
        ...


class Tool(Protocol):
    @property
    def spec(self) -> ToolSpec: ...

    @property
    def pinned(self) -> bool: ...

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        """Run with arguments already parsed from JSON (not yet validated)."""
        ...
