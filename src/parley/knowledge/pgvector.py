"""Vectors on PostgreSQL: pgvector searches ``kb_chunks.vec`` (migration 0013) in the
database, where every instance sees the same index, instead of a matrix in each
process's memory (``vectors.py``, SQLite's).

``PgVectorIndexes`` answers what ``VectorIndexes`` answers, with the same conditions in
its SQL: the owner, the bases whose recorded embedding model made the query vector,
``status = 'ready'``, and each script's ``floors``. Bases of different models share the
table, so the column has no size; each size of vector gets an HNSW index (cosine) of its
own over ``vec::vector(n)``, made when that size is first searched. PostgreSQL's planner
then walks the index for a large base and scans a small one exactly (cheaper than the
index once the other conditions leave few rows; the index, filtered after the walk, could
miss their nearest). ``hnsw.ef_search`` is raised to the number of rows asked for.

For a cross-lingual model (``vectors.CROSS_LINGUAL``) each script's best rows are read
apart and standardised by the spread of the whole base's cosines, which one aggregate
reads: the rescaling of ``vector_search.py``, on what the database computed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, bindparam, text

from parley.knowledge.background import Floors
from parley.knowledge.types import KbRef
from parley.knowledge.vector_search import (
    CROSS_LINGUAL,
    ScriptSpread,
    VectorSearch,
    rescale_by_script,
    unit_query,
)
from parley.knowledge.vectors import VectorIndexes
from parley.store.database import Database

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

log = logging.getLogger(__name__)

SCRIPTS = 2
"""``lexical.LATIN`` and ``lexical.CJK``."""
MIN_EF_SEARCH = 40
"""pgvector's default candidate list; raised to the rows a search asks for."""
MAX_EF_SEARCH = 1_000


def vector_text(blob: bytes) -> str:
    """pgvector's text form of little-endian float32 bytes (``index.chunk_rows``)."""
    return "[" + ",".join(repr(float(v)) for v in np.frombuffer(blob, dtype="<f4")) + "]"


def query_text(query: npt.NDArray[np.float32]) -> str:
    return "[" + ",".join(repr(float(v)) for v in query) + "]"


def vector_search(database: Database, *, max_bytes: int) -> VectorSearch:
    """The engine's vector index: pgvector's on PostgreSQL, else matrices in memory of
    at most ``max_bytes``."""
    if database.is_sqlite:
        return VectorIndexes(database, max_bytes=max_bytes)
    return PgVectorIndexes(database)


class PgVectorIndexes:
    """``VectorIndexes``' interface, on pgvector: nothing is kept in memory but which
    sizes of vector have their HNSW index."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._indexed: set[int] = set()

    @property
    def nbytes(self) -> int:
        return 0

    def cached(self, owner: str, kb_id: str) -> tuple[int, int] | None:
        return None

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
        """(chunk id, cosine), best first, at most ``limit``: ``VectorIndexes.search``."""
        query = unit_query(vector)
        if not model or limit < 1 or query is None:
            return []
        kb_ids = sorted({kb.id for kb in kbs if kb.embedding_model == model})
        if not kb_ids:
            return []
        dimensions = len(query)
        await self._index(dimensions)
        search = _Search(owner, kb_ids, model, query, limit, floors)
        return await self._db.read(search.run, heavy=True)

    def document_ready(self, kb_id: str, version: int, document_id: str) -> None:
        """Nothing to do: the database's index has the document's rows already."""

    def forget_document(self, kb_id: str, document_id: str) -> None:
        """Nothing to do: the search reads only ready documents."""

    def forget_base(self, kb_id: str) -> None:
        """Nothing to do: a deleted base's rows are gone with it."""

    def close(self) -> None:
        self._indexed.clear()

    async def _index(self, dimensions: int) -> None:
        """The HNSW index of vectors of ``dimensions``, made once (by any instance)."""
        if dimensions in self._indexed:
            return
        name = f"ix_kb_chunks_vec_{dimensions}"
        sql = (
            f"CREATE INDEX IF NOT EXISTS {name} ON kb_chunks USING hnsw "
            f"((vec::vector({dimensions})) vector_cosine_ops) "
            f"WHERE vector_dims(vec) = {dimensions}"
        )

        def create(conn: Connection) -> None:
            # one instance at a time: IF NOT EXISTS alone races in the catalogue
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('parley.kb_chunks.vec'))")
            conn.exec_driver_sql(sql)

        await self._db.write(create)
        self._indexed.add(dimensions)


class _Search:
    """One search, run in a read transaction."""

    def __init__(
        self,
        owner: str,
        kb_ids: list[str],
        model: str,
        query: npt.NDArray[np.float32],
        limit: int,
        floors: Floors | None,
    ) -> None:
        self.params: dict[str, Any] = {
            "owner": owner,
            "kb_ids": kb_ids,
            "model": model,
            "q": query_text(query),
            "limit": limit,
            "f0": -2.0 if floors is None else floors[0],
            "f1": -2.0 if floors is None else floors[1],
        }
        self.dimensions = len(query)
        self.by_script = model in CROSS_LINGUAL
        self.limit = limit

    def run(self, conn: Connection) -> list[tuple[int, float]]:
        ef = max(MIN_EF_SEARCH, min(MAX_EF_SEARCH, self.limit))
        conn.exec_driver_sql(f"SET LOCAL hnsw.ef_search = {ef}")
        if not self.by_script:
            rows = conn.execute(self._nearest(by_script=False), self.params).all()
            return [(int(row.id), float(row.cosine)) for row in rows]
        rows = []
        for script in range(SCRIPTS):
            rows += conn.execute(self._nearest(by_script=True), {**self.params, "s": script}).all()
        if not rows:
            return []
        scores = np.array([row.cosine for row in rows], dtype=np.float32)
        scripts = np.array([row.script for row in rows], dtype=np.int8)
        rescaled = rescale_by_script(scores, scripts, self._spread(conn))
        order = sorted(range(len(rows)), key=lambda n: (-float(rescaled[n]), rows[n].id))
        return [(int(rows[n].id), float(rescaled[n])) for n in order[: self.limit]]

    def _nearest(self, *, by_script: bool) -> Any:
        distance = f"(c.vec::vector({self.dimensions}) <=> CAST(:q AS vector({self.dimensions})))"
        script = "AND c.script = :s " if by_script else ""
        sql = (
            f"SELECT c.id, c.script, 1 - {distance} AS cosine {_FROM} {script}"
            f"AND vector_dims(c.vec) = {self.dimensions} "
            f"AND 1 - {distance} >= CASE c.script "
            "WHEN 1 THEN CAST(:f1 AS float8) ELSE CAST(:f0 AS float8) END "
            f"ORDER BY {distance}, c.id LIMIT :limit"
        )
        return text(sql).bindparams(bindparam("kb_ids", expanding=True))

    def _spread(self, conn: Connection) -> ScriptSpread:
        """The count, sum and sum of squares of every row's cosine, per script."""
        cosine = (
            f"(1 - (c.vec::vector({self.dimensions}) <=> CAST(:q AS vector({self.dimensions}))))"
        )
        sql = (
            f"SELECT c.script, count(*) AS n, sum({cosine}) AS s, sum({cosine} * {cosine}) AS q "
            f"{_FROM} AND vector_dims(c.vec) = {self.dimensions} GROUP BY c.script"
        )
        statement = text(sql).bindparams(bindparam("kb_ids", expanding=True))
        spread = ScriptSpread(np.zeros(SCRIPTS), np.zeros(SCRIPTS), np.zeros(SCRIPTS))
        for row in conn.execute(statement, self.params):
            spread.counts[row.script] = row.n
            spread.sums[row.script] = row.s
            spread.squares[row.script] = row.q
        return spread


_FROM = (
    "FROM kb_chunks AS c JOIN kb_documents AS d ON d.id = c.document_id "
    "JOIN knowledge_bases AS b ON b.id = c.kb_id "
    "WHERE c.owner = :owner AND c.kb_id IN :kb_ids AND d.owner = :owner "
    "AND d.status = 'ready' AND b.owner = :owner AND b.embedding_model = :model "
    "AND c.vec IS NOT NULL"
)
