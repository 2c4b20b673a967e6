"""The reader pool as its two users see it.

- ``AttachmentReader`` is the chat's ``DocumentReader`` (``transforms/attachments.py``):
  an attached file's text, or ``DocumentError`` saying why there is none, a reading that
  ran past ``documents.timeout_seconds`` (reason ``timeout``) or a reader that died
  (``crashed``) included; ``Overloaded`` (503, or 429 for an owner already at its
  share) when no reader came free within ``documents.queue_seconds``.
- ``KnowledgeExtractor`` (a ``knowledge.reading.Extractor``) reads a stored knowledge
  upload into its chunks, page count and title for the ingestion queue, waiting for a
  reader as long as it takes (ingestion is in the background), under
  ``knowledge.extract_timeout_seconds``; a document that cannot be read, runs past the
  deadline or crashes its reader is ``UnreadableDocument`` with the reason, a stored
  file that cannot be read an ``OSError``.

What does not belong here: the processes and slots (``pool.py``, ``slots.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path
from typing import cast

from parley.documents.types import (
    Document,
    DocumentError,
    DocumentKind,
    DocumentLimits,
    ErrorReason,
    UnreadableDocument,
)
from parley.extraction.pool import ReaderPool, ReadFailed, ReadTimedOut
from parley.extraction.protocol import (
    Chunks,
    Extracted,
    Failed,
    ReadAttachment,
    ReadKnowledge,
    Reply,
    Text,
)
from parley.knowledge.reading import Extraction
from parley.knowledge.types import Chunk
from parley.messages import FilePart

_REASONS: frozenset[str] = frozenset({"unsupported", "corrupt", "encrypted", "too_large"})


class AttachmentReader:
    """``DocumentReader`` through the pool; see the module docstring."""

    def __init__(self, pool: ReaderPool) -> None:
        self._pool = pool

    async def read(self, part: FilePart, limits: DocumentLimits, owner: str) -> Document:
        settings = self._pool.settings
        name = part.name

        def job(job_id: int) -> ReadAttachment:
            return ReadAttachment(job_id, name, part.data, part.media_type, asdict(limits))

        try:
            frames = await self._pool.run(
                job, owner=owner, deadline=settings.timeout_seconds, wait=settings.queue_seconds
            )
        except ReadFailed as exc:
            raise _document_error(name, exc, "documents.timeout_seconds") from None
        last = frames[-1]
        if isinstance(last, Failed):
            reason = last.reason if last.reason in _REASONS else "corrupt"
            raise DocumentError(last.message, reason=cast(ErrorReason, reason), name=name)
        if not isinstance(last, Text):
            raise DocumentError(f"{name}: the reader answered {last.kind}", reason="crashed")
        kind = cast(DocumentKind, last.document_kind)
        return Document(last.text, last.pages, kind, truncated=last.truncated)


def _document_error(name: str, error: ReadFailed, setting: str) -> DocumentError:
    if isinstance(error, ReadTimedOut):
        return DocumentError(
            f"{name}: {error.message} ({setting}), so it was stopped",
            reason="timeout",
            name=name,
        )
    return DocumentError(f"{name} could not be read: {error.message}", reason="crashed", name=name)


class KnowledgeExtractor:
    """Reads knowledge uploads through the pool; see the module docstring."""

    def __init__(self, pool: ReaderPool, *, timeout_seconds: float, max_pdf_pages: int) -> None:
        self._pool = pool
        self._timeout = timeout_seconds
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
        """The document's chunks, page count and title."""
        page_bytes = self._pool.settings.max_page_content_bytes

        def job(job_id: int) -> ReadKnowledge:
            return ReadKnowledge(
                job_id,
                str(path),
                filename,
                content_type,
                chunk_size,
                chunk_overlap,
                self._max_pages,
                page_bytes,
            )

        try:
            frames = await self._pool.run(job, owner=owner, deadline=self._timeout, background=True)
        except ReadTimedOut as exc:
            raise UnreadableDocument(
                f"{exc.message} (knowledge.extract_timeout_seconds): stopped"
            ) from None
        except ReadFailed as exc:
            raise UnreadableDocument(f"the document could not be read: {exc.message}") from None
        return await _chunks(frames)


async def _chunks(frames: list[Reply]) -> Extraction:
    last = frames[-1]
    if isinstance(last, Failed):
        if last.reason == "os_error":
            raise OSError(last.message)
        raise UnreadableDocument(last.message)
    if not isinstance(last, Extracted):
        raise UnreadableDocument(f"the reader answered {last.kind}")
    chunks: list[Chunk] = []
    for frame in frames:
        if isinstance(frame, Chunks):
            chunks += [Chunk(*item) for item in frame.chunks]
            await asyncio.sleep(0)  # a frame at a time: the loop serves others between
    if len(chunks) != last.count:
        raise UnreadableDocument(f"the reader sent {len(chunks)} of {last.count} chunks")
    return chunks, last.pages, last.title
