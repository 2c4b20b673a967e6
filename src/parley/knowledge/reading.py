"""How ingestion reads a stored upload: the ``Extractor`` seam, and one that reads in
the caller's thread.

The server's extractor reads in supervised reader processes under
``knowledge.extract_timeout_seconds`` (``parley.extraction.clients.KnowledgeExtractor``):
a document that cannot be read, runs past the deadline or crashes its reader is
``UnreadableDocument`` with the reason (it ends ``failed``), a stored file that cannot
be read an ``OSError``. ``InlineExtractor`` does the same work in the calling thread,
blocking it: for tests and tools, never the server.

What does not belong here: the formats (``extract.py``), chunking (``chunking.py``), the
ingestion queue (``ingest.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from parley.documents.pdf import MAX_PDF_PAGES
from parley.knowledge.chunking import chunk
from parley.knowledge.extract import extract
from parley.knowledge.types import Chunk

Extraction = tuple[list[Chunk], int | None, str | None]
"""A document's chunks, its page count and its title."""


class Extractor(Protocol):
    async def extract(
        self,
        path: Path,
        *,
        owner: str,
        filename: str,
        content_type: str | None,
        chunk_size: int,
        chunk_overlap: int,
    ) -> Extraction:
        """The chunks, page count and title of the upload stored at ``path``."""
        ...


class InlineExtractor:
    """Reads in the calling thread; see the module docstring."""

    def __init__(self, *, max_pdf_pages: int = MAX_PDF_PAGES) -> None:
        self._max_pages = max_pdf_pages

    async def extract(
        self,
        path: Path,
        *,
        owner: str,
        filename: str,
        content_type: str | None,
        chunk_size: int,
        chunk_overlap: int,
    ) -> Extraction:
        return read_here(path, filename, content_type, chunk_size, chunk_overlap, self._max_pages)


def read_here(
    path: Path,
    filename: str,
    content_type: str | None,
    chunk_size: int,
    chunk_overlap: int,
    max_pdf_pages: int = MAX_PDF_PAGES,
) -> Extraction:
    """Read, extract and chunk in the calling thread."""
    extracted = extract(path.read_bytes(), filename, content_type, max_pdf_pages=max_pdf_pages)
    return chunk(extracted, chunk_size, chunk_overlap), extracted.pages, extracted.title
