"""One run of indexing one document, done a slice at a time (``IndexJob``).

``prepare`` removes what an earlier run left, has the file read and chunked (by the
``Extractor``: the server's reads in a supervised reader process, under a deadline), and
records how many chunks there are. Each ``step`` is then
one slice: a batch of chunks embedded (through the embedding cache), their rows made
(terms, hashes, vector bytes: in a thread) and written a few rows per transaction, and
the progress recorded. The last step marks the document ready, in one transaction that
also bumps its base's version; only then is it searched. Between two steps the worker
may serve another owner (``fair_queue.py``).

- **Slices of about ``SLICE_SECONDS``**: the batch grows (at most doubling) or shrinks
  so that a step takes about that long, whatever the embedder's speed: a few chunks
  with the local model, hundreds when the vectors come from the cache or there is no
  embedder.
- **Short writes, paced**: a transaction writes at most ``INSERT_ROWS`` rows and
  ``INSERT_CHARS`` characters of text (1-2 ms on SQLite, measured), through
  ``Database.write_in_background``, which keeps a run of them to a share of the event
  loop (SQLite writes run on it).
- **One run, one owner**: every write of the run first checks, in its transaction,
  that the document is still the run's (``is_current_run``); when it no longer is
  (cancelled, deleted, replaced, queued again, its base deleted), the run stops
  quietly and removes only what it wrote.
- **Embeddings are best effort** (Rikkahub's rule): with no embedder, one whose model is
  not the knowledge base's, or one that fails, the chunks are written without vectors
  and found by their words; the document's ``error`` says so.

What does not belong here: the order of documents and slices (``fair_queue.py``,
``ingest.py``), the SQL (``store/kb_documents.py``, ``index.py``), reading formats
(``extract.py``, ``reading.py``), splitting (``chunking.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from parley.documents.types import UnreadableDocument
from parley.knowledge.cache import EmbeddingCache
from parley.knowledge.index import ChunkRow, chunk_rows, insert_rows
from parley.knowledge.reading import Extractor
from parley.knowledge.types import Chunk, Embedder, EmbeddingError
from parley.store.database import Database
from parley.store.kb_documents import is_current_run
from parley.store.knowledge import Document, KnowledgeBase, KnowledgeStore

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

log = logging.getLogger(__name__)

SLICE_SECONDS = 0.5
"""About how long one step takes: the most another owner's document waits for a turn
(with one worker)."""
FIRST_BATCH = 16
MIN_BATCH = 4
MAX_BATCH = 512
INSERT_ROWS = 32
INSERT_CHARS = 12_000
"""Rows and characters of chunk text per write transaction: 8 chunks of 1,400
characters or 32 of 200 take 1-1.5 ms on SQLite here (FTS5 indexing included)."""


def document_path(files: Path, kb_id: str, document_id: str) -> Path:
    """Where an uploaded document's bytes are kept (server-made names only)."""
    return files / kb_id / document_id


class IndexJob:
    """Run ``run`` of indexing ``document_id`` (already marked indexing)."""

    def __init__(
        self,
        store: KnowledgeStore,
        database: Database,
        files: Path,
        cache: EmbeddingCache,
        embedder: Embedder | None,
        *,
        extractor: Extractor,
        document_id: str,
        run: int,
    ) -> None:
        self._store = store
        self._db = database
        self._files = files
        self._cache = cache
        self._embedder = embedder
        self._extractor = extractor
        self.document_id = document_id
        self.run = run
        self._document: Document | None = None
        self._base: KnowledgeBase | None = None
        self._chunks: list[Chunk] = []
        self._done = 0
        self._batch = FIRST_BATCH
        self._note: str | None = None
        self._model_recorded = False
        self.version: int | None = None
        """The base's version once the document is ready."""

    @property
    def kb_id(self) -> str:
        assert self._base is not None
        return self._base.id

    async def prepare(self) -> bool:
        """Read and chunk the document; False when the run is over already (the
        document is gone, unreadable, or no longer the run's)."""
        document = await self._store.document_by_id(self.document_id)
        if document is None:
            return False
        try:
            base = await self._store.get(document.owner, document.kb_id)
        except LookupError:
            return False  # its base is being deleted (and the document with it)
        # left by a crash or an earlier run
        await self._store.purge_chunks(self.document_id, run=self.run)
        path = document_path(self._files, base.id, document.id)
        try:
            chunks, pages, title = await self._extractor.extract(
                path,
                owner=document.owner,
                filename=document.filename,
                content_type=document.content_type,
                chunk_size=base.chunk_size,
                chunk_overlap=base.chunk_overlap,
            )
        except UnreadableDocument as exc:
            await self._store.finish(self.document_id, self.run, "failed", error=str(exc))
            return False
        except OSError as exc:
            if not await self._store.progress(self.document_id, self.run, chunks_done=0):
                return False  # deleted meanwhile: its file went with it
            log.warning("document %s: cannot read its file: %s", document.id, exc)
            error = "the stored file cannot be read"
            await self._store.finish(self.document_id, self.run, "failed", error=error)
            return False
        if not await self._store.progress(
            document.id, self.run, chunks_done=0, chunks_total=len(chunks), pages=pages, title=title
        ):
            await self.stopped()
            return False
        self._document, self._base, self._chunks = document, base, chunks
        self._choose_embedder(base)
        return True

    def _choose_embedder(self, base: KnowledgeBase) -> None:
        embedder = self._embedder
        if embedder is None:
            self._note = "no embedding model is configured: found by its words only"
        elif base.embedding_model not in ("", embedder.model):
            self._note = (
                f"the knowledge base's vectors come from {base.embedding_model}, but the "
                f"server now embeds with {embedder.model}: found by its words only until "
                "the knowledge base is re-indexed"
            )
            self._embedder = None
        self._model_recorded = bool(base.embedding_model)

    async def step(self) -> bool:
        """One slice: embed and write the next batch of chunks (the last one marks the
        document ready). True when the run is over."""
        assert self._document is not None
        began = time.perf_counter()
        batch = self._chunks[self._done : self._done + self._batch]
        vectors = await self._embed(batch) if batch else None
        if not await self._write(batch, vectors):
            await self.stopped()
            return True
        self._done += len(batch)
        if not await self._store.progress(self.document_id, self.run, chunks_done=self._done):
            await self.stopped()
            return True
        if self._done < len(self._chunks):
            self._batch = _next_batch(len(batch), time.perf_counter() - began)
            return False
        await self._finish()
        return True

    async def _embed(self, batch: list[Chunk]) -> Vectors | None:
        """The batch's vectors, or None (no embedder, or it failed: noted)."""
        embedder = self._embedder
        if embedder is None:
            return None
        try:
            vectors = await self._cache.embed(embedder, [c.text for c in batch])
        except EmbeddingError as exc:
            log.warning("document %s: embedding failed: %s", self.document_id, exc)
            self._note = f"embedding failed ({exc}): found by its words only"
            self._embedder = None
            return None
        if not self._model_recorded:
            self._model_recorded = True
            if not await self._store.set_embedding_model(
                self.kb_id, embedder.model, int(vectors.shape[1])
            ):
                self._note = "the knowledge base's embedding model changed: found by words only"
                self._embedder = None
                return None
        return vectors

    async def _write(self, chunks: Sequence[Chunk], vectors: Vectors | None) -> bool:
        """Rows are made in a thread (terms, hashes, vector bytes); each transaction on
        the event loop writes a few of them, if the document is still the run's. False:
        it no longer is (nothing more is written)."""
        document = self._document
        assert document is not None
        if not chunks:
            return True
        rows = await asyncio.to_thread(
            chunk_rows,
            owner=document.owner,
            kb_id=document.kb_id,
            document_id=document.id,
            chunks=chunks,
            vectors=vectors,
        )
        for part in _transactions(rows):
            if not await self._db.write_in_background(
                partial(_insert, document.id, self.run, part)
            ):
                return False
        return True

    async def _finish(self) -> None:
        version = await self._store.finish(self.document_id, self.run, "ready", error=self._note)
        if version is None:
            return await self.stopped()
        self.version = version
        assert self._document is not None
        log.info(
            "document %s (%s): %d chunks indexed",
            self.document_id,
            self._document.filename,
            self._done,
        )

    async def stopped(self) -> None:
        """The document stopped being the run's (cancelled, queued again, deleted or
        replaced, its base deleted): remove what the run wrote, unless a newer run owns
        the document now (it purged that when it began). A deletion removes the rest."""
        await self._store.purge_chunks(self.document_id, run=self.run)

    async def fail(self, error: str) -> None:
        try:
            await self._store.finish(self.document_id, self.run, "failed", error=error)
            await self._store.purge_chunks(self.document_id, run=self.run)
        except Exception:
            log.exception("could not mark document %s failed", self.document_id)


def _next_batch(size: int, seconds: float) -> int:
    """The next batch: as many chunks as fit in ``SLICE_SECONDS`` at this batch's pace,
    at most twice this one."""
    fitting = int(size * SLICE_SECONDS / max(seconds, 1e-3))
    return max(MIN_BATCH, min(MAX_BATCH, 2 * size, fitting))


def _transactions(rows: list[ChunkRow]) -> list[list[ChunkRow]]:
    """The rows in groups of at most ``INSERT_ROWS`` rows and ``INSERT_CHARS``
    characters of text (always at least one row)."""
    groups: list[list[ChunkRow]] = []
    group: list[ChunkRow] = []
    chars = 0
    for row in rows:
        size = len(row[4])
        if group and (len(group) >= INSERT_ROWS or chars + size > INSERT_CHARS):
            groups.append(group)
            group, chars = [], 0
        group.append(row)
        chars += size
    if group:
        groups.append(group)
    return groups


def _insert(document_id: str, run: int, rows: Sequence[ChunkRow], conn: Connection) -> bool:
    """Write the rows if the document is still the run's, in the same transaction that
    checks it; False (nothing written) if not."""
    if not is_current_run(conn, document_id, run):
        return False
    insert_rows(conn, rows)
    return True
