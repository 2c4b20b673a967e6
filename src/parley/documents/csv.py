"""CSV and TSV for a knowledge base: rows become row groups (``blocks.row_blocks``),
each starting with the header row, cells joined by `` | ``. The delimiter is sniffed
(``,`` ``;`` tab ``|``), or a tab for ``.tsv``; a file the csv module cannot parse (a
field over its size limit, a stray quote) is read as plain text.

An attached CSV file is plain text (``text.plain_text``).

What does not belong here: decoding (``text.py``), tables inside HTML and DOCX (their
modules; they share ``row_blocks``).
"""

from __future__ import annotations

import contextlib
import csv
import io

from parley.documents.blocks import finish, row_blocks, squash
from parley.documents.text import read_text
from parley.documents.types import ExtractedDocument


def read_csv(text: str, *, tab: bool) -> ExtractedDocument:
    dialect: type[csv.Dialect] | csv.Dialect = csv.excel_tab if tab else csv.excel
    if not tab:
        with contextlib.suppress(csv.Error):
            dialect = csv.Sniffer().sniff(_head_lines(text), delimiters=",;\t|")
    try:
        rows = [_csv_row(row) for row in csv.reader(io.StringIO(text), dialect)]
    except csv.Error:  # a field over the csv module's size limit, a stray quote: as text
        return read_text(text)
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
