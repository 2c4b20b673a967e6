"""The readers of the structured formats, HTML, PDF, DOCX, CSV and JSON: each turns one
document (its bytes; for CSV and JSON, its text already decoded) into an
``ExtractedDocument``, or refuses it with ``UnreadableDocument``. What each reader
keeps, drops and refuses is described with ``extract`` in ``extract.py``, their only
caller.

What does not belong here: format detection, the refusal of binary data, dispatch, and
the readers of plain text and Markdown (``extract.py``); decoding and the block building
the readers share, such as the heading path and row groups (``blocks.py``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import zipfile
from collections.abc import Iterable
from typing import Any

from bs4 import BeautifulSoup, Tag, UnicodeDammit
from bs4.element import NavigableString, PreformattedString
from docx import Document as open_docx
from docx.table import Table
from docx.text.paragraph import Paragraph
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError

from parley.knowledge.blocks import (
    Sections,
    clean,
    decode,
    finish,
    row_blocks,
    squash,
    text_blocks,
)
from parley.knowledge.types import Block, ExtractedDocument, UnreadableDocument
from parley.transforms.documents import DocumentLimits, page_content_bytes

MAX_PDF_PAGES = 2_000
"""Pages a PDF may have (``knowledge.max_pdf_pages``)."""
MAX_PAGE_CONTENT = DocumentLimits().max_page_content_bytes
"""What a page's content may decompress to before it is skipped."""
JSON_BLOCK_CHARS = 1000
"""A JSON value whose compact text is longer than this is split into its keys or items."""
JSON_LINE_CHARS = 80
"""A JSON list or object whose compact text fits in this stays on one line."""

_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
_HTML_DROPPED = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "nav",
        "svg",
        "canvas",
        "iframe",
        "object",
        "embed",
        "button",
        "select",
        "input",
        "textarea",
        "dialog",
        "head",
    }
)
_HTML_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_HTML_INLINE = frozenset(
    {
        "a",
        "abbr",
        "acronym",
        "b",
        "bdi",
        "bdo",
        "big",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "kbd",
        "label",
        "mark",
        "nobr",
        "q",
        "rp",
        "rt",
        "ruby",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
    }
)
_DOCX_HEADING = re.compile(r"heading\s*(\d+)", re.I)


# --- HTML -----------------------------------------------------------------------------


def read_html(data: bytes, charset: str | None) -> ExtractedDocument:
    dammit = UnicodeDammit(
        data, known_definite_encodings=[charset] if charset else [], is_html=True
    )
    markup = dammit.unicode_markup
    markup = clean(markup if markup is not None else decode(data))
    markup = _XML_DECLARATION.sub("", markup, count=1)
    if "<" not in markup:  # not markup at all
        return finish(text_blocks(markup, section=()), title=None)
    soup = BeautifulSoup(markup, "html.parser")
    title = squash(soup.title.get_text()) if soup.title else None
    for element in soup.find_all(_dropped):
        if not element.decomposed:
            element.decompose()
    walker = _HtmlWalker()
    walker.walk(soup)
    return finish(walker.blocks, title or walker.first_h1)


def _dropped(tag: Tag) -> bool:
    """Whether ``tag`` is not content: scripts, styles, navigation, form controls,
    hidden elements. (Found this way rather than by a CSS selector, which is many times
    slower on a large page.)"""
    if tag.name in _HTML_DROPPED:
        return True
    attrs = tag.attrs
    if not attrs:
        return False
    if "hidden" in attrs or attrs.get("aria-hidden") == "true" or attrs.get("role") == "navigation":
        return True
    style = attrs.get("style")
    if isinstance(style, str):
        style = style.replace(" ", "").lower()
        return "display:none" in style or "visibility:hidden" in style
    return False


class _HtmlWalker:
    """Blocks of an HTML tree in document order, walked without recursion (so deeply
    nested pages cannot exhaust the stack)."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._sections = Sections()
        self._inline: list[str] = []
        self.first_h1: str | None = None

    def walk(self, root: Tag) -> None:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self._flush()
            elif isinstance(node, NavigableString):
                if not isinstance(node, PreformattedString):  # comments, doctype, CDATA
                    self._inline.append(str(node))
            elif isinstance(node, Tag):
                self._element(node, stack)
        self._flush()

    def _element(self, node: Tag, stack: list[tuple[Any, bool]]) -> None:
        name = node.name
        if name == "br":
            self._inline.append("\n")
        elif name == "img":
            alt = node.get("alt")
            if isinstance(alt, str) and alt.strip():
                self._inline.append(f" [image: {alt.strip()}] ")
        elif name in _HTML_HEADINGS:
            self._flush()
            text = squash(_html_text(node))
            if text:
                section = self._sections.enter(_HTML_HEADINGS[name], text)
                if name == "h1" and self.first_h1 is None:
                    self.first_h1 = text
                self.blocks.append(Block(text, section=section, heading=True))
        elif name in ("ul", "ol"):
            self._flush()
            self._add(_html_list(node))
        elif name == "table":
            self._flush()
            self.blocks.extend(row_blocks(_html_rows(node), self._sections.path))
        elif name == "pre":
            self._flush()
            self._add(node.get_text().strip("\n"))
        else:
            if name not in _HTML_INLINE:  # a block element: its text is a paragraph
                self._flush()
                stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.contents))

    def _add(self, text: str) -> None:
        if text.strip():
            self.blocks.append(Block(text, section=self._sections.path))

    def _flush(self) -> None:
        if not self._inline:
            return
        lines = (squash(line) for line in "".join(self._inline).split("\n"))
        self._inline.clear()
        self._add("\n".join(line for line in lines if line))


def _html_text(node: Tag, skip: frozenset[str] = frozenset()) -> str:
    """The text under ``node``, leaving out elements named in ``skip``; ``<br>`` is a
    line break."""
    parts: list[str] = []
    stack: list[Any] = list(reversed(node.contents))
    while stack:
        item = stack.pop()
        if isinstance(item, NavigableString):
            if not isinstance(item, PreformattedString):
                parts.append(str(item))
        elif isinstance(item, Tag) and item.name not in skip:
            if item.name == "br":
                parts.append("\n")
            else:
                stack.extend(reversed(item.contents))
    return "".join(parts)


def _html_list(node: Tag) -> str:
    lines: list[str] = []
    for item in node.find_all("li"):
        depth, parent = 0, item.parent
        while parent is not None and parent is not node:
            depth += parent.name in ("ul", "ol")
            parent = parent.parent
        text = squash(_html_text(item, skip=frozenset({"ul", "ol"})))
        if text:
            lines.append("  " * depth + "- " + text)
    return "\n".join(lines)


def _html_rows(table: Tag) -> list[str]:
    rows: list[str] = []
    for row in table.find_all("tr"):
        if row.find_parent("table") is not table:  # a nested table's row
            continue
        cells = [squash(_html_text(cell)) for cell in row.find_all(["td", "th"], recursive=False)]
        rows.append(" | ".join(cells))
    return rows


# --- PDF ------------------------------------------------------------------------------


def read_pdf(
    data: bytes, *, max_pages: int = MAX_PDF_PAGES, max_page_content_bytes: int = MAX_PAGE_CONTENT
) -> ExtractedDocument:
    """Refused past ``max_pages`` pages; a page whose content streams decompress to more
    than ``max_page_content_bytes`` is skipped, as a damaged one is."""
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:  # many "encrypted" PDFs have an empty password and only restrict editing
                opened = reader.decrypt("") != PasswordType.NOT_DECRYPTED
            except (DependencyError, FileNotDecryptedError, NotImplementedError):
                opened = False
            if not opened:
                raise UnreadableDocument("the PDF is encrypted and needs a password")
        metadata = reader.metadata
        title = metadata.title if metadata is not None else None
        pages = list(reader.pages)
    except UnreadableDocument:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files
        raise UnreadableDocument(f"the file is not a readable PDF ({type(exc).__name__})") from exc
    if len(pages) > max_pages:
        raise UnreadableDocument(
            f"the PDF has {len(pages)} pages; at most {max_pages} are read "
            "(knowledge.max_pdf_pages)"
        )
    blocks: list[Block] = []
    for number, page in enumerate(pages, 1):
        try:
            if page_content_bytes(page) > max_page_content_bytes:
                continue
            text = page.extract_text() or ""
        except Exception:  # one damaged page does not lose the others
            continue
        blocks.extend(text_blocks(clean(text), section=(), page=number))
    if not blocks:
        raise UnreadableDocument("the PDF has no extractable text (scanned images?)")
    return finish(blocks, title if isinstance(title, str) else None, pages=len(pages))


# --- DOCX -----------------------------------------------------------------------------


def read_docx(data: bytes) -> ExtractedDocument:
    limit = DocumentLimits().max_unpacked_bytes
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableDocument("the file is not a readable DOCX document") from exc
    if unpacked > limit:
        raise UnreadableDocument(f"the DOCX document unpacks to more than {limit} bytes")
    try:
        document = open_docx(io.BytesIO(data))
        blocks, title = _docx_blocks(document.iter_inner_content())
        title = title or document.core_properties.title
    except Exception as exc:  # python-docx and lxml raise many kinds on damaged files
        raise UnreadableDocument(
            f"the file is not a readable DOCX document ({type(exc).__name__})"
        ) from exc
    return finish(blocks, title)


def _docx_blocks(content: Iterable[Paragraph | Table]) -> tuple[list[Block], str | None]:
    sections = Sections()
    blocks: list[Block] = []
    title: str | None = None
    for item in content:
        if isinstance(item, Table):
            blocks.extend(row_blocks(_docx_rows(item), sections.path))
            continue
        text = clean(item.text).strip()
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        heading = _DOCX_HEADING.fullmatch(style)
        if heading:
            name = squash(text)
            blocks.append(Block(name, section=sections.enter(int(heading[1]), name), heading=True))
            continue
        if style == "Title" and title is None:
            title = text
        elif style.startswith("List"):
            text = f"- {text}"
        blocks.append(Block(text, section=sections.path))
    return blocks, title


def _docx_rows(table: Table) -> list[str]:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous: object = None
        for cell in row.cells:
            if cell._tc is previous:  # a merged cell is listed once per grid column
                continue
            previous = cell._tc
            cells.append(squash(clean(cell.text)))
        rows.append(" | ".join(cells))
    return rows


# --- CSV and JSON ---------------------------------------------------------------------


def read_csv(text: str, *, tab: bool) -> ExtractedDocument:
    dialect: type[csv.Dialect] | csv.Dialect = csv.excel_tab if tab else csv.excel
    if not tab:
        with contextlib.suppress(csv.Error):
            dialect = csv.Sniffer().sniff(_head_lines(text), delimiters=",;\t|")
    try:
        rows = [_csv_row(row) for row in csv.reader(io.StringIO(text), dialect)]
    except csv.Error:  # a field over the csv module's size limit, a stray quote: as text
        return finish(text_blocks(text, section=()), title=None)
    return finish(row_blocks(rows, ()), title=None)


def _head_lines(text: str, lines: int = 20, limit: int = 4096) -> str:
    """The first lines of ``text`` (the csv sniffer is slow on large samples)."""
    end = -1
    for _ in range(lines):
        end = text.find("\n", end + 1, limit)
        if end < 0:
            return text[:limit]
    return text[:end]


def _csv_row(row: list[str]) -> str:
    line = " | ".join(map(str.strip, row))
    if "\n" in line or "\t" in line or "  " in line:
        line = " | ".join(map(squash, row))
    return line


def read_json(text: str) -> ExtractedDocument:
    try:
        value = json.loads(text)
        blocks: list[Block] = []
        if isinstance(value, dict):
            for key, item in value.items():
                _json_blocks(item, str(key), blocks)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                _json_blocks(item, f"[{index}]", blocks)
        elif value is not None and value != "":
            _json_blocks(value, "", blocks)
    except ValueError as exc:
        raise UnreadableDocument(f"the file is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise UnreadableDocument("the JSON is nested too deeply to read") from exc
    return finish(blocks, title=None)


def _json_blocks(value: object, path: str, blocks: list[Block]) -> None:
    if isinstance(value, str):
        text = value
    elif (
        isinstance(value, dict | list)
        and value
        and len(json.dumps(value, ensure_ascii=False)) > JSON_BLOCK_CHARS
    ):
        if isinstance(value, dict):
            for key, item in value.items():
                _json_blocks(item, f"{path}.{key}" if path else str(key), blocks)
        else:
            for index, item in enumerate(value):
                _json_blocks(item, f"{path}[{index}]", blocks)
        return
    else:
        text = _pretty(value, 0)
    text = clean(f"{path}: {text}" if path else text).strip()
    if text:
        blocks.append(Block(text))


def _pretty(value: object, depth: int) -> str:
    """``value`` as JSON indented by two spaces, with a list or object that fits in
    ``JSON_LINE_CHARS`` kept on one line. (``json.dumps(indent=2)`` runs in Python and
    is several times slower.)"""
    compact = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or len(compact) + 2 * depth <= JSON_LINE_CHARS:
        return compact
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(key, ensure_ascii=False)}: {_pretty(item, depth + 1)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    items = [pad + _pretty(item, depth + 1) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + "  " * depth + "]"
