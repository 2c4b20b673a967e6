"""Extraction: a knowledge-base document's bytes become blocks of text in reading order,
each with its page and the heading path above it.

``extract`` reads plain text, Markdown, HTML, PDF, DOCX, CSV and JSON. The format comes
from the file name's extension, else the content type, else the bytes (``%PDF-``, a ZIP
holding ``word/document.xml``, an HTML start, text that parses as JSON, other text).
Known binary types (images, archives, executables, legacy Office files) and bytes that
are not text are refused with ``UnreadableDocument``, as are corrupt, encrypted and
empty documents; ``str(error)`` says which.

Per format:

- text: paragraphs split at blank lines.
- Markdown: ATX (``#`` .. ``######``) and setext (``===`` / ``---``) headings make the
  section path; fenced code is one block and its ``#`` lines are not headings. The title
  is the first level-1 heading.
- HTML: scripts, styles, navigation, form controls and hidden elements are dropped
  (a ``<form>`` itself is kept: some sites wrap the whole page in one); ``h1``-``h6``
  make the section path; paragraphs, lists, ``pre`` and loose text are blocks; tables
  are row groups (below). The title is ``<title>``, else the first ``h1``.
- PDF (pypdf): one or more blocks per page, ``page`` 1-based. A PDF with an empty user
  password is opened; one that needs a password, holds no text at all (a scan), or has
  more pages than ``max_pdf_pages``, is refused. A page whose content streams decompress
  to more than ``max_page_content_bytes`` is skipped (as a damaged page is). The title
  comes from the metadata.
- DOCX (python-docx): ``Heading n`` styles make the section path, ``List`` styles get a
  ``- `` mark, tables are row groups. The title is the first ``Title`` paragraph, else
  the core properties' title.
- CSV: the delimiter is sniffed (``,`` ``;`` tab ``|``); rows are row groups.
- JSON: one block per top-level key or array item, labelled with its key or index and
  pretty-printed (short lists and objects on one line); a value whose compact text is
  longer than ``JSON_BLOCK_CHARS`` (``formats.py``) is split into its own keys or items,
  each labelled with its path (``users[3].name: ...``). Invalid JSON is refused.

A row group is up to ``ROW_BLOCK_CHARS`` (``blocks.py``) characters of rows (cells
joined by `` | ``), each group starting with the header row, so a chunk of a table still
says what its columns are. ``ROW_BLOCK_CHARS`` is below the default chunk size, so a
group usually becomes one chunk.

Text is decoded from a byte-order mark (UTF-8, UTF-16, UTF-32), else the charset the
content type declares, else UTF-8, else charset_normalizer's guess when it is installed,
else Windows-1252 (``documents.decode_text``); bad bytes become U+FFFD, never an error.
NUL characters are removed and lone surrogates replaced, so every block can be stored.

``extract`` is synchronous and pure, with no limits of its own beyond the unpacked size
of a DOCX and the PDF limits above; the caller limits the upload. The server runs it only
in a reader process (``parley.extraction``), under a deadline and a memory limit.

Where the code is: this module holds ``extract`` itself (format detection, the refusal
of binary data, dispatch) and the readers of the two plain-text formats, text and
Markdown. The readers of HTML, PDF, DOCX, CSV and JSON are in ``formats.py``; decoding
bytes to clean text, and the block building every reader shares (paragraphs, the heading
path, row groups, the finished document), are in ``blocks.py``.

What does not belong here: splitting blocks into chunks (``chunking.py``), attachments
as prompt text (``transforms/documents.py``), storage and the ingestion queue
(``store.py``, ``ingest.py``).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from parley.knowledge.blocks import BOMS, Sections, decode, finish, text_blocks
from parley.knowledge.formats import (
    MAX_PAGE_CONTENT,
    MAX_PDF_PAGES,
    read_csv,
    read_docx,
    read_html,
    read_json,
    read_pdf,
)
from parley.knowledge.types import Block, ExtractedDocument, UnreadableDocument
from parley.tools.builtins.web import media_type_of
from parley.transforms.documents import (
    DOCX_MEDIA_TYPE,
    DocumentError,
    DocumentKind,
    detect_kind,
)

SUPPORTED = ".txt, .md, .html, .pdf, .docx, .csv, .json"

_EXTENSIONS: dict[str, DocumentKind] = {
    ".txt": "text",
    ".text": "text",
    ".log": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
}
_MEDIA_TYPES: dict[str, DocumentKind] = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    DOCX_MEDIA_TYPE: "docx",
    "text/csv": "csv",
    "application/csv": "csv",
    "text/tab-separated-values": "csv",
    "application/json": "json",
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
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_NOT_SETEXT_TEXT = re.compile(r" {0,3}(?:[-*+>|]|\d+[.)])(?:\s|$)")


def extract(
    data: bytes,
    filename: str,
    content_type: str | None = None,
    *,
    max_pdf_pages: int = MAX_PDF_PAGES,
    max_page_content_bytes: int = MAX_PAGE_CONTENT,
) -> ExtractedDocument:
    """The blocks, title and page count of the document ``filename`` (its ``data``, and
    the ``content_type`` it was uploaded with); ``UnreadableDocument`` when it cannot be
    read or holds no text. A PDF of more than ``max_pdf_pages`` pages is refused; a page
    whose content decompresses to more than ``max_page_content_bytes`` is skipped."""
    media_type, charset = media_type_of(content_type or "")
    kind = _kind(data, filename, media_type)
    if kind == "pdf":
        return read_pdf(
            data, max_pages=max_pdf_pages, max_page_content_bytes=max_page_content_bytes
        )
    if kind == "docx":
        return read_docx(data)
    if b"\x00" in data[:4096] and not data.startswith(tuple(bom for bom, _ in BOMS)):
        raise UnreadableDocument(f"the file is binary data, not {_NAMES[kind]}")
    if kind == "html":
        return read_html(data, charset)
    text = decode(data, charset)
    if kind == "markdown":
        return _markdown(text)
    if kind == "csv":
        return read_csv(text, tab=PurePosixPath(filename).suffix.lower() == ".tsv")
    if kind == "json":
        return read_json(text)
    return finish(text_blocks(text, section=()), title=None)


_NAMES: dict[DocumentKind, str] = {
    "text": "text",
    "markdown": "Markdown",
    "html": "HTML",
    "pdf": "a PDF",
    "docx": "a DOCX document",
    "csv": "CSV",
    "json": "JSON",
}


# --- format ---------------------------------------------------------------------------


def _kind(data: bytes, filename: str, media_type: str) -> DocumentKind:
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    unsupported = UnreadableDocument(
        f"unsupported file type: {suffix or media_type or 'unknown'}; supported: {SUPPORTED}"
    )
    if (
        suffix in _UNSUPPORTED_EXTENSIONS
        or media_type in _UNSUPPORTED_MEDIA_TYPES
        or media_type.startswith(_UNSUPPORTED_MEDIA_PREFIXES)
    ):
        raise unsupported
    if media_type in _MEDIA_TYPES:
        return _MEDIA_TYPES[media_type]
    if media_type.endswith("+json"):
        return "json"
    try:  # the name's extension is not one detect_kind knows: it sniffs the bytes
        return detect_kind(filename, data, None)
    except DocumentError as exc:
        raise unsupported from exc


# --- Markdown -------------------------------------------------------------------------


def _markdown(text: str) -> ExtractedDocument:
    sections = Sections()
    blocks: list[Block] = []
    title: str | None = None
    paragraph: list[str] = []
    code: list[str] = []
    fence: str | None = None

    def flush() -> None:
        body = "\n".join(paragraph).strip()
        paragraph.clear()
        if body:
            blocks.append(Block(body, section=sections.path))

    def heading(level: int, name: str) -> None:
        nonlocal title
        flush()
        if not name:
            return
        blocks.append(Block(name, section=sections.enter(level, name), heading=True))
        if level == 1 and title is None:
            title = name

    for line in text.split("\n"):
        if fence is not None:
            closing = line.strip()
            if closing.startswith(fence) and closing == closing[0] * len(closing):
                body = "\n".join(code).strip("\n")
                if body.strip():
                    blocks.append(Block(body, section=sections.path))
                code.clear()
                fence = None
            else:
                code.append(line)
            continue
        stripped = line.lstrip()
        first = stripped[:1]
        if not first:
            flush()
        elif first == "#" and (atx := _ATX.match(line)):
            heading(len(atx.group(1)), (atx.group(2) or "").strip())
        elif first in "`~" and (opening := _FENCE.match(line)):
            flush()
            fence = opening.group(1)
        elif (
            first in "=-"
            and len(paragraph) == 1
            and _SETEXT.match(line)
            and not _NOT_SETEXT_TEXT.match(paragraph[0])
        ):
            name = paragraph.pop().strip()
            heading(1 if first == "=" else 2, name)
        else:
            paragraph.append(line)
    flush()
    if fence is not None and "".join(code).strip():  # an unclosed fence runs to the end
        blocks.append(Block("\n".join(code).strip("\n"), section=sections.path))
    return finish(blocks, title)
