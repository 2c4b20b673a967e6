"""What knowledge and memory a turn reaches (``tools.protocol.Reach``), from the request
and the assistant.

- Knowledge bases: those the request names (``knowledge_bases``, ids or names), else the
  assistant's. A base the request names must be the owner's (404 otherwise, before
  anything changes); a base the assistant names that is gone is skipped with a note.
- Memory: the assistant's ``memory`` settings: ``enabled`` turns it on, ``scope`` says
  whose memories (the assistant's own, or the owner's global ones), ``retrieval``
  whether they are searched per request or the newest are put in the system prompt.

What does not belong here: retrieval itself (``knowledge/``, ``memory/``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from parley.errors import InvalidRequest, NotFound
from parley.store.assistants import Assistant
from parley.tools.protocol import NO_REACH, Reach
from parley.transforms.protocol import Snippet, TransformContext

if TYPE_CHECKING:
    from parley.knowledge.service import KnowledgeService
    from parley.memory.service import MemoryService

MAX_BASES = 20
"""Knowledge bases one request may search."""


class Reaches:
    def __init__(self, knowledge: KnowledgeService | None, memory: MemoryService | None) -> None:
        self._knowledge = knowledge
        self._memory = memory

    async def resolve(
        self, owner: str, requested: Sequence[str], assistant: Assistant | None
    ) -> tuple[Reach, list[str]]:
        """The turn's reach and the notes it makes (bases skipped)."""
        notes: list[str] = []
        bases: tuple[str, ...] = ()
        knowledge = self._knowledge
        if requested:
            if knowledge is None:
                raise InvalidRequest(
                    "knowledge bases are turned off on this server",
                    param="knowledge_bases",
                    code="knowledge_disabled",
                )
            if len(requested) > MAX_BASES:
                raise InvalidRequest(
                    f"at most {MAX_BASES} knowledge bases per request", param="knowledge_bases"
                )
            try:
                found = await knowledge.store.resolve(owner, list(requested))
            except LookupError as exc:
                raise NotFound(
                    f"knowledge base {exc.args[0]!r} not found",
                    param="knowledge_bases",
                    code="knowledge_base_not_found",
                ) from None
            bases = tuple(b.id for b in found)
        elif assistant is not None and assistant.knowledge_bases and knowledge is not None:
            ids: list[str] = []
            for reference in assistant.knowledge_bases[:MAX_BASES]:
                try:
                    ids.extend(b.id for b in await knowledge.store.resolve(owner, [reference]))
                except LookupError:
                    notes.append(f"the assistant's knowledge base {reference!r} no longer exists")
            bases = tuple(dict.fromkeys(ids))
        memory_scope: str | None = None
        retrieval = False
        if assistant is not None and assistant.memory.enabled and self._memory is not None:
            memory_scope = assistant.id if assistant.memory.scope == "assistant" else "global"
            retrieval = assistant.memory.retrieval
        if not bases and memory_scope is None:  # tools may still search by name (Chatchat's)
            return (NO_REACH if knowledge is None else Reach(knowledge=knowledge)), notes
        return (
            Reach(
                assistant_id=assistant.id if assistant else None,
                knowledge_bases=bases,
                knowledge=knowledge,
                memory=self._memory if memory_scope else None,
                memory_scope=memory_scope,
                memory_retrieval=retrieval,
            ),
            notes,
        )


class MemoryRetrieval:
    """The memory transformer's retriever: the request's owner and memory scope."""

    def __init__(self, memory: MemoryService, top_k: int) -> None:
        self._memory = memory
        self._top_k = top_k

    async def retrieve(self, query: str, context: TransformContext) -> list[Snippet]:
        if context.memory_scope is None:
            return []
        retriever = self._memory.retriever(context.owner, context.memory_scope, self._top_k)
        return await retriever.retrieve(query, context)
