"""Ingestion: the background queue that turns uploaded documents into searchable chunks.

A document row is its own job (``store/kb_documents.py``): uploading queues it, and the
``Ingestor`` indexes it. ``knowledge.workers`` workers take turns from a ``FairQueue``
(``fair_queue.py``): round-robin across owners, in upload order within an owner. A turn
starts an owner's next document or works one slice of a started one (``indexing.py``:
a batch of chunks embedded and written, about half a second), so one owner's backlog or
huge document never holds back another owner's documents for more than a slice.

- **Starting** marks the document indexing under a new run number, then reads and
  chunks it in the background (``PREPARATIONS`` per worker at once, each owner at most
  ``workers``): a slow extraction keeps neither the workers nor other owners waiting.
- **Bounded**: the store refuses a new document when ``knowledge.max_queued_documents``
  are pending server-wide, or ``knowledge.max_queued_per_owner`` of the owner's are
  (429); at most ``workers`` documents of one owner, and ``STARTED_PER_WORKER`` per
  worker in all, are started (held in memory) at once.
- **One run, one owner**: every write of a run checks, in its transaction, that the
  document is still the run's (``is_current_run``): cancelling, deleting or replacing a
  document, deleting its base, or queuing it again stops the run at its next write,
  quietly, and the run removes only what it wrote.
- **Resumed after a restart**: ``start`` queues every document still queued, and those a
  crash left indexing (their partial chunks are removed first), oldest first; the fair
  queue then interleaves the owners as it does live.

What does not belong here: the steps of indexing a document (``indexing.py``), the SQL
(``store/kb_documents.py``, ``index.py``), reading formats (``extract.py``), the HTTP
routes.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from parley.knowledge.cache import EmbeddingCache
from parley.knowledge.fair_queue import FairQueue, Resume, Start
from parley.knowledge.indexing import IndexJob, document_path
from parley.knowledge.reading import Extractor
from parley.knowledge.types import Embedder
from parley.knowledge.vector_search import VectorSearch
from parley.store.database import Database
from parley.store.knowledge import KnowledgeStore

__all__ = ["Ingestor", "document_path"]

log = logging.getLogger(__name__)

PREPARATIONS = 2
"""Documents read and chunked at once, per worker."""
STARTED_PER_WORKER = 4
"""Documents started (their chunks in memory) at once, per worker, all owners together."""


class Ingestor:
    def __init__(
        self,
        store: KnowledgeStore,
        database: Database,
        files: Path,
        *,
        embedder: Embedder | None,
        cache: EmbeddingCache,
        vectors: VectorSearch,
        extractor: Extractor,
        workers: int = 1,
    ) -> None:
        self._store = store
        self._extractor = extractor
        self._db = database
        self._files = files
        self._embedder = embedder
        """The embedder's lane for indexing (``embeddings.indexing_lane``)."""
        self._cache = cache
        self._vectors = vectors
        self._workers = workers
        self._queue: FairQueue[IndexJob] = FairQueue(
            per_owner=workers, started=STARTED_PER_WORKER * workers
        )
        self._preparing = asyncio.Semaphore(PREPARATIONS * workers)
        self._tasks: list[asyncio.Task[None]] = []
        self._purges: set[asyncio.Task[None]] = set()
        self._jobs: set[asyncio.Task[None]] = set()
        """Documents being read and chunked."""
        self.idle = self._queue.idle
        """Set while nothing is queued or being indexed."""

    async def start(self) -> None:
        """Finish interrupted deletions, queue what is pending, start the workers."""
        bases = set(await self._store.deleting_bases())
        documents = await self._store.deleting()
        for kb_id in bases:
            self.purge_base(kb_id, [doc for kb, doc in documents if kb == kb_id])
        for kb_id, document_id in documents:
            if kb_id not in bases:
                await self.remove(kb_id, document_id)
        for owner, document_id in await self._store.pending():
            self.enqueue(owner, document_id)
        for number in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"ingest-{number}"))

    async def close(self) -> None:
        tasks = (*self._tasks, *self._jobs, *self._purges)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    def enqueue(self, owner: str, document_id: str) -> None:
        """Index the owner's document (already queued in the database) in its turn."""
        self._queue.add(owner, document_id)

    # --- deleting --------------------------------------------------------------------

    def purge_base(self, kb_id: str, documents: Sequence[str]) -> asyncio.Task[None]:
        """Remove a base already marked deleting (hidden from every query) in the
        background: its chunks a batch at a time, then its rows and its folder. A crash
        midway is finished by the next ``start``."""
        return self._background(self._purge_base(kb_id, list(documents)), self._purges)

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

    def remove_later(self, kb_id: str, document_id: str) -> None:
        """``remove`` in the background (the document is already hidden)."""
        self._background(self._remove_logged(kb_id, document_id), self._purges)

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

    # --- indexing --------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            match await self._queue.take():
                case Start(owner, document_id):
                    await self._start(owner, document_id)
                case Resume(owner, job):
                    await self._slice(owner, job)

    async def _start(self, owner: str, document_id: str) -> None:
        """Mark the document indexing and read it in the background; the owner's turn
        ends at once."""
        try:
            run = await self._store.start_indexing(document_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("could not start indexing document %s", document_id)
            run = None
        if run is None:  # cancelled or deleted while it waited
            self._queue.finished(owner)
            return
        job = IndexJob(
            self._store,
            self._db,
            self._files,
            self._cache,
            self._embedder,
            extractor=self._extractor,
            document_id=document_id,
            run=run,
        )
        self._background(self._prepare(owner, job), self._jobs)

    async def _prepare(self, owner: str, job: IndexJob) -> None:
        ready = False
        try:
            async with self._preparing:
                ready = await job.prepare()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("indexing document %s failed", job.document_id)
            await job.fail("internal error while indexing (see server log)")
        if ready:
            self._queue.resume(owner, job)
        else:
            self._queue.finished(owner)

    async def _slice(self, owner: str, job: IndexJob) -> None:
        over = True
        try:
            over = await job.step()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("indexing document %s failed", job.document_id)
            await job.fail("internal error while indexing (see server log)")
        if not over:
            self._queue.resume(owner, job)
            return
        if job.version is not None:
            self._vectors.document_ready(job.kb_id, job.version, job.document_id)
        self._queue.finished(owner)

    def _background(
        self, work: Coroutine[Any, Any, None], into: set[asyncio.Task[None]]
    ) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        into.add(task)
        task.add_done_callback(into.discard)
        return task
