"""Figures 11 and 12 (the knowledge index, in-process) run and render.

A tiny run: it proves the figures work and checks what cannot be noise (every query
answered, every chunk written and deleted). Speed is judged from the full run
(`parley bench`), never from a test.
"""

from __future__ import annotations

from typing import Any

import pytest

from parley.bench.corpus import chunk_texts, corpus, questions, unit_vectors
from parley.bench.knowledge import hybrid_retrieval, ingestion, knowledge_markdown, knowledge_rows
from parley.bench.report import rows
from parley.knowledge import lexical

pytestmark = pytest.mark.anyio

DIST = {"median", "p95", "max"}


def test_the_synthetic_corpus() -> None:
    source = corpus()
    assert len(source.words) == 40_000
    assert source.words[0] == "the"
    assert abs(float(source.probabilities.sum()) - 1.0) < 1e-9
    texts = chunk_texts(source, 20)
    assert texts == chunk_texts(source, 20)  # the same in every run
    assert all(1_200 <= len(text) <= 1_400 for text in texts)
    words = " ".join(texts).split()
    assert words.count("the") > words.count("system") > 0  # Zipf-like
    vectors = unit_vectors(5)
    assert vectors.shape == (5, 384)
    assert abs(float((vectors**2).sum(axis=1).max()) - 1.0) < 1e-5
    asked = questions(source, 5)
    assert all(len(lexical.query_terms(q)) >= 4 for q in asked)


async def test_retrieval_figure() -> None:
    result = await hybrid_retrieval((300, 600), queries=4)
    assert [level["chunks"] for level in result["levels"]] == [300, 600]
    for level in result["levels"]:
        for key in ("hybrid_ms", "words_ms", "vector_ms", "sequential_ms", "empty_read_ms"):
            assert set(level[key]) == DIST, key
            assert level[key]["median"] > 0
        assert level["lexical_results_mean"] > 0
        assert level["vector_cache_mb"] > 0
        assert level["other_owner_chunks"] == level["chunks"] // 20


async def test_ingestion_figure() -> None:
    result = await ingestion(120, batches=(16, 64))
    assert [(lv["batch"], lv["terms_in_transaction"]) for lv in result["levels"]] == [
        (16, True),
        (16, False),
        (64, True),
        (64, False),
    ]
    for level in result["levels"]:
        assert level["chunks_per_s"] > 0
        assert set(level["transaction_ms"]) == DIST
        assert level["delete_us_per_chunk"] > 0
    assert result["terms_us_per_chunk"] > 0


def test_report_renders_figures_11_and_12() -> None:
    def dist(median: float) -> dict[str, float]:
        return {"median": median, "p95": median * 1.5, "max": median * 2}

    def level(chunks: int, hybrid: float) -> dict[str, Any]:
        return {
            "chunks": chunks,
            "hybrid_ms": dist(hybrid),
            "words_ms": dist(hybrid / 2),
            "vector_ms": dist(hybrid / 3),
            "sequential_ms": dist(hybrid * 1.2),
            "empty_read_ms": dist(0.3),
            "vector_load_ms": 100.0,
            "vector_cache_mb": 5.0,
        }

    figures: dict[str, Any] = {
        "11_hybrid_retrieval": {
            "top_k": 10,
            "dimensions": 384,
            "queries": 200,
            "vector_engine": "exact",
            "chunks_ranked": "at most 1 in 25",
            "method": "in-process",
            "levels": [level(10_000, 4.0), level(100_000, 31.0)],
        },
        "12_ingestion": {
            "chunks": 20_000,
            "chunk_chars": 1356,
            "terms_us_per_chunk": 60.0,
            "sha256_us_per_chunk": 3.0,
            "method": "in-process",
            "levels": [
                {
                    "batch": batch,
                    "terms_in_transaction": inside,
                    "chunks_per_s": rate,
                    "transaction_ms": dist(3.0),
                    "cpu_us_per_chunk": 200,
                    "delete_us_per_chunk": 150,
                }
                for batch, inside, rate in (
                    (16, True, 4_000),
                    (16, False, 4_100),
                    (64, True, 5_200),
                )
            ],
        },
    }
    eleven, twelve = knowledge_rows(figures)
    assert eleven[0].startswith("11.")
    assert eleven[1] == "4 / 31 ms"
    assert eleven[5] == "**missed**"  # 31 ms at 100k
    assert twelve[1] == "4,000 / 5,200"
    assert twelve[5] == "met"
    figures["11_hybrid_retrieval"]["levels"][1] = level(100_000, 29.0)
    assert knowledge_rows(figures)[0][5] == "met"
    # the smoke sizes are held to the 10k target
    figures["11_hybrid_retrieval"]["levels"] = [level(500, 6.0)]
    assert knowledge_rows(figures)[0][5] == "**missed**"
    detail = "\n".join(knowledge_markdown({"figures": figures}))
    assert "### 11." in detail
    assert "### 12." in detail
    assert "| 64 | inside | 5,200 |" in detail
    assert "| 16 | before | 4,100 |" in detail
    # in the whole table, after the engine figures
    labels = [row[0].split(".")[0] for row in rows({"figures": figures})]
    assert labels[-2:] == ["11", "12"]
