"""Chunking: an extracted document's blocks become the chunks that are indexed and cited.

``chunk(document, size, overlap)`` packs whole blocks, in order and joined by a blank
line, into chunks of at most ``size`` characters. Headings steer the cuts: a heading
starts a new chunk unless the current one is nearly empty (at most ``size // 8``
characters), and it sticks to the text after it, so a chunk never ends with a heading
(except one the document ends with, or one longer than a chunk).

A block longer than the room left is split: at the last sentence end in the second
half of the room (``.`` ``!`` ``?`` followed by a space; ``。`` ``！`` ``？`` ``；``), else
the last line break, else the last space, else hard at the room's end. A hard cut
moves back so it does not separate a combining mark, a variation selector, a skin-tone
modifier or a zero-width joiner from the character before it. (Python strings index
code points, so a surrogate pair cannot be split.) Text without spaces, like Chinese or
Japanese, is cut the same way. Whatever the cuts, every non-whitespace character of the
blocks is in some chunk, in order.

Overlap: when a chunk is cut because it is full, the next one begins with up to
``overlap`` characters from the end of the previous one (its last block or piece),
starting at a sentence start or after a space when one lies in the first half of that
tail. Not after a heading change: a chunk that starts with a heading, or in another
section, has no overlap.

Length bound: every chunk's text has at most ``size + overlap`` characters: its own
text at most ``size`` (separators included), the overlap at most ``overlap`` (its
separator included). Each chunk's ``page`` and ``section`` are those of its first
character after the overlap: the page it starts on and its heading path joined with
`` > `` (None at the top level).

What does not belong here: reading files (``extract.py``), embedding and storing chunks
(``embeddings.py``, ``store.py``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from parley.documents.types import Block, ExtractedDocument
from parley.knowledge.types import Chunk

SEPARATOR = "\n\n"
"""What joins two blocks in a chunk's text."""

_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s|[。！？；][」』”’）]*")
_SPACES = (" ", "\t", "\u3000")
_EXTENDERS = frozenset("\u200c\u200d\u20e3") | frozenset(map(chr, range(0xFE00, 0xFE10)))


def chunk(document: ExtractedDocument, size: int = 1400, overlap: int = 180) -> list[Chunk]:
    """The chunks of ``document``, in order: texts of at most ``size + overlap``
    characters. ``ValueError`` unless ``size >= 100`` and ``0 <= overlap < size / 2``."""
    if size < 100:
        raise ValueError(f"chunk size must be at least 100 characters, not {size}")
    if overlap < 0 or overlap * 2 >= size:
        raise ValueError(f"chunk overlap must be at least 0 and under size / 2, not {overlap}")
    blocks = [block for block in document.blocks if block.text.strip()]
    packer = _Packer(blocks, size, overlap)
    headings: list[int] = []
    for index, block in enumerate(blocks):
        if block.heading:
            headings.append(index)
            continue
        if headings:
            packer.headings(headings, last=False)
            headings = []
        packer.add_block(index)
    if headings:
        packer.headings(headings, last=True)
    packer.flush(carry=False)
    return packer.chunks


@dataclass(slots=True)
class _Segment:
    """``texts[block][start:end]``: a block, or a piece of one, in a chunk."""

    block: int
    start: int
    end: int


class _Packer:
    def __init__(self, blocks: list[Block], size: int, overlap: int) -> None:
        self.blocks = blocks
        self.texts = [block.text.strip() for block in blocks]
        self.size = size
        self.overlap = overlap
        self.nearly_empty = size // 8
        self.chunks: list[Chunk] = []
        self._segments: list[_Segment] = []  # the current chunk, overlap first
        self._first = 0  # the first segment after the overlap
        self._length = 0  # the current chunk's own text, separators included
        self._ends_with_heading = False
        self._carry: _Segment | None = None  # the previous chunk's end, to overlap

    def headings(self, indexes: list[int], *, last: bool) -> None:
        """Add the headings ``indexes``, which stick to the block after them (``last``:
        none follows)."""
        length = sum(len(self.texts[i]) + len(SEPARATOR) for i in indexes)
        if last:
            fits = self._length + length <= self.size
        else:
            fits = (
                self._length <= self.nearly_empty
                and self._length + length <= self.size - self.size // 4
            )
        if not fits:
            self.flush(carry=False)
        self._carry = None
        for index in indexes:
            self.add_block(index)

    def add_block(self, index: int) -> None:
        text = self.texts[index]
        heading = self.blocks[index].heading
        position = 0
        while position < len(text):
            room = self.size - self._length - (len(SEPARATOR) if self._segments else 0)
            remaining = len(text) - position
            if remaining <= room:
                self._add(index, position, len(text), heading)
                return
            if self._segments and (
                room <= 0
                or (
                    not self._ends_with_heading
                    and (remaining <= self.size or room < self.size // 4)
                )
            ):
                self.flush(carry=True)  # the block goes whole, or from here, into a new chunk
                continue
            end = _cut(text, position, position + room)
            self._add(index, position, end, heading)
            self.flush(carry=True)
            position = end
            while position < len(text) and text[position].isspace():
                position += 1

    def flush(self, *, carry: bool) -> None:
        """End the current chunk; ``carry``: the next one may begin with an overlap."""
        if not self._segments:
            if not carry:
                self._carry = None
            return
        first = self.blocks[self._segments[self._first].block]
        text = SEPARATOR.join(self.texts[s.block][s.start : s.end].strip() for s in self._segments)
        section = " > ".join(first.section) or None
        self.chunks.append(Chunk(len(self.chunks), text, page=first.page, section=section))
        self._carry = self._segments[-1] if carry else None
        self._segments = []
        self._first = 0
        self._length = 0
        self._ends_with_heading = False

    def _add(self, index: int, start: int, end: int, heading: bool) -> None:
        if self._segments:
            self._length += len(SEPARATOR)
            self._segments.append(_Segment(index, start, end))
        else:
            self._segments.append(_Segment(index, start, end))
            self._overlap(index, start)
        self._length += end - start
        self._ends_with_heading = heading

    def _overlap(self, index: int, start: int) -> None:
        """Begin the new chunk (its first segment ``index`` from ``start``) with the end
        of the previous one, when it continues the same run of text."""
        previous, self._carry = self._carry, None
        if previous is None or self.overlap == 0:
            return
        before, block = self.blocks[previous.block], self.blocks[index]
        if before.heading or block.heading or before.section != block.section:
            return
        text = self.texts[previous.block]
        if previous.block == index and previous.end <= start:
            # the same block continues: widen the first segment backwards
            low = max(previous.start, start - self.overlap)
            begin = _overlap_start(text, previous.start, low, previous.end)
            if begin < previous.end:
                self._segments[0].start = begin
            return
        budget = self.overlap - len(SEPARATOR)
        if budget <= 0:
            return
        low = max(previous.start, previous.end - budget)
        begin = _overlap_start(text, previous.start, low, previous.end)
        if text[begin : previous.end].strip():
            self._segments.insert(0, _Segment(previous.block, begin, previous.end))
            self._first = 1


def _cut(text: str, start: int, limit: int) -> int:
    """Where to end a piece of ``text`` that begins at ``start`` and must end by
    ``limit``: after a sentence, a line, a space, else at ``limit`` (moved back off a
    grapheme's inside). Always past ``start``."""
    low = start + (limit - start) // 2
    end = -1
    for match in _SENTENCE_END.finditer(text, low, limit):
        end = match.end()
    if end > start:
        return end
    newline = text.rfind("\n", low, limit)
    if newline >= 0:
        return newline + 1
    space = max(text.rfind(s, low, limit) for s in _SPACES)
    if space >= 0:
        return space + 1
    end = limit
    while end > start + 1 and end > limit - 32 and _inside_grapheme(text, end):
        end -= 1
    return end if not _inside_grapheme(text, end) else limit


def _overlap_start(text: str, segment_start: int, low: int, end: int) -> int:
    """Where an overlap taken from ``text[low:end]`` begins: at ``low`` when that is the
    start of the previous chunk's segment or of a word; else at the first sentence
    start, else after the first space, in the first half of the range; else at ``low``
    moved forward off a grapheme's inside."""
    if low <= segment_start or text[low - 1].isspace():
        return low
    half = low + (end - low) // 2
    match = _SENTENCE_END.search(text, low, half)
    if match is not None:
        return match.end()
    spaces = [p for p in (text.find(s, low, half) for s in _SPACES) if p >= 0]
    if spaces:
        return min(spaces) + 1
    while low < end and _inside_grapheme(text, low):
        low += 1
    return low


def _inside_grapheme(text: str, index: int) -> bool:
    """Whether a cut before ``text[index]`` would split a user-perceived character."""
    if index <= 0 or index >= len(text):
        return False
    char = text[index]
    if char in _EXTENDERS or text[index - 1] == "\u200d":
        return True
    if "\U0001f3fb" <= char <= "\U0001f3ff" or "\U000e0020" <= char <= "\U000e007f":
        return True  # skin-tone modifiers, emoji tag characters
    return unicodedata.category(char) in ("Mn", "Mc", "Me")
