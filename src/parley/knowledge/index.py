"""The knowledge index: writing chunks, and finding them by words, by vector, and by both.

- ``insert_chunks`` writes a batch of a document's chunks: text, search terms
  (``lexical.index_terms``), SHA-256 of the text, vector as little-endian float32 bytes;
  on SQLite the FTS5 triggers index the terms in the same transaction. ``chunk_rows`` and
  ``insert_rows`` are its two halves: the rows can be made before the transaction.
- ``lexical_search`` (``lexical_matches``: with the scale of its scores, see
  ``bm25_ceiling``): BM25 over FTS5 on SQLite; on PostgreSQL, the GIN-indexed tsvector
  finds the chunks and each scores the idf of the terms it holds (the same scale; the
  tests run on both engines). The owner,
  the knowledge bases and ``status = 'ready'`` are conditions of the query itself. The
  work is bounded: a term found in many chunks ("the", "what") would have the engine
  rank nearly every chunk, so the rarest terms are kept while the chunks they are in add
  up to at most a budget (one chunk in 25 of the index, 500 to 4,000); when every term is
  that common, the rarest alone ranks the newest chunks holding it, as many.
- ``VectorIndexes`` (on PostgreSQL ``pgvector.py`` searches in the database instead):
  each knowledge base's vectors as one float32 matrix in memory, searched exactly on
  a worker thread (numpy lets go of the GIL). A matrix is read at the base's first
  search and brought up to date whenever a search names a later ``version`` of the base
  (only the documents that changed are read), whoever made the change. Memory is
  bounded: the least recently searched bases go first.
- ``hybrid_search`` runs both searches at once (by words without the query's stop
  words) and fuses them by score (``fusion.py``; by words alone without a query
  vector). ``fetch_chunks`` reads the chunks.

Why exact numpy (measured on the 2-core machine, 100k x 384): numpy 8-13 ms; sqlite-vec's
exact scan 100 ms (int8: 110 ms; it also needs a SQLite that loads extensions); faiss's
float16 scan 7 ms, a large dependency for 5 ms; binary codes with exact rescoring of the
best 2,000 5 ms, but recall@10 of 0.73 on random vectors (0.998 on clustered ones).

What does not belong here: knowledge bases and documents (``store/knowledge.py``), how
terms are made (``lexical.py``), how two lists are fused (``fusion.py``), embedding,
ingestion, HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection, TextClause, bindparam, func, select, text

from parley.knowledge import lexical
from parley.knowledge.background import Floors
from parley.knowledge.fusion import LEXICAL_WEIGHT, fuse_scores
from parley.knowledge.pgvector import vector_text
from parley.knowledge.types import Chunk, Hit, KbRef
from parley.knowledge.vector_search import VectorSearch
from parley.store.database import Database
from parley.store.schema import kb_chunks, kb_documents

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

log = logging.getLogger(__name__)

MIN_MATCHES = 500
MAX_MATCHES = 4_000
CHUNKS_PER_MATCH = 25
"""A lexical search ranks at most one chunk in ``CHUNKS_PER_MATCH`` of the index (all
owners': that is what it walks), at least ``MIN_MATCHES`` and at most ``MAX_MATCHES``:
ranking costs about 3 us a chunk here (BM25 and the joins), scanning a 384-d vector
0.12 us, so the two halves of a hybrid search take about as long (measured: 500 at 10k
chunks, 2 ms; 4,000 at 100k, 13 ms)."""
MIN_COVERAGE = 0.5
"""With ``floors`` (nothing may match), a chunk found by words alone must hold at least
this share of the question's words (BM25 over ``bm25_ceiling``)."""
CANDIDATES = 50
"""Each list's length before fusion: at least this, and five times ``top_k``."""
FETCH_BATCH = 500

_COLUMNS = (
    "document_id",
    "kb_id",
    "owner",
    "ordinal",
    "text",
    "terms",
    "page",
    "section",
    "text_hash",
    "embedding",
    "script",
)
_INSERT_SQLITE = (
    f"INSERT INTO kb_chunks ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
)
_INSERT_POSTGRES = text(
    f"INSERT INTO kb_chunks ({', '.join(_COLUMNS)}, vec) "
    f"VALUES ({', '.join(':' + c for c in _COLUMNS)}, CAST(:vec AS vector))"
)


@dataclass(frozen=True, slots=True)
class ChunkView:
    """A chunk found, with what a citation shows: its document's file name and title."""

    id: int
    document_id: str
    kb_id: str
    ordinal: int
    text: str
    page: int | None
    section: str | None
    filename: str
    title: str | None


# --- writing ------------------------------------------------------------------------------


ChunkRow = tuple[str, str, str, int, str, str, int | None, str | None, str, bytes | None, int]
"""A ``kb_chunks`` row as written (the columns of ``_COLUMNS``, in order)."""


def insert_chunks(
    conn: Connection,
    *,
    owner: str,
    kb_id: str,
    document_id: str,
    chunks: Sequence[Chunk],
    vectors: Vectors | None,
) -> None:
    """Write ``chunks`` (with their vectors, one row each, or none) in one statement.

    On SQLite a chunk of 1,400 characters costs about 0.6 ms of the transaction here:
    0.24 ms its terms, 0.3 ms FTS5 (figure 12). ``chunk_rows`` in a thread, then
    ``insert_rows`` in the transaction, keeps the terms out of it."""
    insert_rows(
        conn,
        chunk_rows(
            owner=owner, kb_id=kb_id, document_id=document_id, chunks=chunks, vectors=vectors
        ),
    )


def chunk_rows(
    *,
    owner: str,
    kb_id: str,
    document_id: str,
    chunks: Sequence[Chunk],
    vectors: Vectors | None,
) -> list[ChunkRow]:
    """The rows of ``chunks``: their terms (``lexical.index_terms``), the SHA-256 of their
    text, their vectors as little-endian float32 bytes, their script (``lexical.script``).
    No database: a thread may do it."""
    if vectors is not None and len(vectors) != len(chunks):
        raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
    blobs: list[bytes | None]
    if vectors is None:
        blobs = [None] * len(chunks)
    else:
        little = np.ascontiguousarray(vectors, dtype="<f4")
        blobs = [row.tobytes() for row in little]
    return [
        (
            document_id,
            kb_id,
            owner,
            chunk.ordinal,
            chunk.text,
            lexical.index_terms(chunk.text),
            chunk.page,
            chunk.section,
            hashlib.sha256(chunk.text.encode("utf-8", "surrogatepass")).hexdigest(),
            blob,
            lexical.script(chunk.text),
        )
        for chunk, blob in zip(chunks, blobs, strict=True)
    ]


def insert_rows(conn: Connection, rows: Sequence[ChunkRow]) -> None:
    """Write rows made by ``chunk_rows``, in one statement (on SQLite, the FTS5 triggers
    index their terms in the same transaction)."""
    if not rows:
        return
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(_INSERT_SQLITE, list(rows))
    else:  # and pgvector's column, which its search reads (migration 0013)
        values: list[dict[str, Any]] = []
        for row in rows:
            value: dict[str, Any] = dict(zip(_COLUMNS, row, strict=True))
            blob = row[9]  # the embedding (``ChunkRow``)
            value["vec"] = None if blob is None else vector_text(blob)
            values.append(value)
        conn.execute(_INSERT_POSTGRES, values)


# --- by words -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LexicalMatches:
    """What ``lexical_matches`` found: (chunk id, score) best first, and ``ceiling``, the
    score of a chunk of average length holding each of the query's terms once (BM25's
    idf summed over the terms; None when nothing was searched)."""

    hits: list[tuple[int, float]]
    ceiling: float | None


def lexical_search(
    conn: Connection, *, owner: str, kb_ids: Sequence[str], terms: list[str], limit: int
) -> list[tuple[int, float]]:
    """(chunk id, score), best first (score higher is better; BM25 on SQLite, its scale
    on PostgreSQL: ``_search_postgres``): the owner's chunks of ready documents of
    ``kb_ids`` holding any of ``terms`` (``lexical.query_terms``), at most ``limit``."""
    return lexical_matches(conn, owner=owner, kb_ids=kb_ids, terms=terms, limit=limit).hits


def lexical_matches(
    conn: Connection, *, owner: str, kb_ids: Sequence[str], terms: list[str], limit: int
) -> LexicalMatches:
    """``lexical_search``, with the scale of its scores (``LexicalMatches.ceiling``)."""
    if not terms or not kb_ids or limit < 1:
        return LexicalMatches([], None)
    sqlite = conn.dialect.name == "sqlite"
    single = lexical.fts5_expression if sqlite else lexical.tsquery_expression
    size = _size(conn)
    budget = _budget_of(size)
    expressions = [single([term]) for term in terms]
    counts = _each(conn, _COUNT_SQLITE if sqlite else _COUNT_POSTGRES, expressions, budget + 1)
    chosen, windowed = _choose(terms, counts, budget)
    ceiling = bm25_ceiling(terms, counts, chosen, size)
    floor = 0
    if windowed:
        floors = [
            _floor(conn, single([term]), owner, kb_ids, budget - 1, sqlite=sqlite)
            for term in chosen
        ]
        rarest = min(range(len(chosen)), key=lambda n: (floors[n], n))
        chosen, floor = [chosen[rarest]], floors[rarest]
    if not chosen:
        return LexicalMatches([], ceiling)
    expression = single(chosen)
    if sqlite:
        sql = _SEARCH_SQLITE.format(kb_ids=", ".join("?" * len(kb_ids)))
        found = _driver(conn, sql, (expression, floor, owner, *kb_ids, owner, limit))
        return LexicalMatches([(int(row[0]), -float(row[1])) for row in found], ceiling)
    found_in = dict(zip(terms, counts, strict=True))
    weights = [_idf(found_in[term], size) for term in chosen]
    statement, params = _search_postgres([single([t]) for t in chosen], weights)
    params.update(
        {"expression": expression, "owner": owner, "kb_ids": list(kb_ids)},
        limit=limit,
        floor=floor,
    )
    ranked = conn.execute(statement, params)
    return LexicalMatches([(int(row[0]), float(row[1])) for row in ranked], ceiling)


def _search_postgres(
    expressions: list[str], weights: list[float]
) -> tuple[TextClause, dict[str, Any]]:
    """PostgreSQL's search: a chunk scores the idf of each term it holds (BM25 of a term
    held once by a chunk of average length: the scale of ``bm25_ceiling``, so that
    fusion's coverage and its floors mean on PostgreSQL what they mean on SQLite);
    ts_rank breaks ties (PostgreSQL has no BM25: term frequency and length count only
    there)."""
    vector = "to_tsvector('simple', c.terms)"  # the GIN index's expression (migration 0005)
    score = " + ".join(
        f"(CASE WHEN {vector} @@ to_tsquery('simple', :q{n}) THEN CAST(:w{n} AS float8) ELSE 0 END)"
        for n in range(len(expressions))
    )
    sql = (
        f"SELECT c.id, ({score}) AS score FROM kb_chunks AS c "
        "JOIN kb_documents AS d ON d.id = c.document_id "
        f"WHERE {vector} @@ to_tsquery('simple', :expression) "
        "AND c.id >= :floor AND c.owner = :owner AND c.kb_id IN :kb_ids "
        "AND d.status = 'ready' AND d.owner = :owner ORDER BY score DESC, "
        f"ts_rank({vector}, to_tsquery('simple', :expression)) DESC, c.id LIMIT :limit"
    )
    params: dict[str, Any] = {f"q{n}": e for n, e in enumerate(expressions)}
    params.update({f"w{n}": w for n, w in enumerate(weights)})
    return text(sql).bindparams(bindparam("kb_ids", expanding=True)), params


def _idf(count: int, size: int) -> float:
    """FTS5's idf of a term in ``count`` of ``size`` chunks (at least 1e-6)."""
    total = max(1, size)
    n = min(count, total)
    return max(1e-6, math.log((total - n + 0.5) / (n + 0.5)))


def bm25_ceiling(terms: list[str], counts: list[int], chosen: list[str], size: int) -> float:
    """The BM25 score (FTS5's: k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)),
    at least 1e-6) of a chunk of average length holding each of the query's words once:
    the sum of the idf of

    - the terms searched (``chosen``);
    - the words no chunk holds: a word of the question the index lacks counts against
      every chunk (a paraphrase shares few words with any chunk, and its one shared
      word must not look like a full match). A CJK pair no chunk holds counts only when
      it does not touch a pair that some chunk holds: "炒糖" in 红烧肉炒糖色 is the
      seam between two words, not a word;

    not the terms too common to be searched: no chunk can score by them. ``size`` (the
    highest chunk id) stands for N; ``counts`` (``_each``) are exact for the terms
    searched."""
    searched = set(chosen)
    total = max(1, size)
    known = [t for t, c in zip(terms, counts, strict=True) if c > 0 and lexical.is_cjk(t)]
    ends = {t[-1] for t in known}
    starts = {t[0] for t in known}

    def counted(term: str, count: int) -> bool:
        if term in searched:
            return True
        if count > 0:
            return False
        if not lexical.is_cjk(term):
            return True
        return len(term) == 2 and term[0] not in ends and term[1] not in starts

    ceiling = [
        _idf(count, size)
        for term, count in zip(terms, counts, strict=True)
        if counted(term, min(count, total))
    ]
    return math.fsum(ceiling)


def _driver(conn: Connection, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """On SQLite, through the driver's own cursor: SQLAlchemy's handling of a statement
    cost a fifth of a search here."""
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, args)
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


_SEARCH_SQLITE = (
    # CROSS JOIN keeps FTS5 as the outer loop: SQLite could otherwise walk the knowledge
    # base's chunks and probe the index for each one (measured: seconds)
    "SELECT c.id, f.rank FROM kb_chunks_fts AS f "
    "CROSS JOIN kb_chunks AS c ON c.id = f.rowid "
    "CROSS JOIN kb_documents AS d ON d.id = c.document_id "
    "WHERE f.kb_chunks_fts MATCH ? AND f.rowid >= ? "
    "AND c.owner = ? AND c.kb_id IN ({kb_ids}) "
    "AND d.status = 'ready' AND d.owner = ? "
    "ORDER BY f.rank, c.id LIMIT ?"
)

# How many chunks hold a term (all owners': that is what the engine walks), counted up
# to the budget + 1, cheap even for "the"; and the lowest id of the newest budget-many
# chunks holding it. One statement for all the query's terms.
_COUNT_SQLITE = (
    "(SELECT count(*) FROM (SELECT 1 FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ? LIMIT ?))"
)
_COUNT_POSTGRES = (
    "(SELECT count(*) FROM (SELECT 1 FROM kb_chunks WHERE to_tsvector('simple', terms) "
    "@@ to_tsquery('simple', :t{n}) LIMIT :n{n}) AS s{n})"
)
# The window of a common term: the lowest id of the newest budget-many chunks of the
# owner's searched bases holding it (another owner's uploads never push the owner's own
# chunks out of the window).
_FLOOR_SQLITE = (
    "SELECT f.rowid FROM kb_chunks_fts AS f CROSS JOIN kb_chunks AS c ON c.id = f.rowid "
    "WHERE f.kb_chunks_fts MATCH ? AND c.owner = ? AND c.kb_id IN ({kb_ids}) "
    "ORDER BY f.rowid DESC LIMIT 1 OFFSET ?"
)
_FLOOR_POSTGRES = text(
    "SELECT id FROM kb_chunks WHERE to_tsvector('simple', terms) @@ "
    "to_tsquery('simple', :expression) AND owner = :owner AND kb_id IN :kb_ids "
    "ORDER BY id DESC LIMIT 1 OFFSET :skip"
).bindparams(bindparam("kb_ids", expanding=True))


def _floor(
    conn: Connection,
    expression: str,
    owner: str,
    kb_ids: Sequence[str],
    skip: int,
    *,
    sqlite: bool,
) -> int:
    if sqlite:
        sql = _FLOOR_SQLITE.format(kb_ids=", ".join("?" * len(kb_ids)))
        found = _driver(conn, sql, (expression, owner, *kb_ids, skip))
        return int(found[0][0]) if found else 0
    params = {"expression": expression, "owner": owner, "kb_ids": list(kb_ids), "skip": skip}
    return int(conn.execute(_FLOOR_POSTGRES, params).scalar() or 0)


def _each(conn: Connection, one: str, expressions: list[str], number: int) -> list[int]:
    """``one`` (a scalar subquery of an expression and a number) for every expression,
    in one statement; None counts as 0."""
    if conn.dialect.name == "sqlite":
        sql = "SELECT " + ", ".join([one] * len(expressions))
        [values] = _driver(conn, sql, tuple(v for e in expressions for v in (e, number)))
    else:
        sql = "SELECT " + ", ".join(one.format(n=n) for n in range(len(expressions)))
        params: dict[str, Any] = {f"t{n}": e for n, e in enumerate(expressions)}
        params.update({f"n{n}": number for n in range(len(expressions))})
        values = conn.execute(text(sql), params).one()
    return [int(value or 0) for value in values]


def _budget(conn: Connection) -> int:
    """How many chunks this search may rank (``CHUNKS_PER_MATCH``)."""
    return _budget_of(_size(conn))


def _budget_of(size: int) -> int:
    return max(MIN_MATCHES, min(MAX_MATCHES, size // CHUNKS_PER_MATCH))


def _size(conn: Connection) -> int:
    """The size of the index: the highest chunk id stands for it (a lookup, not a
    count)."""
    if conn.dialect.name == "sqlite":
        [(found,)] = _driver(conn, "SELECT max(rowid) FROM kb_chunks", ())
    else:
        found = conn.execute(text("SELECT max(id) FROM kb_chunks")).scalar()
    return int(found or 0)


def _choose(terms: list[str], counts: list[int], budget: int) -> tuple[list[str], bool]:
    """The terms to search for, in query order, and whether they are all too common.
    Kept: the rarest terms while the chunks they are in add up to at most ``budget``.
    When every term is in more chunks than that, all those found are returned: the one
    with the fewest among the newest ``budget`` chunks is then searched alone, in those
    chunks (ranking by a common term costs even in a small window: BM25 first walks all
    its chunks once, to count them: milliseconds for a term in 100k chunks)."""
    found = sorted((count, n) for n, count in enumerate(counts) if count > 0)
    kept: list[int] = []
    total = 0
    for count, n in found:
        if total + count > budget:
            break
        kept.append(n)
        total += count
    if kept or not found:
        return [terms[n] for n in sorted(kept)], False
    return [terms[n] for n in sorted(n for _, n in found)], True


# --- reading -----------------------------------------------------------------------------


def fetch_chunks(
    conn: Connection, owner: str, ids: Sequence[int], *, ready_only: bool = False
) -> dict[int, ChunkView]:
    """The owner's chunks among ``ids``, by id; with ``ready_only``, only those of ready
    documents (search results: a document that left ``ready`` since the search found
    it is not returned)."""
    statement = (
        select(
            kb_chunks.c.id,
            kb_chunks.c.document_id,
            kb_chunks.c.kb_id,
            kb_chunks.c.ordinal,
            kb_chunks.c.text,
            kb_chunks.c.page,
            kb_chunks.c.section,
            kb_documents.c.filename,
            kb_documents.c.title,
        )
        .join(kb_documents, kb_documents.c.id == kb_chunks.c.document_id)
        .where(kb_chunks.c.owner == owner, kb_documents.c.owner == owner)
    )
    if ready_only:
        # not by the status index: SQLite would walk every chunk of the ready documents
        # (a 250,000-chunk base: 47 ms, not 0.5, for 50 ids) instead of the ids asked for
        statement = statement.where(func.coalesce(kb_documents.c.status, "") == "ready")
    found: dict[int, ChunkView] = {}
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), FETCH_BATCH):
        part = unique[start : start + FETCH_BATCH]
        for row in conn.execute(statement.where(kb_chunks.c.id.in_(part))):
            found[int(row.id)] = ChunkView(
                id=int(row.id),
                document_id=row.document_id,
                kb_id=row.kb_id,
                ordinal=int(row.ordinal),
                text=row.text,
                page=row.page,
                section=row.section,
                filename=row.filename,
                title=row.title,
            )
    return found


# --- both ---------------------------------------------------------------------------------


async def hybrid_search(
    database: Database,
    vectors: VectorSearch,
    *,
    owner: str,
    kbs: Sequence[KbRef],
    query: str,
    query_vector: Vectors | None,
    model: str | None,
    top_k: int,
    min_similarity: float = 0.0,
    min_relative_score: float = 0.0,
    lexical_weight: float = LEXICAL_WEIGHT,
    floors: Floors | None = None,
) -> list[Hit]:
    """The best ``top_k`` chunks of ``kbs`` for ``query``: the best by words (the
    query's stop words left out: ``lexical.content_terms``) and the best by vector
    (``query_vector``, made by ``model``; the bases of another model are searched by
    words only) found at once, fused by score (``fuse_scores``, ``lexical_weight`` to
    words). Without a query vector, by words alone. A failing vector search is logged
    and skipped.

    Weak matches are left out before fusion, so that a reply is not given passages
    that merely share a common word with the question: by vector, those under
    ``min_similarity`` (cosine); by words, those scoring under ``min_relative_score``
    times the best word match (BM25 gives a chunk holding only "the" a tiny score);
    with ``floors`` (``background.floors``), the chunks by vector no nearer the question
    than generic text is, and then the chunks by words too, unless they hold at least
    ``MIN_COVERAGE`` of the question's words: nothing matches."""
    if top_k < 1 or not kbs:
        return []
    candidates = max(CANDIDATES, 5 * top_k)
    terms = lexical.content_terms(query)
    kb_ids = [kb.id for kb in kbs]

    async def by_words() -> LexicalMatches:
        if not terms:
            return LexicalMatches([], None)
        return await database.read(
            lambda conn: lexical_matches(
                conn, owner=owner, kb_ids=kb_ids, terms=terms, limit=candidates
            ),
            heavy=True,
        )

    async def by_vector() -> list[tuple[int, float]]:
        if query_vector is None or not model:
            return []
        try:
            return await vectors.search(owner, kbs, model, query_vector, candidates, floors=floors)
        except Exception:
            log.warning("vector search failed; searching by words only", exc_info=True)
            return []

    matched, meaning = await asyncio.gather(by_words(), by_vector())
    words = matched.hits
    if words and min_relative_score > 0:
        least = words[0][1] * min_relative_score
        words = [(chunk_id, score) for chunk_id, score in words if score >= least]
    if floors is not None and words and matched.ceiling:
        near = {chunk_id for chunk_id, _ in meaning}
        least = matched.ceiling * MIN_COVERAGE
        words = [(c, score) for c, score in words if c in near or score >= least]
    floor = min((score for _, score in meaning), default=None)
    if min_similarity > 0:
        meaning = [(chunk_id, score) for chunk_id, score in meaning if score >= min_similarity]
    return fuse_scores(
        words,
        meaning,
        ceiling=matched.ceiling,
        floor=floor,
        lexical_weight=lexical_weight,
        limit=top_k,
    )
