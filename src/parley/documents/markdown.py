"""Markdown for a knowledge base: ATX (``#`` .. ``######``) and setext (``===`` /
``---``) headings make the section path; paragraphs split at blank lines; fenced code
is one block and its ``#`` lines are not headings (an unclosed fence runs to the end).
The title is the first level-1 heading.

An attached Markdown file is plain text (``text.plain_text``).

What does not belong here: decoding (``text.py``), Markdown made from other formats
(``html.py``, ``docx.py``).
"""

from __future__ import annotations

import re

from parley.documents.blocks import Sections, finish
from parley.documents.types import Block, ExtractedDocument

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_NOT_SETEXT_TEXT = re.compile(r" {0,3}(?:[-*+>|]|\d+[.)])(?:\s|$)")


def read_markdown(text: str) -> ExtractedDocument:
    """``text`` (already clean) as a document of sections."""
    reader = _MarkdownReader()
    for line in text.split("\n"):
        reader.line(line)
    return reader.finish()


class _MarkdownReader:
    """Blocks of Markdown, a line at a time."""

    def __init__(self) -> None:
        self._sections = Sections()
        self._blocks: list[Block] = []
        self._title: str | None = None
        self._paragraph: list[str] = []
        self._code: list[str] = []
        self._fence: str | None = None

    def line(self, line: str) -> None:
        if self._fence is not None:
            self._code_line(line, self._fence)
            return
        first = line.lstrip()[:1]
        paragraph = self._paragraph
        if not first:
            self._flush()
        elif first == "#" and (atx := _ATX.match(line)):
            self._heading(len(atx.group(1)), (atx.group(2) or "").strip())
        elif first in "`~" and (opening := _FENCE.match(line)):
            self._flush()
            self._fence = opening.group(1)
        elif (
            first in "=-"
            and len(paragraph) == 1
            and _SETEXT.match(line)
            and not _NOT_SETEXT_TEXT.match(paragraph[0])
        ):
            name = paragraph.pop().strip()
            self._heading(1 if first == "=" else 2, name)
        else:
            paragraph.append(line)

    def finish(self) -> ExtractedDocument:
        self._flush()
        code = self._code
        if self._fence is not None and "".join(code).strip():  # an unclosed fence runs to the end
            self._blocks.append(Block("\n".join(code).strip("\n"), section=self._sections.path))
        return finish(self._blocks, self._title)

    def _code_line(self, line: str, fence: str) -> None:
        closing = line.strip()
        if closing.startswith(fence) and closing == closing[0] * len(closing):
            body = "\n".join(self._code).strip("\n")
            if body.strip():
                self._blocks.append(Block(body, section=self._sections.path))
            self._code.clear()
            self._fence = None
        else:
            self._code.append(line)

    def _flush(self) -> None:
        body = "\n".join(self._paragraph).strip()
        self._paragraph.clear()
        if body:
            self._blocks.append(Block(body, section=self._sections.path))

    def _heading(self, level: int, name: str) -> None:
        self._flush()
        if not name:
            return
        self._blocks.append(Block(name, section=self._sections.enter(level, name), heading=True))
        if level == 1 and self._title is None:
            self._title = name
