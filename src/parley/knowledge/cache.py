"""The embedding cache: vectors by (model, SHA-256 of the text), in the database.

Re-uploading a document, re-indexing a knowledge base or remembering the same sentence
twice costs one indexed read instead of a model run. Entries are never wrong (the key is
the model and the exact text), so they are never invalidated. Deleting a document drops
the vectors of its texts that no other chunk holds (``forget_unused``); ``prune`` drops
those of models no longer in use. Queries are not cached (``service.py`` embeds them
directly): they would pile up forever.

What does not belong here: embedding itself (``embeddings.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from parley.knowledge.types import Embedder, EmbeddingError
from parley.store.database import Database
from parley.store.schema import embedding_cache, kb_chunks

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

LOOKUP_BATCH = 500
"""Hashes per IN (...) lookup."""
STORE_BATCH = 64
"""Vectors written per transaction (the embedding of a batch of chunks is written as
indexing's other writes are: short, and paced)."""


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingCache:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def embed(self, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """``texts`` embedded by ``embedder``, from the cache where possible; the
        vectors computed are added to it. ``EmbeddingError`` from the embedder, or when
        it answers with the wrong number of vectors."""
        if not texts:
            return np.zeros((0, embedder.dimensions), dtype=np.float32)
        model = embedder.model
        hashes = [text_hash(t) for t in texts]
        found = await self._db.read(lambda conn: _lookup(conn, model, sorted(set(hashes))))
        missing = list(dict.fromkeys(h for h in hashes if h not in found))
        if missing:
            first = {h: i for i, h in reversed(list(enumerate(hashes)))}
            fresh = await embedder.embed([texts[first[h]] for h in missing])
            if fresh.shape[0] != len(missing):
                raise EmbeddingError(
                    f"the embedder returned {fresh.shape[0]} vectors for {len(missing)} texts"
                )
            rows = [
                {"model": model, "text_hash": h, "vector": _bytes(v), "created_at": time.time()}
                for h, v in zip(missing, fresh, strict=True)
            ]
            for start in range(0, len(rows), STORE_BATCH):  # short writes on the loop
                part = rows[start : start + STORE_BATCH]
                await self._db.write_in_background(partial(_store, part))
            for h, vector in zip(missing, fresh, strict=True):
                found[h] = vector
        return np.stack([found[h] for h in hashes]).astype(np.float32, copy=False)

    async def forget_unused(self, hashes: Sequence[str]) -> int:
        """Drop the vectors of these texts that no chunk holds any more (after a
        document or base is deleted: its vectors go with it); how many."""
        unique = sorted(set(hashes))

        def transaction(part: list[str], conn: Connection) -> int:
            used = select(kb_chunks.c.text_hash).where(kb_chunks.c.text_hash.in_(part))
            statement = delete(embedding_cache).where(
                embedding_cache.c.text_hash.in_(part), embedding_cache.c.text_hash.not_in(used)
            )
            return int(conn.execute(statement).rowcount)

        dropped = 0
        for start in range(0, len(unique), LOOKUP_BATCH):
            part = unique[start : start + LOOKUP_BATCH]
            dropped += await self._db.write(partial(transaction, part))
            await asyncio.sleep(0)
        return dropped

    async def prune(self, keep_models: Sequence[str]) -> int:
        """Drop the entries of every model not in ``keep_models``; how many."""

        def transaction(conn: Connection) -> int:
            statement = delete(embedding_cache)
            if keep_models:
                statement = statement.where(embedding_cache.c.model.not_in(list(keep_models)))
            return int(conn.execute(statement).rowcount)

        return await self._db.write(transaction)


def _bytes(vector: Vectors) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def _lookup(conn: Connection, model: str, hashes: list[str]) -> dict[str, Vectors]:
    found: dict[str, Vectors] = {}
    for start in range(0, len(hashes), LOOKUP_BATCH):
        part = hashes[start : start + LOOKUP_BATCH]
        rows = conn.execute(
            select(embedding_cache.c.text_hash, embedding_cache.c.vector).where(
                embedding_cache.c.model == model, embedding_cache.c.text_hash.in_(part)
            )
        )
        for key, blob in rows:
            found[str(key)] = np.frombuffer(blob, dtype="<f4").astype(np.float32)
    return found


def _store(rows: list[dict[str, object]], conn: Connection) -> None:
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(insert(embedding_cache).values(rows).on_conflict_do_nothing())
