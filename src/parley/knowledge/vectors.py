"""Vectors in memory: each knowledge base's vectors as one float32 matrix, searched
exactly (a matrix-vector product on a worker thread: numpy releases the GIL).

A matrix is loaded at its base's first search and brought up to date from the database
whenever the base's ``version`` moves on (only the documents that changed are read),
whoever made the change; memory is bounded (the least recently used bases go first). The
owner, the base and ``status = 'ready'`` are conditions of the SQL that loads rows. Only
vectors of the base's recorded embedding model are compared with a query vector.

Measured on the 2-core machine (``bench/knowledge.py``): exact numpy over 100k x 384
float32 takes 8-13 ms; sqlite-vec's exact scan 100 ms, its int8 110 ms; faiss float16 7 ms
(a large dependency); binary codes with rescoring 5 ms but recall@10 0.73 on random
vectors. Hence exact numpy.

The cross-lingual rescaling and what both vector indexes share: ``vector_search.py``.

What does not belong here: searching by words and fusion (``index.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, bindparam, select, text

from parley.knowledge.background import Floors
from parley.knowledge.types import KbRef
from parley.knowledge.vector_search import CROSS_LINGUAL, unit_query, within_script
from parley.store.database import Database
from parley.store.schema import kb_documents, knowledge_bases

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

log = logging.getLogger(__name__)

FETCH_BATCH = 500
"""Documents read per statement when a matrix catches up."""


Key = tuple[str, str]
"""(owner, knowledge base id)."""
_GROWTH = 1.25
"""A matrix grows by a quarter when a document does not fit: amortised, not per row."""
_COMPACT_SHARE = 0.25
"""Rows of removed documents are dropped from the matrix past this share of it."""


def _row_bytes(dimensions: int) -> int:
    return dimensions * 4 + 8 + 4 + 1 + 1  # vector, chunk id, document code, alive, script


@dataclass(slots=True)
class _Matrix:
    """A knowledge base's rows. Once handed to ``VectorIndexes``, touched only on its
    worker thread: searches and changes run there one at a time, in the order asked."""

    vectors: npt.NDArray[np.float32]
    ids: npt.NDArray[np.int64]
    documents: npt.NDArray[np.int32]
    alive: npt.NDArray[np.bool_]
    scripts: npt.NDArray[np.int8]
    size: int
    dead: int = 0

    @classmethod
    def empty(cls, capacity: int, dimensions: int) -> _Matrix:
        return cls(
            np.empty((capacity, dimensions), dtype=np.float32),
            np.empty(capacity, dtype=np.int64),
            np.empty(capacity, dtype=np.int32),
            np.ones(capacity, dtype=np.bool_),
            np.zeros(capacity, dtype=np.int8),
            0,
        )

    def append(self, rows: _Rows, codes: npt.NDArray[np.int32], capacity: int) -> None:
        end = self.size + len(rows.ids)
        if capacity > len(self.ids):
            grown = _Matrix.empty(capacity, self.vectors.shape[1])
            grown.vectors[: self.size] = self.vectors[: self.size]
            grown.ids[: self.size] = self.ids[: self.size]
            grown.documents[: self.size] = self.documents[: self.size]
            grown.alive[: self.size] = self.alive[: self.size]
            grown.scripts[: self.size] = self.scripts[: self.size]
            self.vectors, self.ids, self.documents = grown.vectors, grown.ids, grown.documents
            self.alive, self.scripts = grown.alive, grown.scripts
        self.vectors[self.size : end] = rows.vectors
        self.ids[self.size : end] = rows.ids
        self.documents[self.size : end] = codes
        self.alive[self.size : end] = True
        self.scripts[self.size : end] = rows.scripts
        self.size = end

    def kill(self, code: int) -> None:
        rows = self.alive[: self.size] & (self.documents[: self.size] == code)
        self.dead += int(rows.sum())
        self.alive[: self.size] &= ~rows

    def compact(self, capacity: int) -> None:
        keep = np.flatnonzero(self.alive[: self.size])
        smaller = _Matrix.empty(max(capacity, len(keep)), self.vectors.shape[1])
        smaller.vectors[: len(keep)] = self.vectors[keep]
        smaller.ids[: len(keep)] = self.ids[keep]
        smaller.documents[: len(keep)] = self.documents[keep]
        smaller.scripts[: len(keep)] = self.scripts[keep]
        self.vectors, self.ids, self.documents = smaller.vectors, smaller.ids, smaller.documents
        self.alive, self.scripts = smaller.alive, smaller.scripts
        self.size, self.dead = len(keep), 0

    def top(
        self,
        query: npt.NDArray[np.float32],
        limit: int,
        *,
        by_script: bool = False,
        floors: Floors | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The best ``limit`` rows: (score, chunk id), in no order. The score is the
        cosine; ``by_script``, the cosine standardised within its script (the module).
        Rows whose cosine is under their script's ``floors`` are left out."""
        if self.size == 0:
            return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)
        # one row at a time on this thread (vecdot), not BLAS's matrix product: OpenBLAS's
        # threads added up to 20 ms of wake-up latency when the other core was busy, for
        # no gain (the product is bound by memory bandwidth: 150 MB read at 100k x 384);
        # and unlike einsum, vecdot lets go of the GIL (measured)
        vecdot = getattr(np, "vecdot", None)  # numpy 2.0 and later
        rows = self.vectors[: self.size]
        scores: npt.NDArray[np.float32] = rows @ query if vecdot is None else vecdot(rows, query)
        if self.dead:
            scores[~self.alive[: self.size]] = -np.inf
        below = None
        if floors is not None:
            least = np.asarray(floors, dtype=np.float32)[self.scripts[: self.size]]
            below = scores < least
        if by_script:
            scores = within_script(scores, self.scripts[: self.size])
        if below is not None:
            scores[below] = -np.inf
        if limit < self.size:
            best = np.argpartition(scores, self.size - limit)[self.size - limit :]
        else:
            best = np.arange(self.size)
        best = best[np.isfinite(scores[best])]
        return scores[best], self.ids[best]


@dataclass(frozen=True, slots=True)
class _Rows:
    ids: npt.NDArray[np.int64]
    documents: list[str]
    """Each row's document id."""
    vectors: npt.NDArray[np.float32]
    scripts: npt.NDArray[np.int8]


@dataclass(slots=True)
class _Entry:
    """A cached matrix and what the event loop knows of it, exactly, without waiting
    for the worker (its changes are queued there)."""

    model: str
    dimensions: int
    version: int
    matrix: _Matrix
    documents: dict[str, tuple[int, float]]
    """Each ready document's id -> (its code in the matrix, its ``updated_at``)."""
    rows: dict[int, int]
    """Document code -> how many rows (chunks with a vector) it has in the matrix."""
    size: int
    capacity: int
    dead: int = 0
    next_code: int = 0

    @property
    def nbytes(self) -> int:
        return self.capacity * _row_bytes(self.dimensions)

    def code(self, document_id: str, updated: float) -> int:
        known = self.documents.get(document_id)
        if known is not None:
            return known[0]
        code = self.next_code
        self.next_code += 1
        self.documents[document_id] = (code, updated)
        return code


@dataclass(frozen=True, slots=True)
class _Base:
    version: int
    model: str
    dimensions: int
    documents: dict[str, float]
    """Ready document id -> ``updated_at`` (changes when a document is indexed again)."""


@dataclass(frozen=True, slots=True)
class _Changes:
    base: _Base
    removed: list[str]
    added: _Rows


@dataclass(frozen=True, slots=True)
class _TooLarge:
    version: int
    nbytes: int


class VectorIndexes:
    """The vectors of every knowledge base searched, per (owner, knowledge base), in
    memory: at most ``max_bytes`` in all, least recently searched out first. A base
    larger than that on its own is searched by words only (a warning says so).

    A matrix is read at the base's first search. When a search names a later
    ``version`` than the matrix's, the documents ready then are compared with those in
    the matrix (by id and ``updated_at``, one small read) and only those that changed
    are read: a change made by this process or another one alike. ``forget_document``
    drops a document's rows at once, before any search.
    """

    def __init__(self, database: Database, *, max_bytes: int) -> None:
        self._db = database
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._refreshing: dict[Key, asyncio.Future[None]] = {}
        self._too_large: dict[Key, int] = {}
        """Bases found too large, at which version (not read again until it changes)."""
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="parley-vectors")

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    def cached(self, owner: str, kb_id: str) -> tuple[int, int] | None:
        """(version, rows) of a base's matrix in memory, or None (for tests and stats)."""
        entry = self._entries.get((owner, kb_id))
        return None if entry is None else (entry.version, entry.size - entry.dead)

    async def search(
        self,
        owner: str,
        kbs: Sequence[KbRef],
        model: str,
        vector: Vectors,
        limit: int,
        *,
        floors: Floors | None = None,
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine), best first, at most ``limit``: the owner's chunks of
        ready documents of those ``kbs`` whose recorded embedding model is ``model``
        (the model that made ``vector``); the other bases are not compared. A chunk
        under its script's ``floors`` (``background.floors``) is not a match."""
        query = unit_query(vector)
        if not model or limit < 1 or query is None:
            return []
        same: dict[str, KbRef] = {}
        for kb in kbs:
            if kb.embedding_model == model and kb.version >= same.get(kb.id, kb).version:
                same[kb.id] = kb
        entries = await asyncio.gather(*(self._current(owner, kb) for kb in same.values()))
        matrices = [
            entry.matrix
            for entry in entries
            if entry is not None and entry.model == model and entry.dimensions == len(query)
        ]
        if not matrices:
            return []
        loop = asyncio.get_running_loop()
        by_script = model in CROSS_LINGUAL
        return await loop.run_in_executor(
            self._worker, _top, matrices, query, limit, by_script, floors
        )

    def document_ready(self, kb_id: str, version: int, document_id: str) -> None:
        """A document of ``kb_id`` became searchable, and the base is now at
        ``version``. Nothing to do yet: the next search of the base sees the version
        moved on and reads that document's vectors alone."""

    def forget_document(self, kb_id: str, document_id: str) -> None:
        """The document is no longer searchable (deleted, or queued to be indexed
        again): its rows leave the base's matrices now."""
        for key, entry in self._entries.items():
            if key[1] == kb_id:
                self._remove(entry, document_id)
                self._maybe_compact(entry)

    def forget_base(self, kb_id: str) -> None:
        for key in [key for key in self._entries if key[1] == kb_id]:
            del self._entries[key]

    def close(self) -> None:
        self._entries.clear()
        self._worker.shutdown(wait=False, cancel_futures=True)

    # --- keeping matrices current ---------------------------------------------------------

    async def _current(self, owner: str, kb: KbRef) -> _Entry | None:
        """The base's matrix at ``kb.version`` or later: read, or brought up to date."""
        key = (owner, kb.id)
        while True:
            entry = self._entries.get(key)
            if entry is not None and entry.version >= kb.version:
                self._entries.move_to_end(key)
                return entry
            if self._too_large.get(key, -1) >= kb.version:
                return None
            running = self._refreshing.get(key)
            if running is None:
                break
            await asyncio.shield(running)  # then look again
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refreshing[key] = done
        try:
            return await self._refresh(key, entry)
        finally:
            del self._refreshing[key]
            done.set_result(None)

    async def _refresh(self, key: Key, entry: _Entry | None) -> _Entry | None:
        owner, kb_id = key
        budget = self.max_bytes
        result: _Changes | _Entry | _TooLarge | None
        if entry is None:
            result = await self._db.read(lambda conn: _load(conn, owner, kb_id, budget), heavy=True)
        else:
            known = {doc: updated for doc, (_code, updated) in entry.documents.items()}
            shape = (entry.model, entry.dimensions)
            result = await self._db.read(
                lambda conn: _changes(conn, owner, kb_id, known, shape, budget), heavy=True
            )
        current = self._entries.pop(key, None)
        if isinstance(result, _Changes):
            if current is None:  # forgotten meanwhile: read afresh next time
                return None
            self._apply(current, result)
            result = current
        if result is None:
            return None
        if isinstance(result, _TooLarge) or result.nbytes > self.max_bytes:
            self._refuse(key, result.version, result.nbytes)
            return None
        self._too_large.pop(key, None)
        self._entries[key] = result
        total = self.nbytes
        for other in list(self._entries):
            if total <= self.max_bytes:
                break
            if other != key:
                total -= self._entries.pop(other).nbytes
        return result

    def _refuse(self, key: Key, version: int, nbytes: int) -> None:
        """Not kept: too large for the cache (not read again before the next version)."""
        if key not in self._too_large:
            log.warning(
                "knowledge base %s: its vectors need %.0f MB, more than the vector cache's "
                "%.0f MB (knowledge.vector_cache_mb): it is searched by words only",
                key[1],
                nbytes / 2**20,
                self.max_bytes / 2**20,
            )
        self._too_large[key] = version

    def _apply(self, entry: _Entry, changes: _Changes) -> None:
        for document_id in changes.removed:
            self._remove(entry, document_id)
        ready = changes.base.documents
        for document_id, updated in ready.items():
            entry.code(document_id, updated)  # with vectors or not
        added = changes.added
        if len(added.ids):
            codes = np.array([entry.documents[d][0] for d in added.documents], dtype=np.int32)
            counted, counts = np.unique(codes, return_counts=True)
            for code, count in zip(counted.tolist(), counts.tolist(), strict=True):
                entry.rows[code] = entry.rows.get(code, 0) + count
            end = entry.size + len(added.ids)
            if end > entry.capacity:
                entry.capacity = max(end, int(entry.capacity * _GROWTH) + 1)
            entry.size = end
            self._worker.submit(entry.matrix.append, added, codes, entry.capacity)
        entry.version = changes.base.version
        self._maybe_compact(entry)

    def _remove(self, entry: _Entry, document_id: str) -> None:
        known = entry.documents.pop(document_id, None)
        if known is None:
            return
        rows = entry.rows.pop(known[0], 0)
        if rows:
            entry.dead += rows
            self._worker.submit(entry.matrix.kill, known[0])

    def _maybe_compact(self, entry: _Entry) -> None:
        if entry.dead and entry.dead > _COMPACT_SHARE * entry.size:
            entry.size -= entry.dead
            entry.dead = 0
            entry.capacity = entry.size
            self._worker.submit(entry.matrix.compact, entry.capacity)


def _top(
    matrices: list[_Matrix],
    query: npt.NDArray[np.float32],
    limit: int,
    by_script: bool,
    floors: Floors | None,
) -> list[tuple[int, float]]:
    """On the worker thread: the best ``limit`` rows of all ``matrices``, ties by id."""
    parts = [matrix.top(query, limit, by_script=by_script, floors=floors) for matrix in matrices]
    scores = np.concatenate([part[0] for part in parts])
    ids = np.concatenate([part[1] for part in parts])
    order = np.lexsort((ids, -scores))[:limit]
    return list(zip(ids[order].tolist(), scores[order].tolist(), strict=True))


_ROWS_WHERE = (
    "FROM kb_chunks AS c JOIN kb_documents AS d ON d.id = c.document_id "
    "WHERE c.owner = :owner AND c.kb_id = :kb_id AND d.owner = :owner AND d.kb_id = :kb_id "
    "AND d.status = 'ready' AND c.embedding IS NOT NULL AND length(c.embedding) = :width"
)
_COUNT_ROWS = text(f"SELECT count(*) {_ROWS_WHERE}")
_ALL_ROWS = text(f"SELECT c.id, c.document_id, c.embedding, c.script {_ROWS_WHERE} ORDER BY c.id")
_DOCUMENT_ROWS = text(
    f"SELECT c.id, c.document_id, c.embedding, c.script {_ROWS_WHERE} "
    "AND c.document_id IN :documents "
    "ORDER BY c.id"
).bindparams(bindparam("documents", expanding=True))


def _base(conn: Connection, owner: str, kb_id: str) -> _Base | None:
    row = conn.execute(
        select(
            knowledge_bases.c.version,
            knowledge_bases.c.embedding_model,
            knowledge_bases.c.dimensions,
        ).where(knowledge_bases.c.id == kb_id, knowledge_bases.c.owner == owner)
    ).first()
    if row is None:
        return None
    ready = conn.execute(
        select(kb_documents.c.id, kb_documents.c.updated_at)
        .where(
            kb_documents.c.kb_id == kb_id,
            kb_documents.c.owner == owner,
            kb_documents.c.status == "ready",
        )
        .order_by(kb_documents.c.id)
    )
    return _Base(
        version=int(row.version),
        model=row.embedding_model or "",
        dimensions=int(row.dimensions or 0),
        documents={str(d.id): float(d.updated_at) for d in ready},
    )


def _load(
    conn: Connection, owner: str, kb_id: str, budget: int, base: _Base | None = None
) -> _Entry | _TooLarge | None:
    """In a reader thread, on one snapshot: the matrix of the base's ready documents."""
    base = base or _base(conn, owner, kb_id)
    if base is None:
        return None
    dimensions = base.dimensions if base.model else 0
    params = {"owner": owner, "kb_id": kb_id, "width": dimensions * 4}
    count = int(conn.execute(_COUNT_ROWS, params).scalar_one()) if dimensions else 0
    if count * _row_bytes(dimensions) > budget:
        return _TooLarge(base.version, count * _row_bytes(dimensions))
    matrix = _Matrix.empty(count, dimensions)
    codes = {document_id: n for n, document_id in enumerate(base.documents)}
    n = 0
    if count:
        for chunk_id, document_id, blob, script in conn.execute(_ALL_ROWS, params):
            if n == count:
                break
            matrix.vectors[n] = np.frombuffer(blob, dtype="<f4")
            matrix.ids[n] = chunk_id
            matrix.documents[n] = codes[document_id]
            matrix.scripts[n] = script
            n += 1
    matrix.size = n
    counted, counts = np.unique(matrix.documents[:n], return_counts=True)
    return _Entry(
        model=base.model,
        dimensions=dimensions,
        version=base.version,
        matrix=matrix,
        documents={d: (code, base.documents[d]) for d, code in codes.items()},
        rows=dict(zip(counted.tolist(), counts.tolist(), strict=True)),
        size=n,
        capacity=count,
        next_code=len(codes),
    )


def _changes(
    conn: Connection,
    owner: str,
    kb_id: str,
    known: dict[str, float],
    shape: tuple[str, int],
    budget: int,
) -> _Changes | _Entry | _TooLarge | None:
    """In a reader thread, on one snapshot: the documents no longer ready (or ready
    anew: ``updated_at`` moved) since the matrix was made, and the vectors of those
    ready now; the whole base again when its embedding model changed."""
    base = _base(conn, owner, kb_id)
    if base is None:
        return None
    if (base.model, base.dimensions if base.model else 0) != shape:
        return _load(conn, owner, kb_id, budget, base)
    removed = [doc for doc, updated in known.items() if base.documents.get(doc) != updated]
    added = [doc for doc, updated in base.documents.items() if known.get(doc) != updated]
    found: list[tuple[int, str, bytes, int]] = []
    if added and shape[1]:
        params: dict[str, Any] = {"owner": owner, "kb_id": kb_id, "width": shape[1] * 4}
        for start in range(0, len(added), FETCH_BATCH):
            params["documents"] = added[start : start + FETCH_BATCH]
            rows = conn.execute(_DOCUMENT_ROWS, params)
            found.extend((int(row[0]), str(row[1]), bytes(row[2]), int(row[3])) for row in rows)
    vectors = np.empty((len(found), shape[1]), dtype=np.float32)
    for n, (_id, _document, blob, _script) in enumerate(found):
        vectors[n] = np.frombuffer(blob, dtype="<f4")
    ids = np.array([row[0] for row in found], dtype=np.int64)
    scripts = np.array([row[3] for row in found], dtype=np.int8)
    return _Changes(base, removed, _Rows(ids, [row[1] for row in found], vectors, scripts))
