"""Attached documents as text: plain text, Markdown, HTML, PDF, DOCX, CSV and JSON.

``read_document`` decides the kind from the media type, then the file name's extension,
then the bytes themselves (``%PDF-``, a ZIP holding ``word/document.xml``, an HTML start,
text that parses as JSON, other text), and returns the text. HTML becomes Markdown-like
text the way ``web_fetch`` does it; a PDF keeps one text per page; a DOCX keeps its
headings (``#``), list items (``-``) and tables (Markdown rows) in document order; CSV
and JSON are returned as their text.

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

What does not belong here: putting the text into a prompt (``attachments.py``),
knowledge-base ingestion (``knowledge/``), fetching URLs (``tools/builtins/web.py``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal
from urllib.parse import unquote_to_bytes

from docx import Document as open_docx
from docx.document import Document as DocxDocument
from docx.table import Table
from docx.text.paragraph import Paragraph
from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError
from pypdf.generic import ArrayObject, StreamObject

from parley.errors import InvalidRequest
from parley.messages import FilePart
from parley.tools.builtins.web import html_to_text

DocumentKind = Literal["text", "markdown", "html", "pdf", "docx", "csv", "json"]
ErrorReason = Literal["unsupported", "corrupt", "encrypted", "too_large", "timeout", "crashed"]

DOCX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_MEDIA_KINDS: dict[str, DocumentKind] = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    DOCX_MEDIA_TYPE: "docx",
    "text/csv": "csv",
    "application/csv": "csv",
    "application/json": "json",
}
_EXTENSION_KINDS: dict[str, DocumentKind] = {
    ".txt": "text",
    ".text": "text",
    ".log": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".csv": "csv",
    ".json": "json",
}
_TEXT_MEDIA_TYPES = frozenset(
    {"application/xml", "application/x-yaml", "application/yaml", "application/toml"}
)
# a comment's body cannot hold "-->", so there is one way to read the comments: linear
# time (``(<!--.*?-->\s*)*`` let comments merge, and 30 of them took minutes)
_HTML_START = re.compile(
    rb"^\s*(?:<!--(?:(?!-->).)*-->\s*)*<(!doctype\s+html|html|head|body)\b", re.I | re.S
)
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


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
        return _read_pdf(name, data, limits)
    if kind == "docx":
        text, stopped = _read_docx(name, data, limits)
        return _cut(text, None, "docx", limits, truncated=stopped)
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentError(f"{name} is binary, not {kind} text", reason="corrupt", name=name)
    if kind == "html":
        return _cut(html_to_text(data, charset=None, base_url="")[1], None, kind, limits)
    return _cut(decode_text(data).replace("\r\n", "\n"), None, kind, limits)


def decode_text(data: bytes) -> str:
    """Text from a byte-order mark's encoding, else UTF-8, else Windows-1252."""
    for bom, encoding in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("windows-1252", errors="replace")


def detect_kind(name: str, data: bytes, media_type: str | None) -> DocumentKind:
    """The kind from the media type, else the extension, else the bytes."""
    media = (media_type or "").split(";", 1)[0].strip().lower()
    if media in _MEDIA_KINDS:
        return _MEDIA_KINDS[media]
    if media.endswith("+json"):
        return "json"
    if media.startswith("text/") or media in _TEXT_MEDIA_TYPES or media.endswith("+xml"):
        return "text"
    suffix = PurePosixPath(name.replace("\\", "/")).suffix.lower()
    if suffix in _EXTENSION_KINDS:
        return _EXTENSION_KINDS[suffix]
    return _sniff(name, data, media)


def _sniff(name: str, data: bytes, media: str) -> DocumentKind:
    head = data[:4096]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                if "word/document.xml" in archive.namelist():
                    return "docx"
        except zipfile.BadZipFile:
            pass
    elif head.startswith(_OLE_MAGIC):
        raise DocumentError(
            f"{name} is a legacy or encrypted Office file, which cannot be read",
            reason="unsupported",
            name=name,
        )
    elif _HTML_START.match(head):
        return "html"
    elif _looks_like_text(head):
        stripped = data.lstrip()
        if stripped[:1] in (b"{", b"["):
            try:
                json.loads(data)
            except ValueError:
                return "text"
            return "json"
        return "text"
    shown = media or "an unknown type"
    raise DocumentError(
        f"{name} ({shown}) is not a supported document: supported are text, Markdown, "
        "HTML, PDF, DOCX, CSV and JSON",
        reason="unsupported",
        name=name,
    )


def _looks_like_text(head: bytes) -> bool:
    if head.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return True
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # a character cut at the end of the sample
    return True


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


def _read_pdf(name: str, data: bytes, limits: DocumentLimits) -> Document:
    try:
        reader = open_pdf(name, data)
        pages: list[str] = []
        total = content = 0
        truncated = len(reader.pages) > limits.max_pages
        for number, page in enumerate(reader.pages[: limits.max_pages], 1):
            size = page_content_bytes(page)
            if size > limits.max_page_content_bytes:
                pages.append(f"[page {number} skipped: its content is {size} bytes]")
                continue
            content += size
            if content > limits.max_content_bytes:
                truncated = True
                break
            text = (page.extract_text() or "").replace("\x00", "").strip()
            pages.append(text)
            total += len(text)
            if total > limits.max_chars:
                truncated = True
                break
    except DocumentError:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files
        raise DocumentError(
            f"{name} is not a readable PDF ({type(exc).__name__}: {exc})",
            reason="corrupt",
            name=name,
        ) from exc
    text = "\n\n".join(f"--- Page {n} ---\n{page}" for n, page in enumerate(pages, 1))
    return _cut(text, pages, "pdf", limits, truncated=truncated)


def open_pdf(name: str, data: bytes) -> PdfReader:
    """A reader of the PDF, decrypted when its password is empty; ``DocumentError`` when
    it needs one."""
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:  # many "encrypted" PDFs have an empty password and only restrict editing
            opened = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except (DependencyError, FileNotDecryptedError, NotImplementedError):
            opened = False
        if not opened:
            raise DocumentError(
                f"{name} is an encrypted PDF that needs a password", reason="encrypted", name=name
            )
    return reader


def page_content_bytes(page: PageObject) -> int:
    """What the page's content streams decompress to (pypdf keeps the result, so reading
    the page after this does not decompress again)."""
    contents = page.get("/Contents")
    if contents is None:
        return 0
    resolved = contents.get_object()
    streams = resolved if isinstance(resolved, ArrayObject) else [resolved]
    size = 0
    for stream in streams:
        item = stream.get_object()
        if isinstance(item, StreamObject):
            size += len(item.get_data())
    return size


def _read_docx(name: str, data: bytes, limits: DocumentLimits) -> tuple[str, bool]:
    """The text, and whether the walk stopped at ``max_chars`` (every block, even an
    empty paragraph, counts at least one character: a walk costs per block)."""
    check_unpacked_size(name, data, limits.max_unpacked_bytes)
    try:
        document = open_docx(io.BytesIO(data))
        styles = _StyleNames(document)
        blocks: list[str] = []
        size = 0
        for block in document.iter_inner_content():
            if size > limits.max_chars:
                return "\n\n".join(blocks), True
            if isinstance(block, Paragraph):
                line = _paragraph(block, styles)
            else:
                line = _table(block, limits.max_chars - size)
            size += len(line) + 2
            if line:
                blocks.append(line)
    except Exception as exc:  # python-docx and lxml raise many kinds on damaged files
        raise DocumentError(
            f"{name} is not a readable DOCX file ({type(exc).__name__}: {exc})",
            reason="corrupt",
            name=name,
        ) from exc
    return "\n\n".join(blocks), False


def check_unpacked_size(name: str, data: bytes, limit: int) -> None:
    """``DocumentError`` unless ``data`` is a ZIP archive unpacking to at most ``limit``."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise DocumentError(
            f"{name} is not a readable DOCX file", reason="corrupt", name=name
        ) from exc
    if unpacked > limit:
        raise DocumentError(
            f"{name} unpacks to {unpacked} bytes; the limit is {limit}",
            reason="too_large",
            name=name,
        )


class _StyleNames:
    """Paragraph style names by style id, looked up once each (python-docx looks the
    style up for every paragraph, which cost more than reading its text)."""

    def __init__(self, document: DocxDocument) -> None:
        self._styles = document.styles
        self._names: dict[str | None, str] = {}

    def of(self, paragraph: Paragraph) -> str:
        style_id: str | None = paragraph._p.style
        name = self._names.get(style_id)
        if name is None:
            style = paragraph.style
            name = self._names[style_id] = (style.name if style is not None else "") or ""
        return name


def _paragraph(paragraph: Paragraph, styles: _StyleNames) -> str:
    text = paragraph.text.strip()
    if not text:
        return ""
    style = styles.of(paragraph)
    if style == "Title":
        return f"# {text}"
    heading = re.fullmatch(r"Heading (\d)", style)
    if heading:
        return "#" * int(heading.group(1)) + " " + text
    if style.startswith("List"):
        return f"- {text}"
    return text


def _table(table: Table, max_chars: int) -> str:
    """The table as Markdown rows, up to the row that passes ``max_chars``."""
    rows: list[list[str]] = []
    size = 0
    for row in table.rows:
        if size > max_chars:
            break
        cells = [" ".join(cell.text.split()).replace("|", "\\|") for cell in row.cells]
        size += sum(len(cell) + 3 for cell in cells) + 2
        rows.append(cells)
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in rows]
    lines.insert(1, "|" + " --- |" * width)
    return "\n".join(lines)


# --- FilePart ------------------------------------------------------------------------

_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*),", re.I)


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
