"""An attached document as text: ``read_file_part`` and ``read_document``.

``read_document`` decides the kind (``kinds.detect_kind``: the media type, then the
file name's extension, then the bytes) and returns the text: HTML becomes Markdown-like
text the way ``web_fetch`` does it (``html.py``); a PDF keeps one text per page
(``pdf.py``); a DOCX keeps its headings (``#``), list items (``-``) and tables
(Markdown rows) in document order (``docx.py``); text, Markdown, CSV and JSON are
returned as their text (``text.py``).

Limits (``DocumentLimits``) keep a request from costing too much: the file size, the
unpacked size of a DOCX (against ZIP bombs), the pages of a PDF read, the content a PDF
page may decompress to (a larger page is skipped, with a note in its place) and all its
pages together (reading stops there), and the characters returned (longer text is cut
and ``Document.truncated`` set; a DOCX is walked only that far). Failures raise
``DocumentError`` with a ``reason``: ``unsupported`` type, ``corrupt`` (or badly
encoded) data, ``encrypted`` PDF, ``too_large``; and, from the reader processes that
run these functions for the server (``parley.extraction``), ``timeout`` and ``crashed``.

Everything here runs in the calling thread and trusts no input but costs what the input
costs: the server never calls it on the event loop or in a thread of its own, only in a
reader process with a deadline and a memory limit.

``decode_file_part`` turns a ``FilePart`` (a ``data:`` URL or bare base64) into bytes.

What does not belong here: putting the text into a prompt (``transforms/attachments.py``),
knowledge-base ingestion (``knowledge/extract.py``), fetching URLs
(``tools/builtins/web.py``).
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote_to_bytes

from parley.documents.docx import docx_text
from parley.documents.html import html_to_text
from parley.documents.kinds import detect_kind
from parley.documents.pdf import pdf_text
from parley.documents.text import plain_text
from parley.documents.types import Document, DocumentError, DocumentKind, DocumentLimits
from parley.messages import FilePart

_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*),", re.I)


def read_document(
    name: str, data: bytes, media_type: str | None, *, limits: DocumentLimits | None = None
) -> Document:
    """The text of document ``name``; ``DocumentError`` when it cannot be read."""
    limits = limits or DocumentLimits()
    if len(data) > limits.max_bytes:
        raise DocumentError(
            f"{name} is {len(data)} bytes; the limit is {limits.max_bytes}",
            reason="too_large",
            name=name,
        )
    kind = detect_kind(name, data, media_type)
    if kind == "pdf":
        text, pages, truncated = pdf_text(name, data, limits)
        return _cut(text, pages, "pdf", limits, truncated=truncated)
    if kind == "docx":
        text, stopped = docx_text(name, data, limits)
        return _cut(text, None, "docx", limits, truncated=stopped)
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentError(f"{name} is binary, not {kind} text", reason="corrupt", name=name)
    if kind == "html":
        return _cut(html_to_text(data, charset=None, base_url="")[1], None, kind, limits)
    return _cut(plain_text(data), None, kind, limits)


def _cut(
    text: str,
    pages: list[str] | None,
    kind: DocumentKind,
    limits: DocumentLimits,
    *,
    truncated: bool = False,
) -> Document:
    text = text.replace("\x00", "")
    if len(text) > limits.max_chars:
        return Document(text[: limits.max_chars], pages, kind, truncated=True)
    return Document(text, pages, kind, truncated=truncated)


# --- FilePart ------------------------------------------------------------------------


def media_type_of_data_url(data: str) -> str | None:
    """The media type a ``data:`` URL declares (None for bare base64 or none declared)."""
    match = _DATA_URL.match(data)
    if match is None:
        return None
    return match.group("type").strip().lower() or None


def decode_file_part(part: FilePart, *, max_bytes: int | None = None) -> bytes:
    """The bytes of ``part.data``: a ``data:`` URL (base64 or percent-encoded) or bare
    base64. ``DocumentError`` when it is not valid or decodes to more than
    ``max_bytes`` (default ``DocumentLimits.max_bytes``)."""
    limit = DocumentLimits().max_bytes if max_bytes is None else max_bytes
    data = part.data.strip()
    match = _DATA_URL.match(data)
    encoded_base64 = True
    if match is not None:
        params = [p.strip().lower() for p in match.group("params").split(";") if p.strip()]
        encoded_base64 = "base64" in params
        data = data[match.end() :]
    if encoded_base64:
        data = re.sub(r"\s+", "", data)
        if len(data) // 4 * 3 > limit + 3:
            raise DocumentError(
                f"{part.name} is larger than {limit} bytes", reason="too_large", name=part.name
            )
        try:
            padded = data + "=" * (-len(data) % 4)
            if "-" in data or "_" in data:
                raw = base64.urlsafe_b64decode(padded)
            else:
                raw = base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise DocumentError(
                f"{part.name} is not valid base64 data", reason="corrupt", name=part.name
            ) from exc
    else:
        raw = unquote_to_bytes(data)
    if len(raw) > limit:
        raise DocumentError(
            f"{part.name} is larger than {limit} bytes", reason="too_large", name=part.name
        )
    return raw


def read_file_part(part: FilePart, *, limits: DocumentLimits | None = None) -> Document:
    """``read_document`` of an attached ``FilePart``; its media type, when missing, is
    the one its ``data:`` URL declares."""
    limits = limits or DocumentLimits()
    data = decode_file_part(part, max_bytes=limits.max_bytes)
    media_type = part.media_type or media_type_of_data_url(part.data.lstrip())
    return read_document(part.name, data, media_type, limits=limits)
