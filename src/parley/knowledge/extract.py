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
  longer than ``JSON_BLOCK_CHARS`` (``documents/json.py``) is split into its own keys or
  items, each labelled with its path (``users[3].name: ...``). Invalid JSON is refused.

A row group is up to ``ROW_BLOCK_CHARS`` (``documents/blocks.py``) characters of rows
(cells joined by `` | ``), each group starting with the header row, so a chunk of a
table still says what its columns are. ``ROW_BLOCK_CHARS`` is below the default chunk
size, so a group usually becomes one chunk.

Text is decoded from a byte-order mark (UTF-8, UTF-16, UTF-32), else the charset the
content type declares, else UTF-8, else charset_normalizer's guess when it is installed,
else Windows-1252 (``documents.text.decode``); bad bytes become U+FFFD, never an error.
NUL characters are removed and lone surrogates replaced, so every block can be stored.

``extract`` is synchronous and pure, with no limits of its own beyond the unpacked size
of a DOCX and the PDF limits above; the caller limits the upload. The server runs it only
in a reader process (``parley.extraction``), under a deadline and a memory limit.

Where the code is: this module holds ``extract`` itself, the dispatch and the refusal of
binary data claiming to be text. Format detection (``kinds.upload_kind``) and the
readers, one module per format (``text.py``, ``markdown.py``, ``html.py``, ``pdf.py``,
``docx.py``, ``csv.py``, ``json.py``, with the block building they share in
``blocks.py``), are in ``parley.documents``, beside the attachments' readings of the
same formats.

What does not belong here: splitting blocks into chunks (``chunking.py``), attachments
as prompt text (``documents/attached.py``, ``transforms/attachments.py``), storage and
the ingestion queue (``store.py``, ``ingest.py``).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from parley.documents.csv import read_csv
from parley.documents.docx import read_docx
from parley.documents.html import read_html
from parley.documents.json import read_json
from parley.documents.kinds import media_type_of, upload_kind
from parley.documents.markdown import read_markdown
from parley.documents.pdf import MAX_PAGE_CONTENT, MAX_PDF_PAGES, read_pdf
from parley.documents.text import BOMS, decode, read_text
from parley.documents.types import DocumentKind, ExtractedDocument, UnreadableDocument


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
    kind = upload_kind(data, filename, media_type)
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
        return read_markdown(text)
    if kind == "csv":
        return read_csv(text, tab=PurePosixPath(filename).suffix.lower() == ".tsv")
    if kind == "json":
        return read_json(text)
    return read_text(text)


_NAMES: dict[DocumentKind, str] = {
    "text": "text",
    "markdown": "Markdown",
    "html": "HTML",
    "pdf": "a PDF",
    "docx": "a DOCX document",
    "csv": "CSV",
    "json": "JSON",
}
