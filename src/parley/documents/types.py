"""The documents package's shared vocabulary: what a reader returns, how it refuses,
and the limits an attachment is read under.

An attachment becomes a ``Document`` (flat text; ``DocumentError`` when it cannot be
read), read under ``DocumentLimits``. A knowledge upload becomes an
``ExtractedDocument`` of ``Block`` s (``UnreadableDocument`` when it cannot be read).

What does not belong here: reading (the format modules), choosing the format
(``kinds.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parley.errors import InvalidRequest, ParleyError

DocumentKind = Literal["text", "markdown", "html", "pdf", "docx", "csv", "json"]
ErrorReason = Literal["unsupported", "corrupt", "encrypted", "too_large", "timeout", "crashed"]

_STATUS: dict[ErrorReason, int] = {"unsupported": 415, "too_large": 413}


class DocumentError(InvalidRequest):
    """A document that cannot be read; ``reason`` says why, ``name`` which one. As an
    HTTP error: 415 unsupported, 413 too large, else 400; code ``document_<reason>``.
    ``lasting``: the same bytes would fail again (a timeout or a crash may not)."""

    def __init__(self, message: str, *, reason: ErrorReason, name: str = "") -> None:
        super().__init__(message, code=f"document_{reason}")
        self.reason: ErrorReason = reason
        self.name = name
        self.status = _STATUS.get(reason, 400)

    @property
    def lasting(self) -> bool:
        return self.reason not in ("timeout", "crashed")


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """``max_bytes``: the largest file read; ``max_unpacked_bytes``: the most a DOCX may
    unpack to; ``max_pages``: PDF pages read; ``max_page_content_bytes``: the most one
    PDF page's content streams may decompress to (a larger page is skipped: reading its
    operators costs about 1-2 µs a byte); ``max_content_bytes``: the most all the pages
    read may (a page drawing a shared stream counts it again, as it costs again);
    ``max_chars``: text returned."""

    max_bytes: int = 20 * 1024 * 1024
    max_unpacked_bytes: int = 100 * 1024 * 1024
    max_pages: int = 300
    max_page_content_bytes: int = 2 * 1024 * 1024
    max_content_bytes: int = 8 * 1024 * 1024
    max_chars: int = 200_000


@dataclass(frozen=True, slots=True)
class Document:
    """A document's text. ``pages``: one text per page read (PDF only)."""

    text: str
    pages: list[str] | None
    kind: DocumentKind
    truncated: bool = False


class UnreadableDocument(ParleyError):
    """A document that cannot be read: its format is not supported, it is corrupt or
    encrypted, or it holds no text. ``str(error)`` says which, for the user."""

    status = 422
    type = "invalid_request_error"
    code = "unreadable_document"


@dataclass(frozen=True, slots=True)
class Block:
    """A run of text from a document in reading order: a paragraph, a list, a table
    row group, a code block. ``page`` is 1-based (PDF), else None; ``section`` is the
    heading path above the block, outermost first (``("Guide", "Install")``)."""

    text: str
    page: int | None = None
    section: tuple[str, ...] = ()
    heading: bool = False
    """The block is itself a heading (its text is the last element of ``section``)."""


@dataclass(frozen=True, slots=True)
class ExtractedDocument:
    blocks: tuple[Block, ...]
    title: str | None = None
    """The document's own title (a PDF's metadata, an HTML <title>, a first # heading)."""
    pages: int | None = None
