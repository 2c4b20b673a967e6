"""Ingestion: the background queue that turns an uploaded document into searchable chunks.

A document row is its own job (``store/knowledge.py``): uploading queues it, a worker
takes it (queued -> indexing), reads the file, extracts its text and chunks it (in a
thread), embeds the chunks a batch at a time (through the embedding cache), writes them
a batch per transaction, records progress after every batch, and marks it ready in one
last transaction that also bumps its knowledge base's version. Only then is it searched.

- **Bounded**: the store refuses a new document when ``knowledge.max_queued_documents``
  are pending server-wide; ``knowledge.workers`` documents are indexed at once.
- **One run, one owner**: each start of indexing is a new run of the document
  (``start_indexing`` numbers it), and every write of a run (a batch of chunks, its
  progress, its end) is a transaction that first checks the document is still that
  run's (``is_current_run``). Cancelling, deleting or replacing a document, deleting
  its base, or queuing it again therefore stops the run at its next write, which is
  dropped, not failed: the run ends quietly and removes what it wrote, unless a newer
  run owns the document by then.
- **Resumed after a restart**: ``start`` queues every document still queued, and those a
  crash left indexing (their partial chunks are removed first), oldest first.
- **Embeddings are best effort** (Rikkahub's rule): with no embedder, one whose model is
  not the knowledge base's, or one that fails, the chunks are written without vectors
  and found by their words; the document's ``error`` says so.

What does not belong here: the SQL (``store/knowledge.py``, ``index.py``), reading
formats (``extract.py``), splitting (``chunking.py``), the HTTP routes.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from parley.knowledge.cache import EmbeddingCache
from parley.knowledge.chunking import chunk
from parley.knowledge.extract import extract
from parley.knowledge.index import ChunkRow, chunk_rows, insert_rows
from parley.knowledge.types import Chunk, Embedder, EmbeddingError, UnreadableDocument
from parley.knowledge.vectors import VectorIndexes
from parley.store.database import Database
from parley.store.kb_documents import is_current_run
from parley.store.knowledge import Document, KnowledgeBase, KnowledgeStore

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

log = logging.getLogger(__name__)

EMBED_BATCH = 64
"""Chunks embedded per step (and per progress write)."""
INSERT_BATCH = 16
"""Chunks written per transaction: 3-4 ms on SQLite, FTS5 indexing included (measured
for ``index.py``); SQLite writes run on the event loop."""


def document_path(files: Path, kb_id: str, document_id: str) -> Path:
    """Where an uploaded document's bytes are kept (server-made names only)."""
    return files / kb_id / document_id


class Ingestor:
    def __init__(
        self,
        store: KnowledgeStore,
        database: Database,
        files: Path,
        *,
        embedder: Embedder | None,
        cache: EmbeddingCache,
        vectors: VectorIndexes,
        workers: int = 1,
    ) -> None:
        self._store = store
        self._db = database
        self._files = files
        self._embedder = embedder
        self._cache = cache
        self._vectors = vectors
        self._workers = workers
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._running = 0
        """Runs in progress (the queue is idle when it is empty and none runs)."""
        self._purges: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()
        self.idle.set()

    async def start(self) -> None:
        """Finish interrupted deletions, queue what is pending, start the workers."""
        bases = set(await self._store.deleting_bases())
        documents = await self._store.deleting()
        for kb_id in bases:
            self.purge_base(kb_id, [doc for kb, doc in documents if kb == kb_id])
        for kb_id, document_id in documents:
            if kb_id not in bases:
                await self.remove(kb_id, document_id)
        for document_id in await self._store.pending():
            self.enqueue(document_id)
        for number in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"ingest-{number}"))

    async def close(self) -> None:
        for task in (*self._tasks, *self._purges):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._purges, return_exceptions=True)
        self._tasks.clear()

    def purge_base(self, kb_id: str, documents: Sequence[str]) -> asyncio.Task[None]:
        """Remove a base already marked deleting (hidden from every query) in the
        background: its chunks a batch at a time, then its rows and its folder. A crash
        midway is finished by the next ``start``."""
        task = asyncio.create_task(self._purge_base(kb_id, list(documents)))
        self._purges.add(task)
        task.add_done_callback(self._purges.discard)
        return task

    async def _purge_base(self, kb_id: str, documents: list[str]) -> None:
        try:
            hashes: list[str] = []
            for document_id in documents:
                hashes += await self._store.chunk_hashes(document_id)
                await self._store.purge_chunks(document_id)
            await self._store.delete_base_row(kb_id)
            await self._cache.forget_unused(hashes)
            await asyncio.to_thread(shutil.rmtree, self._files / kb_id, True)
            self._vectors.forget_base(kb_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("deleting knowledge base %s failed; retried at the next start", kb_id)

    def enqueue(self, document_id: str) -> None:
        self.idle.clear()
        self._queue.put_nowait(document_id)

    def remove_later(self, kb_id: str, document_id: str) -> None:
        """``remove`` in the background (the document is already hidden)."""
        task = asyncio.create_task(self._remove_logged(kb_id, document_id))
        self._purges.add(task)
        task.add_done_callback(self._purges.discard)

    async def _remove_logged(self, kb_id: str, document_id: str) -> None:
        try:
            await self.remove(kb_id, document_id)
        except Exception:
            log.exception("deleting document %s failed; retried at the next start", document_id)

    async def remove(self, kb_id: str, document_id: str) -> None:
        """Delete a document already marked ``deleting``: its chunks (a batch at a time),
        its row, its file, and its vectors in memory."""
        hashes = await self._store.chunk_hashes(document_id)
        await self._store.purge_chunks(document_id)
        await self._store.delete_document_row(document_id)
        await self._cache.forget_unused(hashes)
        await asyncio.to_thread(document_path(self._files, kb_id, document_id).unlink, True)
        self._vectors.forget_document(kb_id, document_id)

    async def _work(self) -> None:
        while True:
            document_id = await self._queue.get()
            try:
                run = await self._store.start_indexing(document_id)
                if run is not None:  # else cancelled or deleted while it waited
                    await self._run(document_id, run)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not start indexing document %s", document_id)
            finally:
                self._queue.task_done()
                if self._queue.empty() and not self._running:
                    self.idle.set()

    async def _run(self, document_id: str, run: int) -> None:
        self._running += 1
        try:
            await self._index(document_id, run)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("indexing document %s failed", document_id)
            await self._fail(document_id, run, "internal error while indexing (see server log)")
        finally:
            self._running -= 1

    async def _index(self, document_id: str, run: int) -> None:
        document = await self._store.document_by_id(document_id)
        if document is None:
            return
        try:
            base = await self._store.get(document.owner, document.kb_id)
        except LookupError:
            return  # its base is being deleted (and the document with it)
        # left by a crash or an earlier run
        await self._store.purge_chunks(document_id, run=run)
        try:
            chunks, pages, title = await asyncio.to_thread(
                _read,
                document_path(self._files, base.id, document_id),
                document,
                base.chunk_size,
                base.chunk_overlap,
            )
        except UnreadableDocument as exc:
            await self._store.finish(document_id, run, "failed", error=str(exc))
            return
        except OSError as exc:
            if not await self._store.progress(document_id, run, chunks_done=0):
                return  # deleted meanwhile: its file went with it
            log.warning("document %s: cannot read its file: %s", document_id, exc)
            error = "the stored file cannot be read"
            await self._store.finish(document_id, run, "failed", error=error)
            return
        if not await self._store.progress(
            document_id, run, chunks_done=0, chunks_total=len(chunks), pages=pages, title=title
        ):
            return await self._stopped(document_id, run)
        await self._index_chunks(document, base, chunks, run)

    async def _index_chunks(
        self, document: Document, base: KnowledgeBase, chunks: list[Chunk], run: int
    ) -> None:
        """Embed and write the chunks a batch at a time, then mark the document ready."""
        embedder, note = self._embedder, None
        if embedder is None:
            note = "no embedding model is configured: found by its words only"
        elif base.embedding_model not in ("", embedder.model):
            note = (
                f"the knowledge base's vectors come from {base.embedding_model}, but the "
                f"server now embeds with {embedder.model}: found by its words only until "
                "the knowledge base is re-indexed"
            )
            embedder = None
        model_recorded = bool(base.embedding_model)
        done = 0
        for start in range(0, len(chunks), EMBED_BATCH):
            batch = chunks[start : start + EMBED_BATCH]
            vectors: Vectors | None = None
            if embedder is not None:
                try:
                    vectors = await self._cache.embed(embedder, [c.text for c in batch])
                except EmbeddingError as exc:
                    log.warning("document %s: embedding failed: %s", document.id, exc)
                    note = f"embedding failed ({exc}): found by its words only"
                    embedder = None
            if vectors is not None and embedder is not None and not model_recorded:
                if not await self._store.set_embedding_model(
                    base.id, embedder.model, int(vectors.shape[1])
                ):
                    note = "the knowledge base's embedding model changed: found by words only"
                    embedder, vectors = None, None
                model_recorded = True
            if not await self._write(document, batch, vectors, run):
                return await self._stopped(document.id, run)
            done += len(batch)
            if not await self._store.progress(document.id, run, chunks_done=done):
                return await self._stopped(document.id, run)
        version = await self._store.finish(document.id, run, "ready", error=note)
        if version is None:
            return await self._stopped(document.id, run)
        self._vectors.document_ready(base.id, version, document.id)
        log.info("document %s (%s): %d chunks indexed", document.id, document.filename, done)

    async def _write(
        self, document: Document, chunks: Sequence[Chunk], vectors: Vectors | None, run: int
    ) -> bool:
        """Rows are made in a thread (terms, hashes, vector bytes); each transaction on
        the event loop only writes ``INSERT_BATCH`` of them, if the document is still
        the run's. False: it no longer is (nothing more is written)."""
        rows = await asyncio.to_thread(
            chunk_rows,
            owner=document.owner,
            kb_id=document.kb_id,
            document_id=document.id,
            chunks=chunks,
            vectors=vectors,
        )
        for start in range(0, len(rows), INSERT_BATCH):
            batch = rows[start : start + INSERT_BATCH]
            if not await self._db.write(partial(_insert, document.id, run, batch)):
                return False
            await asyncio.sleep(0)  # an inline SQLite write never yields by itself
        return True

    async def _stopped(self, document_id: str, run: int) -> None:
        """The document stopped being the run's (cancelled, queued again, deleted or
        replaced, its base deleted): remove what the run wrote, unless a newer run owns
        the document now (it purged that when it began). A deletion removes the rest."""
        await self._store.purge_chunks(document_id, run=run)

    async def _fail(self, document_id: str, run: int, error: str) -> None:
        try:
            await self._store.finish(document_id, run, "failed", error=error)
            await self._store.purge_chunks(document_id, run=run)
        except Exception:
            log.exception("could not mark document %s failed", document_id)


def _insert(document_id: str, run: int, rows: Sequence[ChunkRow], conn: Connection) -> bool:
    """Write the rows if the document is still the run's, in the same transaction that
    checks it; False (nothing written) if not."""
    if not is_current_run(conn, document_id, run):
        return False
    insert_rows(conn, rows)
    return True


def _read(
    path: Path, document: Document, size: int, overlap: int
) -> tuple[list[Chunk], int | None, str | None]:
    """The document's chunks, page count and title (in a worker thread)."""
    extracted = extract(path.read_bytes(), document.filename, document.content_type)
    return chunk(extracted, size, overlap), extracted.pages, extracted.title
