"""Bytes as text, and plain text as a document.

Decoding: ``decode_text`` (the declared charset, else a byte-order mark, else UTF-8,
else Windows-1252) is what attachments and fetched pages use; ``decode`` is the
knowledge path's, which also knows UTF-32 and asks charset_normalizer (when it is
installed) before falling back to ``decode_text``, and returns ``clean`` text: no NUL,
no lone surrogate, ``\\n`` line ends, so a database can store it.

Plain text: as an attachment, the decoded text itself (``plain_text``); for a knowledge
base, paragraphs split at blank lines (``read_text``). CSV and JSON attachments are
plain text too.

What does not belong here: Markdown's sections (``markdown.py``), HTML's charset
sniffing (``html.py``), telling text from binary data (``kinds.py``).
"""

from __future__ import annotations

import codecs
import importlib
import re
from typing import Any

from parley.documents.blocks import finish, text_blocks
from parley.documents.types import ExtractedDocument

BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
"""The byte-order marks ``decode`` knows (UTF-32 before UTF-16: they share a prefix)."""
_TEXT_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def decode_text(data: bytes, charset: str | None = None, *, cut: bool = False) -> str:
    """Text from the declared ``charset``, else a byte-order mark's encoding, else UTF-8,
    else Windows-1252. ``cut``: ``data`` may end inside a character (a body read up to a
    size limit), so UTF-8 whose only bad bytes are at the very end is still UTF-8."""
    if charset:
        return data.decode(charset, errors="replace")
    for bom, encoding in _TEXT_BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(data) - 3:  # a character cut at the end of the body
            return data.decode("utf-8", errors="replace")
        return data.decode("windows-1252", errors="replace")


def decode(data: bytes, charset: str | None = None) -> str:
    """``data`` as clean text (``clean``): a byte-order mark, else the declared charset,
    else UTF-8, else charset_normalizer's guess when it is installed, else
    ``decode_text``; bad bytes become U+FFFD."""
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


def plain_text(data: bytes) -> str:
    """An attached text file's text (``decode_text``), with ``\\n`` line ends."""
    return decode_text(data).replace("\r\n", "\n")


def read_text(text: str) -> ExtractedDocument:
    """Plain text (already clean) as a document of paragraphs split at blank lines."""
    return finish(text_blocks(text, section=()), title=None)
