"""Remembering, recalling and forgetting: the memory store with an embedder in front.

A scope is an assistant's id (that assistant's own memories) or ``"global"`` (memories
of no assistant); every call names the owner and the scope, and sees nothing else.

- ``remember`` stores the text with its vector when the embedder can make one; when it
  cannot (none configured, or it fails) the memory is still stored, found lexically
  until a later recall embeds it.
- ``recall`` is hybrid: the lexical search (BM25 / ts_rank, owner and scope inside the
  query) and an exact cosine search over the scope's vectors of the embedder's own
  model, fused by reciprocal rank (``RRF_K`` = 60). Vectors of another model are never
  compared; with no embedder, or when it fails, the lexical ranking alone is returned.
  Each recall first embeds up to ``BACKFILL`` of the scope's memories that have no
  vector of the current model (saved while the embedder was down, edited, or embedded
  by an earlier model), in the same embedder call as the query.
- ``retriever`` adapts ``recall`` to the memory retrieval transformer
  (``transforms/retrieval.py``); ``for_prompt`` gives the newest texts for plain
  injection into the system prompt when retrieval is off.

Vectors are read from the database for every recall (at most ``store.MAX_VECTORS``,
the newest): there is no cache to fall out of step, so a deleted or edited memory is
never found by its old vector. The scoring (normalising up to ``MAX_VECTORS`` vectors)
runs on a worker thread, off the event loop.

What does not belong here: SQL (``store.py``), the model's tools (``tools.py``), the
wire format (``api/memories.py``), where retrieved memories go in a request
(``transforms/``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parley.knowledge.fusion import reciprocal_ranks
from parley.knowledge.types import Embedder
from parley.memory.store import (
    Memory,
    MemoryStore,
    Source,
    Vector,
    assistant_of,
    clean_text,
)
from parley.transforms.protocol import Snippet, TransformContext
from parley.transforms.retrieval import MemoryRetriever

log = logging.getLogger(__name__)

TOP_K = 6
RRF_K = 60
"""Reciprocal rank fusion: a memory's score is the sum of 1 / (RRF_K + rank)."""
MIN_CANDIDATES = 24
"""Each search (lexical, vector) ranks at least this many candidates for the fusion."""
BACKFILL = 16
"""Memories without a vector of the current model embedded by one recall, at most."""
SNIPPET_TITLE = "memory"


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recalled memory: ``score`` is the fused score (higher is better);
    ``lexical_rank``/``vector_rank`` its 1-based rank in each search (None: absent)."""

    memory: Memory
    score: float
    lexical_rank: int | None = None
    vector_rank: int | None = None


class MemoryService:
    def __init__(self, store: MemoryStore, embedder: Embedder | None) -> None:
        self._store = store
        self._embedder = embedder

    @property
    def store(self) -> MemoryStore:
        return self._store

    async def remember(
        self,
        owner: str,
        scope: str,
        text: str,
        *,
        source: Source = "api",
        conversation_id: str | None = None,
    ) -> Memory:
        """Store ``text`` in ``scope`` (with its vector when one can be made).
        ``InvalidRequest``: empty or too long; ``MemoryLimitReached``: the owner's
        memory is full; ``ValueError``: not a scope."""
        body = clean_text(text)
        assistant_id = assistant_of(scope)
        model, vector = await self._embed_one(body)
        return await self._store.create(
            owner,
            body,
            assistant_id=assistant_id,
            source=source,
            conversation_id=conversation_id,
            embedding_model=model,
            vector=vector,
        )

    async def update(self, owner: str, memory_id: str, text: str) -> Memory:
        """New text for a memory, re-embedded (or left to be embedded by a later recall
        when the embedder cannot). ``LookupError`` when missing."""
        body = clean_text(text)
        model, vector = await self._embed_one(body)
        return await self._store.update(
            owner, memory_id, body, embedding_model=model, vector=vector
        )

    async def forget(self, owner: str, scope: str, memory_id: str) -> str:
        """Delete a memory of ``scope``; ``LookupError`` when the scope has no such one."""
        return await self._store.delete(owner, memory_id, scope=scope)

    async def recall(
        self, owner: str, scope: str, query: str, top_k: int = TOP_K
    ) -> list[Recalled]:
        """The ``top_k`` memories of ``scope`` that best match ``query``, best first."""
        if top_k < 1 or not query.strip():
            return []
        candidates = max(top_k * 4, MIN_CANDIDATES)
        lexical = await self._store.search(owner, scope, query, limit=candidates)
        semantic = await self._vector_search(owner, scope, query, candidates)
        return fuse([memory for memory, _ in lexical], [memory for memory, _ in semantic], top_k)

    def retriever(self, owner: str, scope: str, top_k: int = TOP_K) -> MemoryRetriever:
        """What the memory retrieval transformer calls for this owner and scope."""
        assistant_of(scope)  # a bad scope fails here, not in the middle of a request
        return _Retriever(self, owner, scope, top_k)

    async def for_prompt(self, owner: str, scope: str, limit: int = 50) -> list[str]:
        """The texts of the newest ``limit`` memories of ``scope``, newest first."""
        return [m.text for m in await self._store.list(owner, limit=limit, scope=scope)]

    async def _embed_one(self, text: str) -> tuple[str | None, Vector | None]:
        if self._embedder is None:
            return None, None
        try:
            return self._embedder.model, (await _embed(self._embedder, [text]))[0]
        except Exception as exc:  # the memory is kept all the same, lexically
            log.warning("memory not embedded (%s): %s", type(exc).__name__, exc)
            return None, None

    async def _vector_search(
        self, owner: str, scope: str, query: str, limit: int
    ) -> list[tuple[Memory, float]]:
        """The scope's memories by cosine similarity to ``query`` (positive only), best
        first; [] when there is no embedder or it fails."""
        embedder = self._embedder
        if embedder is None:
            return []
        model = embedder.model
        query_vector = await self._embed_query(owner, scope, query, embedder)
        if query_vector is None:
            return []
        found, matrix = await self._store.vectors(owner, scope, model)
        if not found:
            return []
        if matrix.shape[1] != query_vector.shape[0]:
            log.warning(
                "memory vectors of %s have %d dimensions, the query %d: vector search skipped",
                model,
                matrix.shape[1],
                query_vector.shape[0],
            )
            return []
        # normalising thousands of vectors takes tens of ms: off the event loop
        ranked = await asyncio.to_thread(_rank, matrix, query_vector, limit)
        return [(found[i], score) for i, score in ranked]

    async def _embed_query(
        self, owner: str, scope: str, query: str, embedder: Embedder
    ) -> Vector | None:
        """The query's vector; memories of the scope still lacking a vector of this model
        are embedded in the same call and stored (best effort)."""
        model = embedder.model
        try:
            missing = await self._store.unembedded(owner, scope, model, limit=BACKFILL)
        except Exception as exc:
            log.warning("memories to embed could not be read: %s", exc)
            missing = []
        try:
            vectors = await _embed(embedder, [query, *(m.text for m in missing)])
        except Exception as exc:
            if not missing:
                log.warning("memory recall is lexical only (%s): %s", type(exc).__name__, exc)
                return None
            log.warning("memories not embedded (%s): %s", type(exc).__name__, exc)
            missing = []
            try:
                vectors = await _embed(embedder, [query])
            except Exception as again:
                log.warning("memory recall is lexical only (%s): %s", type(again).__name__, again)
                return None
        if missing:
            try:
                await self._store.set_vectors(
                    owner, model, list(zip(missing, vectors[1:], strict=True))
                )
            except Exception as exc:
                log.warning("memory vectors not stored: %s", exc)
        return vectors[0]


def fuse(lexical: Sequence[Memory], semantic: Sequence[Memory], top_k: int) -> list[Recalled]:
    """Reciprocal rank fusion of two rankings (best first) into the first ``top_k``;
    ties go to the better lexical rank, then the newer memory."""
    memories = {memory.id: memory for memory in (*lexical, *semantic)}
    fused = reciprocal_ranks([[m.id for m in lexical], [m.id for m in semantic]], k=RRF_K)
    absent = len(lexical) + 1
    fused.sort(key=lambda f: (-f.score, f.ranks[0] or absent, -memories[f.key].created_at))
    return [
        Recalled(memories[f.key], f.score, lexical_rank=f.ranks[0], vector_rank=f.ranks[1])
        for f in fused[:top_k]
    ]


class _Retriever:
    def __init__(self, service: MemoryService, owner: str, scope: str, top_k: int) -> None:
        self._service = service
        self._owner = owner
        self._scope = scope
        self._top_k = top_k

    async def retrieve(self, query: str, context: TransformContext) -> list[Snippet]:
        found = await self._service.recall(self._owner, self._scope, query, self._top_k)
        return [
            Snippet(id=hit.memory.id, title=SNIPPET_TITLE, text=hit.memory.text, score=hit.score)
            for hit in found
        ]


async def _embed(embedder: Embedder, texts: Sequence[str]) -> list[Vector]:
    """One vector per text, each checked (``ValueError``: the embedder's answer is
    unusable)."""
    vectors = await embedder.embed(texts)
    if len(vectors) != len(texts):
        raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
    rows: list[Vector] = []
    for index in range(len(texts)):
        row = np.asarray(vectors[index], dtype=np.float32)
        if row.ndim != 1 or row.size == 0 or not np.all(np.isfinite(row)):
            raise ValueError("the embedder returned an unusable vector")
        rows.append(row)
    return rows


def _rank(matrix: Vector, query_vector: Vector, limit: int) -> list[tuple[int, float]]:
    """(row, cosine similarity) of the ``limit`` rows most like the query, best first,
    positive similarities only."""
    similarity = _unit_rows(matrix) @ _unit_rows(query_vector[None, :])[0]
    order = np.argsort(-similarity, kind="stable")[:limit]
    return [(int(i), float(similarity[i])) for i in order if similarity[i] > 0]


def _unit_rows(matrix: Vector) -> Vector:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    result: Vector = (matrix / np.maximum(norms, 1e-12)).astype(np.float32)
    return result
