"""DOCX (python-docx): the check against ZIP bombs, and the two renderings.

- As an attachment (``docx_text``): Markdown-like text in document order, headings as
  ``#``, list items as ``-``, tables as Markdown rows; walked only as far as
  ``max_chars``.
- For a knowledge base (``read_docx``): ``Heading n`` styles make the section path,
  ``List`` styles get a ``- `` mark, tables are row groups (merged cells once). The
  title is the first ``Title`` paragraph, else the core properties' title.

Both refuse a DOCX that unpacks, by its own ZIP directory, to more than
``DocumentLimits.max_unpacked_bytes`` (``check_unpacked_size``), before python-docx
opens it.

What does not belong here: choosing the format (``kinds.py``), legacy ``.doc`` files
(refused there).
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterable

from docx import Document as open_docx
from docx.document import Document as DocxDocument
from docx.table import Table
from docx.text.paragraph import Paragraph

from parley.documents.blocks import Sections, finish, row_blocks, squash
from parley.documents.text import clean
from parley.documents.types import (
    Block,
    DocumentError,
    DocumentLimits,
    ExtractedDocument,
    UnreadableDocument,
)

_DOCX_HEADING = re.compile(r"heading\s*(\d+)", re.I)


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


# --- as an attachment -----------------------------------------------------------------


def docx_text(name: str, data: bytes, limits: DocumentLimits) -> tuple[str, bool]:
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


# --- for a knowledge base -------------------------------------------------------------


def read_docx(data: bytes) -> ExtractedDocument:
    limit = DocumentLimits().max_unpacked_bytes
    try:
        check_unpacked_size("the DOCX document", data, limit)
    except DocumentError as exc:
        if exc.reason == "too_large":
            raise UnreadableDocument(
                f"the DOCX document unpacks to more than {limit} bytes"
            ) from exc
        raise UnreadableDocument("the file is not a readable DOCX document") from exc
    try:
        document = open_docx(io.BytesIO(data))
        blocks, title = _docx_blocks(document.iter_inner_content(), _StyleNames(document))
        title = title or document.core_properties.title
    except Exception as exc:  # python-docx and lxml raise many kinds on damaged files
        raise UnreadableDocument(
            f"the file is not a readable DOCX document ({type(exc).__name__})"
        ) from exc
    return finish(blocks, title)


def _docx_blocks(
    content: Iterable[Paragraph | Table], styles: _StyleNames
) -> tuple[list[Block], str | None]:
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
        style = styles.of(item)
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
