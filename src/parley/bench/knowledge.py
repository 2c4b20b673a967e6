"""Figures 11 and 12, in-process on real SQLite (WAL, in a temporary folder), through
``knowledge/index.py`` itself: hybrid retrieval (11) and ingestion into the index (12),
on the synthetic corpus of ``corpus.py``.

- Figure 11: one knowledge base of N chunks, plus another owner's base of N/20 chunks in
  the same tables (the owner filter has work to do). Warm (vectors in memory, pages in
  the OS cache): each query runs ``hybrid_search`` (top 10) and, interleaved, its parts
  alone, the two parts one after the other, and an empty ``Database.read``.
- Figure 12: chunks written through ``Database.write(insert_chunks)`` in batches, as
  ingestion writes them (terms, hashes, vectors, FTS5 triggers); rate = chunks / time
  inside the transactions; per transaction, since writes run on the event loop.

Here: running and timing the two figures, and their rows and Markdown for the report
(``report.py``). What does not belong here: the corpus (word lists, texts, vectors,
queries) and the seeding of the databases (``corpus.py``); the other figures
(``figures.py``, ``agent.py``).
"""

from __future__ import annotations

import gc
import hashlib
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, select

from parley.bench.corpus import (
    CHUNKS_PER_DOCUMENT,
    DIMENSIONS,
    MODEL,
    OTHER,
    OWNER,
    Corpus,
    add_base,
    base_version,
    bench_database,
    chunk_texts,
    corpus,
    fill_base,
    questions,
    unit_vectors,
)
from parley.knowledge import lexical
from parley.knowledge.fusion import fuse
from parley.knowledge.index import (
    CANDIDATES,
    CHUNKS_PER_MATCH,
    MAX_MATCHES,
    MIN_MATCHES,
    hybrid_search,
    lexical_search,
)
from parley.knowledge.types import Hit, KbRef
from parley.knowledge.vectors import VectorIndexes
from parley.store.database import Database
from parley.store.schema import kb_chunks


def _dist(seconds: list[float]) -> dict[str, float]:
    """Median, p95 and max, in milliseconds."""
    if not seconds:
        return {"median": float("nan"), "p95": float("nan"), "max": float("nan")}
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median": round(statistics.median(ordered) * 1000, 3),
        "p95": round(p95 * 1000, 3),
        "max": round(ordered[-1] * 1000, 3),
    }


# --- figure 11 ------------------------------------------------------------------------------


async def hybrid_retrieval(
    sizes: tuple[int, ...] = (10_000, 100_000), *, queries: int = 200, top_k: int = 10
) -> dict[str, Any]:
    """Figure 11: hybrid retrieval (words + 384-d vectors + fusion, top 10), warm."""
    source = corpus()
    asked = questions(source, queries)
    query_vectors = unit_vectors(queries, seed=3)
    levels = []
    for size in sizes:
        async with bench_database() as database:
            levels.append(
                await _retrieval_level(database, source, size, asked, query_vectors, top_k)
            )
    return {
        "top_k": top_k,
        "dimensions": DIMENSIONS,
        "queries": queries,
        "vector_engine": "exact, numpy float32 matrix per knowledge base (worker thread)",
        "chunks_ranked": (
            f"at most one chunk in {CHUNKS_PER_MATCH} of the index, {MIN_MATCHES:,} to "
            f"{MAX_MATCHES:,}"
        ),
        "method": (
            "in-process, real SQLite (WAL); each query: hybrid_search (both searches at "
            "once), then interleaved: words alone (Database.read(lexical_search)), vector "
            "alone (VectorIndexes.search), the two one after the other, an empty read"
        ),
        "levels": levels,
    }


async def _retrieval_level(
    database: Database,
    source: Corpus,
    size: int,
    asked: list[str],
    query_vectors: npt.NDArray[np.float32],
    top_k: int,
) -> dict[str, Any]:
    kb_id, other_id = "kb_bench", "kb_other"
    await add_base(database, OWNER, kb_id)
    await add_base(database, OTHER, other_id)
    built = time.perf_counter()
    await fill_base(
        database,
        owner=OWNER,
        kb_id=kb_id,
        texts=chunk_texts(source, size),
        vectors=unit_vectors(size),
        batch=CHUNKS_PER_DOCUMENT,
    )
    extra = max(1, size // 20)
    await fill_base(
        database,
        owner=OTHER,
        kb_id=other_id,
        texts=chunk_texts(source, extra, seed=12),
        vectors=unit_vectors(extra, seed=8),
        batch=CHUNKS_PER_DOCUMENT,
    )
    build_seconds = time.perf_counter() - built
    kbs = [KbRef(kb_id, MODEL, await base_version(database, kb_id))]
    vectors = VectorIndexes(database, max_bytes=2**31)
    try:
        began = time.perf_counter()
        await vectors.search(OWNER, kbs, MODEL, query_vectors[0], 50)
        load_seconds = time.perf_counter() - began
        candidates = max(CANDIDATES, 5 * top_k)

        async def hybrid(n: int) -> list[Hit]:
            return await hybrid_search(
                database,
                vectors,
                owner=OWNER,
                kbs=kbs,
                query=asked[n],
                query_vector=query_vectors[n],
                model=MODEL,
                top_k=top_k,
            )

        async def words(n: int) -> list[tuple[int, float]]:
            terms = lexical.query_terms(asked[n])
            return await database.read(
                lambda conn: lexical_search(
                    conn, owner=OWNER, kb_ids=[kb_id], terms=terms, limit=candidates
                )
            )

        async def meaning(n: int) -> list[tuple[int, float]]:
            return await vectors.search(OWNER, kbs, MODEL, query_vectors[n], candidates)

        async def one_after_the_other(n: int) -> list[Hit]:
            return fuse([await words(n), await meaning(n)], limit=top_k)

        async def empty_read(n: int) -> int:
            return await database.read(
                lambda conn: int(conn.exec_driver_sql("SELECT 1").scalar_one())
            )

        for n in range(min(10, len(asked))):  # warm: pages, statement caches, threads
            await hybrid(n)
            await words(n)
        gc.collect()
        timings: dict[str, list[float]] = {
            "hybrid": [],
            "words": [],
            "vector": [],
            "sequential": [],
            "read": [],
        }
        steps: dict[str, Callable[[int], Awaitable[object]]] = {
            "hybrid": hybrid,
            "words": words,
            "vector": meaning,
            "sequential": one_after_the_other,
            "read": empty_read,
        }
        lexical_found = 0
        for n in range(len(asked)):
            for name, step in steps.items():
                began = time.perf_counter()
                result = await step(n)
                timings[name].append(time.perf_counter() - began)
                if name == "words" and isinstance(result, list):
                    lexical_found += len(result)
        return {
            "chunks": size,
            "other_owner_chunks": extra,
            "build_seconds": round(build_seconds, 1),
            "vector_load_ms": round(load_seconds * 1000, 1),
            "vector_cache_mb": round(vectors.nbytes / 2**20, 1),
            "hybrid_ms": _dist(timings["hybrid"]),
            "words_ms": _dist(timings["words"]),
            "vector_ms": _dist(timings["vector"]),
            "sequential_ms": _dist(timings["sequential"]),
            "empty_read_ms": _dist(timings["read"]),
            "lexical_results_mean": round(lexical_found / max(1, len(asked)), 1),
        }
    finally:
        vectors.close()


# --- figure 12 ------------------------------------------------------------------------------


async def ingestion(
    chunks: int = 10_000, *, batches: tuple[int, ...] = (8, 16, 64)
) -> dict[str, Any]:
    """Figure 12: chunks/s into the index (storage only: fake vectors), per batch size,
    with the terms made inside the transaction (``insert_chunks``) or before it
    (``chunk_rows``, then ``insert_rows``)."""
    source = corpus()
    texts = chunk_texts(source, chunks, seed=21)
    vectors = unit_vectors(chunks, seed=9)
    began = time.thread_time()
    for text_ in texts:
        lexical.index_terms(text_)
    terms_us = (time.thread_time() - began) / chunks * 1e6
    began = time.thread_time()
    for text_ in texts:
        hashlib.sha256(text_.encode()).hexdigest()
    hash_us = (time.thread_time() - began) / chunks * 1e6
    levels = []
    for batch in batches:
        for prepared in (False, True):
            async with bench_database() as database:
                await add_base(database, OWNER, "kb_ingest")
                gc.collect()
                cpu = time.process_time()
                spent, preparing = await fill_base(
                    database,
                    owner=OWNER,
                    kb_id="kb_ingest",
                    texts=texts,
                    vectors=vectors,
                    batch=batch,
                    per_document=max(batch, CHUNKS_PER_DOCUMENT),
                    prepared=prepared,
                )
                cpu = time.process_time() - cpu
                deleted = await _delete_all(database, batch)
            levels.append(
                {
                    "batch": batch,
                    "terms_in_transaction": not prepared,
                    "chunks_per_s": round(chunks / (sum(spent) + preparing)),
                    "transaction_ms": _dist(spent),
                    "cpu_us_per_chunk": round(cpu / chunks * 1e6),
                    "delete_us_per_chunk": round(deleted / chunks * 1e6),
                }
            )
    return {
        "chunks": chunks,
        "chunk_chars": round(statistics.mean(len(t) for t in texts)),
        "terms_us_per_chunk": round(terms_us, 1),
        "sha256_us_per_chunk": round(hash_us, 1),
        "method": (
            "Database.write(insert_chunks) per batch into a fresh SQLite index (WAL, FTS5 "
            "triggers), or chunk_rows first and Database.write(insert_rows); rate = chunks "
            "/ seconds in those transactions and in chunk_rows; then every chunk deleted, "
            "the same number per transaction"
        ),
        "levels": levels,
    }


async def _delete_all(database: Database, batch: int) -> float:
    """Seconds to delete every chunk (FTS5 triggers included), ``batch`` per transaction."""

    def transaction(conn: Connection) -> int:
        first = select(kb_chunks.c.id).order_by(kb_chunks.c.id).limit(batch)
        return int(conn.execute(kb_chunks.delete().where(kb_chunks.c.id.in_(first))).rowcount)

    spent = 0.0
    while True:
        began = time.perf_counter()
        deleted = await database.write(transaction)
        spent += time.perf_counter() - began
        if deleted < batch:
            return spent


# --- the report -----------------------------------------------------------------------------

RETRIEVAL_TARGET_MS = {10_000: 5.0, 100_000: 30.0}
"""Median hybrid retrieval by chunks in the base (a smaller base: the next target up)."""
INGESTION_TARGET = 5_000


def _retrieval_target(chunks: int) -> float | None:
    return next((ms for size, ms in sorted(RETRIEVAL_TARGET_MS.items()) if chunks <= size), None)


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


def knowledge_rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The table's rows for figures 11 and 12 (none when they were not measured)."""
    out: list[tuple[str, str, str, str, str, str]] = []
    eleven = figures.get("11_hybrid_retrieval")
    if eleven:
        levels = eleven["levels"]
        checks = []
        for level in levels:
            target = _retrieval_target(level["chunks"])
            median = level["hybrid_ms"]["median"]
            checks.append(None if target is None else median <= target)
        sizes = " / ".join(f"{level['chunks']:,}" for level in levels)
        out.append(
            (
                f"11. hybrid retrieval, top {eleven['top_k']}, warm, median ({sizes} chunks)",
                " / ".join(f"{_fmt(level['hybrid_ms']['median'])}" for level in levels) + " ms",
                "-",
                "-",
                "<= 5 ms at 10k, <= 30 ms at 100k (sqlite-vec scan alone: 14 / 141 ms)",
                _verdict(None if None in checks else all(checks)),
            )
        )
    twelve = figures.get("12_ingestion")
    if twelve:
        levels = [level for level in twelve["levels"] if level["terms_in_transaction"]]
        best = max(twelve["levels"], key=lambda level: level["chunks_per_s"])
        out.append(
            (
                "12. ingestion into the index, chunks/s (batch "
                + " / ".join(str(level["batch"]) for level in levels)
                + ")",
                " / ".join(_fmt(level["chunks_per_s"]) for level in levels),
                "-",
                "-",
                f">= {INGESTION_TARGET:,}",
                _verdict(best["chunks_per_s"] >= INGESTION_TARGET),
            )
        )
    return out


def knowledge_markdown(report: dict[str, Any]) -> list[str]:
    """The detail of figures 11 and 12 (empty when they were not measured)."""
    figures = report["figures"]
    eleven = figures.get("11_hybrid_retrieval")
    twelve = figures.get("12_ingestion")
    lines: list[str] = []
    if eleven:
        lines += [
            "",
            "### 11. Hybrid retrieval (words + vectors + fusion), warm",
            "",
            "Peer anchor: sqlite-vec's exact scan, about 14 ms at 10k and 141 ms per 100k "
            "(vectors alone).",
            "",
            f"{eleven['queries']} question-like queries, top {eleven['top_k']} of "
            f"{eleven['dimensions']}-d vectors; vectors: {eleven['vector_engine']}; words: "
            f"FTS5 BM25, {eleven['chunks_ranked']} ranked; {eleven['method']}.",
            "",
            "| chunks | hybrid (median / p95) | words alone | vector alone | one after the "
            "other | empty read | vectors: first load, memory |",
            "|---|---|---|---|---|---|---|",
        ]
        for level in eleven["levels"]:

            def both(key: str, lv: dict[str, Any] = level) -> str:
                return f"{_fmt(lv[key]['median'])} / {_fmt(lv[key]['p95'])} ms"

            lines.append(
                f"| {level['chunks']:,} | {both('hybrid_ms')} | {both('words_ms')} | "
                f"{both('vector_ms')} | {both('sequential_ms')} | {both('empty_read_ms')} | "
                f"{_fmt(level['vector_load_ms'])} ms, {_fmt(level['vector_cache_mb'])} MB |"
            )
    if twelve:
        lines += [
            "",
            "### 12. Ingestion into the index (storage only, fake embedder)",
            "",
            f"{twelve['chunks']:,} chunks of {twelve['chunk_chars']:,} characters; "
            f"{twelve['method']}. Per chunk, terms (lexical.index_terms): "
            f"{_fmt(twelve['terms_us_per_chunk'])} us, SHA-256: "
            f"{_fmt(twelve['sha256_us_per_chunk'])} us of CPU.",
            "",
            "| chunks per transaction | terms made | chunks/s | transaction (median / p95 / "
            "max) | CPU per chunk | delete per chunk |",
            "|---|---|---|---|---|---|",
        ]
        for level in twelve["levels"]:
            spent = level["transaction_ms"]
            where = "inside" if level["terms_in_transaction"] else "before"
            lines.append(
                f"| {level['batch']} | {where} | {_fmt(level['chunks_per_s'])} | "
                f"{_fmt(spent['median'])} / {_fmt(spent['p95'])} / {_fmt(spent['max'])} ms | "
                f"{_fmt(level['cpu_us_per_chunk'])} us | {_fmt(level['delete_us_per_chunk'])} us |"
            )
    return lines
