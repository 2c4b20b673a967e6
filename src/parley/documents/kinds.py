"""Which format a document is: from its media type, its name's extension, its bytes.

Two orders, one per path. An attachment (``detect_kind``) trusts its media type first,
then its extension, then its bytes. A knowledge upload (``upload_kind``) trusts its
name's extension first (browsers send ``application/octet-stream`` for much), also
knows ``.tsv`` and ``.mdown``, and refuses known binary types (images, archives,
executables, legacy and other Office files) by name or media type before looking at
the bytes. The bytes are sniffed the same way for both: ``%PDF-``, a ZIP holding
``word/document.xml``, an HTML start (``HTML_START``), text that parses as JSON, other
text; a legacy (OLE) Office file is refused.

Also here: ``media_type_of`` (a Content-Type header's media type and charset) and
``is_utf8_sample``, which ``web_fetch`` sniffs fetched bodies with.

What does not belong here: reading (the format modules), the refusal of binary data
claiming to be text (the callers: ``attached.py``, ``knowledge/extract.py``).
"""

from __future__ import annotations

import codecs
import io
import json
import re
import zipfile
from pathlib import PurePosixPath

from parley.documents.types import DocumentError, DocumentKind, UnreadableDocument

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
HTML_START = re.compile(
    rb"^\s*(?:<!--(?:(?!-->).)*-->\s*)*<(!doctype\s+html|html|head|body)\b", re.I | re.S
)
"""The start of an HTML document, matched against its first KB."""
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_CHARSET = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.I)

SUPPORTED = ".txt, .md, .html, .pdf, .docx, .csv, .json"
"""The formats a knowledge base takes, as its refusals name them."""
_UPLOAD_EXTENSIONS: dict[str, DocumentKind] = {
    **_EXTENSION_KINDS,
    ".mdown": "markdown",
    ".tsv": "csv",
}
_UPLOAD_MEDIA_KINDS: dict[str, DocumentKind] = {
    **_MEDIA_KINDS,
    "text/tab-separated-values": "csv",
}
_UNSUPPORTED_EXTENSIONS = frozenset(
    {
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".webp",
        ".bmp",
        ".tif",
        ".tiff",
        ".ico",
        ".heic",
        ".heif",
        ".avif",
        ".svg",
        ".psd",
        ".mp3",
        ".wav",
        ".ogg",
        ".flac",
        ".m4a",
        ".mp4",
        ".mov",
        ".avi",
        ".mkv",
        ".webm",
        ".zip",
        ".gz",
        ".tgz",
        ".bz2",
        ".xz",
        ".7z",
        ".rar",
        ".tar",
        ".jar",
        ".apk",
        ".dmg",
        ".iso",
        ".exe",
        ".dll",
        ".so",
        ".dylib",
        ".bin",
        ".o",
        ".a",
        ".class",
        ".pyc",
        ".wasm",
        ".msi",
        ".deb",
        ".rpm",
        ".doc",
        ".xls",
        ".xlsx",
        ".ppt",
        ".pptx",
        ".odt",
        ".ods",
        ".odp",
        ".rtf",
        ".epub",
        ".pages",
        ".key",
        ".numbers",
        ".sqlite",
        ".db",
    }
)
_UNSUPPORTED_MEDIA_PREFIXES = ("image/", "audio/", "video/", "font/")
_UNSUPPORTED_MEDIA_TYPES = frozenset(
    {
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "application/x-7z-compressed",
        "application/vnd.rar",
        "application/x-msdownload",
        "application/x-executable",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    }
)


def media_type_of(content_type: str) -> tuple[str, str | None]:
    """(media type in lower case, charset if it names a known codec) of a Content-Type."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    match = _CHARSET.search(content_type)
    charset = match.group(1) if match else None
    if charset is not None:
        try:
            codecs.lookup(charset)
        except LookupError:
            charset = None
    return media_type, charset


def detect_kind(name: str, data: bytes, media_type: str | None) -> DocumentKind:
    """An attachment's kind: from the media type, else the extension, else the bytes;
    ``DocumentError`` (``unsupported``) when none is readable."""
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


def upload_kind(data: bytes, filename: str, media_type: str) -> DocumentKind:
    """A knowledge upload's kind: from the name's extension, else the media type (already
    lower case, without parameters), else the bytes; ``UnreadableDocument`` for a known
    binary type and for bytes that are none of the formats."""
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if suffix in _UPLOAD_EXTENSIONS:
        return _UPLOAD_EXTENSIONS[suffix]
    unsupported = UnreadableDocument(
        f"unsupported file type: {suffix or media_type or 'unknown'}; supported: {SUPPORTED}"
    )
    if (
        suffix in _UNSUPPORTED_EXTENSIONS
        or media_type in _UNSUPPORTED_MEDIA_TYPES
        or media_type.startswith(_UNSUPPORTED_MEDIA_PREFIXES)
    ):
        raise unsupported
    if media_type in _UPLOAD_MEDIA_KINDS:
        return _UPLOAD_MEDIA_KINDS[media_type]
    if media_type.endswith("+json"):
        return "json"
    try:  # the name's extension is not one detect_kind knows: it sniffs the bytes
        return detect_kind(filename, data, None)
    except DocumentError as exc:
        raise unsupported from exc


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
    elif HTML_START.match(head):
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
    return is_utf8_sample(head)


def is_utf8_sample(head: bytes) -> bool:
    """Whether ``head``, the first bytes of something, is UTF-8 (its last character may
    be cut)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # a character cut at the end of the sample
    return True
