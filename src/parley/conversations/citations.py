"""A reply's citations: exactly the knowledge chunks its request was given, numbered as
the model saw them.

The knowledge transformer's snippets come first (source numbers 1..n, the numbers in
``<knowledge_context>``); each chunk a knowledge tool returns afterwards gets the next
number, unless it was already cited (then it keeps its number). Nothing else becomes a
citation: a reply can only point at passages that were really retrieved for it.

What does not belong here: saving them (``store/citations.py``), retrieval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from parley.store.citations import Citation
from parley.transforms.protocol import Snippet, UsedSnippet

EXCERPT_CHARS = 2_000
"""The most of a chunk's text kept as a citation's excerpt."""


class Citations:
    """The citations of one reply, filled while it is prepared and while its tools run."""

    def __init__(self) -> None:
        self._items: list[Citation] = []
        self._by_chunk: dict[str, int] = {}

    def restore(self, saved: Sequence[Citation]) -> None:
        """Carry on from a paused reply's saved citations: their numbers stay, and the
        same chunks are not cited twice."""
        for citation in saved:
            self._items.append(citation)
            if citation.chunk_id is not None:
                self._by_chunk.setdefault(str(citation.chunk_id), citation.rank)

    def from_context(self, used: Sequence[UsedSnippet]) -> None:
        for item in used:
            if item.snippet.id not in self._by_chunk:
                self._append(item.snippet, item.excerpt, "context")

    def add(self, snippets: Sequence[Any]) -> list[int]:
        """Record the snippets a knowledge tool returned; their source numbers."""
        numbers = []
        for snippet in snippets:
            assert isinstance(snippet, Snippet)
            known = self._by_chunk.get(snippet.id)
            if known is None:
                known = self._append(snippet, snippet.text[:EXCERPT_CHARS], "tool")
            numbers.append(known)
        return numbers

    def _append(self, snippet: Snippet, excerpt: str, source: Literal["context", "tool"]) -> int:
        rank = len(self._items) + 1
        self._items.append(
            Citation(
                rank=rank,
                source=source,
                chunk_id=int(snippet.id) if snippet.id.isdigit() else None,
                document_id=snippet.document_id,
                kb_id=snippet.kb_id,
                title=snippet.title or None,
                score=snippet.score,
                excerpt=excerpt,
                page=snippet.page,
                section=snippet.section,
            )
        )
        self._by_chunk.setdefault(snippet.id, rank)
        return rank

    @property
    def items(self) -> tuple[Citation, ...]:
        return tuple(self._items)

    def __len__(self) -> int:
        return len(self._items)
