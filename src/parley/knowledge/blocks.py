"""What the document readers of ``extract.py`` and ``formats.py`` share: bytes decoded to
text that can be stored, and the building of blocks.

Here: ``decode`` (a byte-order mark, else the declared charset, else UTF-8, else
charset_normalizer's guess when it is installed, else ``documents.decode_text``) and
``clean`` (no NUL, no lone surrogate, ``\\n`` line ends); paragraphs split at blank lines
(``text_blocks``); the heading path (``Sections``); a table's rows in groups of up to
``ROW_BLOCK_CHARS``, each starting with the header row (``row_blocks``); whitespace
squashed (``squash``); and the finished document, refused when it holds no blocks
(``finish``).

What does not belong here: choosing the format and dispatching (``extract.py``), and
anything particular to one format (text and Markdown in ``extract.py``, HTML, PDF, DOCX,
CSV and JSON in ``formats.py``); splitting blocks into chunks (``chunking.py``).
"""

from __future__ import annotations

import codecs
import importlib
import re
from typing import Any

from parley.knowledge.types import Block, ExtractedDocument, UnreadableDocument
from parley.transforms.documents import decode_text

ROW_BLOCK_CHARS = 1000
"""The most characters in a row group (header included), unless one row is longer."""

BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_BLANK_LINES = re.compile(r"\n[ \t\f\v\r]*\n\s*")


def decode(data: bytes, charset: str | None = None) -> str:
    """``data`` as clean text (``clean``), decoded as the module docstring says; bad bytes
    become U+FFFD."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return clean(data.decode(encoding, errors="replace"))
    for declared in (charset, "utf-8"):
        if declared:
            try:
                return clean(data.decode(declared))
            except (UnicodeDecodeError, LookupError):
                pass
    guess = _charset_normalizer_guess(data)
    return clean(guess if guess is not None else decode_text(data))


def _charset_normalizer_guess(data: bytes) -> str | None:
    try:  # optional: used when installed
        module: Any = importlib.import_module("charset_normalizer")
    except ImportError:
        return None
    best = module.from_bytes(data).best()
    return None if best is None else str(best)


def clean(text: str) -> str:
    """Text a database can store: no NUL, no lone surrogate, ``\\n`` line ends."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (JSON escapes, PDF text)
            text = _SURROGATE.sub("\ufffd", text)
    return text


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
