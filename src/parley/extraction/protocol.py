"""The frames between the server and a document reader process: one JSON object a line.

The reader says ``Ready`` once it has started. Then the server writes one job at a time,
``ReadAttachment`` (a chat attachment as prompt text) or ``ReadKnowledge`` (a stored
upload as chunks), and the reader answers it: ``Text`` for an attachment; ``Chunks``
frames (each at most about ``CHUNK_FRAME_CHARS`` of text, so that no single frame is
large to decode on the event loop) then ``Extracted`` for an upload; or ``Failed``, with
a reason, for either. Frames are tagged by ``kind``; anything else is a
``ProtocolError``, so a reader that writes junk is treated as broken, never trusted
(results are plain JSON, never pickles: a reader parses hostile bytes).

What does not belong here: processes, pipes and their timing (``pool.py``,
``worker.py``). Only the standard library, orjson and ``parley.frames`` are imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from parley.frames import ProtocolError, by_kind, decode, encode

__all__ = ["ProtocolError", "decode_reply", "decode_request", "encode"]

CHUNK_FRAME_CHARS = 1024 * 1024
"""About how much chunk text one ``Chunks`` frame carries."""


@dataclass(frozen=True, slots=True)
class ReadAttachment:
    """Read an attached file (its ``data``: a ``data:`` URL or bare base64) under
    ``limits`` (the fields of ``documents.types.DocumentLimits``)."""

    kind: ClassVar[str] = "read_attachment"
    id: int
    name: str
    data: str
    media_type: str | None
    limits: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadKnowledge:
    """Read the stored upload at ``path`` and chunk it."""

    kind: ClassVar[str] = "read_knowledge"
    id: int
    path: str
    filename: str
    content_type: str | None
    chunk_size: int
    chunk_overlap: int
    max_pdf_pages: int
    max_page_content_bytes: int


@dataclass(frozen=True, slots=True)
class Ready:
    kind: ClassVar[str] = "ready"
    pid: int


@dataclass(frozen=True, slots=True)
class Text:
    """An attachment's text (``documents.types.Document``)."""

    kind: ClassVar[str] = "text"
    id: int
    text: str
    pages: list[str] | None
    document_kind: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class Chunks:
    """Some of an upload's chunks, in order: ``[ordinal, text, page, section]`` each."""

    kind: ClassVar[str] = "chunks"
    id: int
    chunks: list[list[Any]]


@dataclass(frozen=True, slots=True)
class Extracted:
    """The end of an upload's chunks: how many were sent, its pages and title."""

    kind: ClassVar[str] = "extracted"
    id: int
    count: int
    pages: int | None
    title: str | None


@dataclass(frozen=True, slots=True)
class Failed:
    """The document cannot be read. ``reason``: a ``DocumentError`` reason
    (``unsupported``, ``corrupt``, ``encrypted``, ``too_large``), ``unreadable`` (a
    knowledge upload refused), ``os_error`` (its file cannot be read) or ``internal``
    (a bug in a reader). ``retire``: the reader exits after this frame (it ran out of
    memory): it takes no more jobs."""

    kind: ClassVar[str] = "failed"
    id: int
    reason: str
    message: str
    retire: bool = False


Request = ReadAttachment | ReadKnowledge
Reply = Ready | Text | Chunks | Extracted | Failed

_REQUESTS: dict[str, type[Request]] = by_kind((ReadAttachment, ReadKnowledge))
_REPLIES: dict[str, type[Reply]] = by_kind((Ready, Text, Chunks, Extracted, Failed))


def decode_request(line: bytes) -> Request:
    return decode(line, _REQUESTS)


def decode_reply(line: bytes) -> Reply:
    return decode(line, _REPLIES)
