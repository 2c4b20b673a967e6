"""The building of blocks that every knowledge-path reader shares.

Here: paragraphs split at blank lines (``text_blocks``); the heading path
(``Sections``); a table's rows in groups of up to ``ROW_BLOCK_CHARS``, each starting with
the header row (``row_blocks``); whitespace squashed (``squash``); and the finished
document, refused when it holds no blocks (``finish``).

What does not belong here: decoding bytes and cleaning text (``text.py``), anything
particular to one format (its module); splitting blocks into chunks
(``knowledge/chunking.py``).
"""

from __future__ import annotations

import re

from parley.documents.types import Block, ExtractedDocument, UnreadableDocument

ROW_BLOCK_CHARS = 1000
"""The most characters in a row group (header included), unless one row is longer."""

_BLANK_LINES = re.compile(r"\n[ \t\f\v\r]*\n\s*")


def finish(blocks: list[Block], title: str | None, pages: int | None = None) -> ExtractedDocument:
    """The document of ``blocks``, its ``title`` on one line; ``UnreadableDocument`` when
    there are no blocks."""
    if not blocks:
        raise UnreadableDocument("the document holds no text")
    title = " ".join(title.split()) if title else None
    return ExtractedDocument(tuple(blocks), title=title or None, pages=pages)


def text_blocks(text: str, *, section: tuple[str, ...], page: int | None = None) -> list[Block]:
    """Blocks of ``text`` split at blank lines (``text`` is already clean)."""
    return [
        Block(part, page=page, section=section)
        for part in (p.strip() for p in _BLANK_LINES.split(text))
        if part
    ]


class Sections:
    """The heading path: ``enter(level, title)`` returns the path ending at the heading."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, str]] = []
        self.path: tuple[str, ...] = ()

    def enter(self, level: int, title: str) -> tuple[str, ...]:
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self.path = tuple(t for _, t in self._stack)
        return self.path


def row_blocks(rows: list[str], section: tuple[str, ...]) -> list[Block]:
    """Row groups of up to ``ROW_BLOCK_CHARS``, each starting with the header row."""
    rows = [row for row in rows if row.strip()]
    if not rows:
        return []
    header, blocks = rows[0], []
    group, length = [header], len(header)
    for row in rows[1:]:
        if len(group) > 1 and length + 1 + len(row) > ROW_BLOCK_CHARS:
            blocks.append(Block("\n".join(group), section=section))
            group, length = [header], len(header)
        group.append(row)
        length += 1 + len(row)
    blocks.append(Block("\n".join(group), section=section))
    return blocks


def squash(text: str) -> str:
    """``text`` on one line, each run of whitespace one space."""
    return " ".join(text.split())
