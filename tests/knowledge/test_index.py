"""The knowledge index (``knowledge/index.py``): writing chunks, searching them by words
and by vector inside the owner's ready documents, fusing, reading them back, and the
in-memory vector matrices kept current by version."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import Connection, select, text, update

from parley.knowledge import index, lexical
from parley.knowledge import vectors as vector_module
from parley.knowledge.fusion import fuse, fuse_scores
from parley.knowledge.index import (
    bm25_ceiling,
    fetch_chunks,
    hybrid_search,
    insert_chunks,
    lexical_matches,
    lexical_search,
)
from parley.knowledge.pgvector import vector_search
from parley.knowledge.types import Chunk, Hit, KbRef
from parley.knowledge.vector_search import VectorSearch
from parley.knowledge.vectors import VectorIndexes
from parley.store.database import Database
from parley.store.schema import kb_chunks, kb_documents, knowledge_bases
from tests.support.engines import sqlite_only

pytestmark = pytest.mark.anyio

MODEL = "test-4d"


def unit(*values: float) -> npt.NDArray[np.float32]:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


async def add_base(database: Database, owner: str, kb_id: str, *, model: str = MODEL) -> None:
    now = time.time()
    await database.write(
        lambda conn: conn.execute(
            knowledge_bases.insert().values(
                id=kb_id,
                owner=owner,
                name=kb_id,
                description="",
                embedding_model=model,
                dimensions=4 if model else None,
                chunk_size=1400,
                chunk_overlap=0,
                version=0,
                created_at=now,
                updated_at=now,
            )
        )
    )


async def add_document(
    database: Database,
    owner: str,
    kb_id: str,
    document_id: str,
    texts: list[str],
    vectors: npt.NDArray[np.float32] | None = None,
    *,
    status: str = "ready",
    title: str | None = None,
) -> list[int]:
    """A document row and its chunks; the base's version bumped. The chunk ids."""
    now = time.time()

    def transaction(conn: Connection) -> list[int]:
        conn.execute(
            kb_documents.insert().values(
                id=document_id,
                kb_id=kb_id,
                owner=owner,
                filename=f"{document_id}.txt",
                size=1,
                sha256="",
                status=status,
                chunks_done=0,
                title=title,
                created_at=now,
                updated_at=now,
            )
        )
        chunks = [Chunk(n, t, page=n + 1, section="Intro") for n, t in enumerate(texts)]
        insert_chunks(
            conn,
            owner=owner,
            kb_id=kb_id,
            document_id=document_id,
            chunks=chunks,
            vectors=vectors,
        )
        bump(conn, kb_id)
        ids = conn.execute(
            select(kb_chunks.c.id)
            .where(kb_chunks.c.document_id == document_id)
            .order_by(kb_chunks.c.ordinal)
        ).scalars()
        return [int(i) for i in ids]

    return await database.write(transaction)


def bump(conn: Connection, kb_id: str) -> None:
    conn.execute(
        update(knowledge_bases)
        .where(knowledge_bases.c.id == kb_id)
        .values(version=knowledge_bases.c.version + 1)
    )


async def ref(database: Database, kb_id: str) -> KbRef:
    row = await database.read(
        lambda conn: conn.execute(
            select(knowledge_bases.c.embedding_model, knowledge_bases.c.version).where(
                knowledge_bases.c.id == kb_id
            )
        ).one()
    )
    return KbRef(kb_id, row.embedding_model, row.version)


async def words(
    database: Database, owner: str, kb_ids: list[str], query: str, limit: int = 10
) -> list[int]:
    terms = lexical.query_terms(query)
    found = await database.read(
        lambda conn: lexical_search(conn, owner=owner, kb_ids=kb_ids, terms=terms, limit=limit)
    )
    return [chunk_id for chunk_id, _score in found]


@pytest.fixture
def matrices(database: Database) -> Iterator[VectorIndexes]:
    """SQLite's matrices in memory, whatever the engine: for the tests of how they load,
    follow changes and compact (they work on either engine)."""
    indexes = VectorIndexes(database, max_bytes=2**24)
    yield indexes
    indexes.close()


@pytest.fixture
def vectors(database: Database) -> Iterator[VectorSearch]:
    """The engine's own: pgvector on PostgreSQL, matrices in memory on SQLite."""
    indexes = vector_search(database, max_bytes=2**24)
    yield indexes
    indexes.close()


# --- writing and searching by words ---------------------------------------------------------


async def test_insert_writes_terms_hash_and_little_endian_vectors(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    vector = unit(1, 2, 3, 4)
    [chunk_id] = await add_document(
        database, "alice", "kb_a", "doc1", ["Hello, World! 知识库"], vector[None, :]
    )
    row = await database.read(
        lambda conn: conn.execute(select(kb_chunks).where(kb_chunks.c.id == chunk_id)).one()
    )
    assert row.terms == "hello world 知识 识库"
    assert row.text_hash == hashlib.sha256("Hello, World! 知识库".encode()).hexdigest()
    assert row.owner == "alice"
    assert row.kb_id == "kb_a"
    assert (row.page, row.section, row.ordinal) == (1, "Intro", 0)
    assert np.array_equal(np.frombuffer(row.embedding, dtype="<f4"), vector)


async def test_insert_without_vectors_and_rejects_a_count_mismatch(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    [chunk_id] = await add_document(database, "alice", "kb_a", "doc1", ["no vector here"])
    embedding = await database.read(
        lambda conn: conn.execute(
            select(kb_chunks.c.embedding).where(kb_chunks.c.id == chunk_id)
        ).scalar()
    )
    assert embedding is None
    with pytest.raises(ValueError, match="2 chunks but 1 vectors"):
        await database.write(
            lambda conn: insert_chunks(
                conn,
                owner="alice",
                kb_id="kb_a",
                document_id="doc1",
                chunks=[Chunk(5, "a"), Chunk(6, "b")],
                vectors=unit(1, 0, 0, 0)[None, :],
            )
        )


async def test_chunk_rows_then_insert_rows_is_insert_chunks(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    await add_document(database, "alice", "kb_a", "doc1", [])
    rows = index.chunk_rows(
        owner="alice",
        kb_id="kb_a",
        document_id="doc1",
        chunks=[Chunk(0, "Zwei Wörter", page=3, section="A > B")],
        vectors=unit(0, 0, 1, 0)[None, :],
    )
    assert rows[0][:9] == (
        "doc1",
        "kb_a",
        "alice",
        0,
        "Zwei Wörter",
        "zwei wörter",
        3,
        "A > B",
        hashlib.sha256("Zwei Wörter".encode()).hexdigest(),
    )
    await database.write(lambda conn: index.insert_rows(conn, rows))
    await database.write(lambda conn: index.insert_rows(conn, []))
    assert await words(database, "alice", ["kb_a"], "wörter")


async def test_lexical_search_english_best_first(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    ids = await add_document(
        database,
        "alice",
        "kb_a",
        "doc1",
        [
            "The backup schedule runs every night at two.",
            "Backup retention: backups are kept for thirty days; the backup is encrypted.",
            "Invoices go out monthly to the billing address.",
        ],
    )
    found = await words(database, "alice", ["kb_a"], "How long are backups kept?")
    assert found[0] == ids[1]
    assert ids[2] not in found
    assert await words(database, "alice", ["kb_a"], "invoice billing") == [ids[2]]
    assert await words(database, "alice", ["kb_a"], "zebra") == []
    assert await words(database, "alice", ["kb_a"], "") == []
    assert await words(database, "alice", [], "backup") == []


async def test_lexical_search_chinese(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    ids = await add_document(
        database,
        "alice",
        "kb_a",
        "doc1",
        ["知识库检索支持中文和英文。", "今天天气很好，我们去公园散步。"],
    )
    assert await words(database, "alice", ["kb_a"], "知识库") == [ids[0]]
    assert await words(database, "alice", ["kb_a"], "公园散步") == [ids[1]]
    assert await words(database, "alice", ["kb_a"], "检索中文") == [ids[0]]


async def test_lexical_search_quotes_operators_away(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    ids = await add_document(database, "alice", "kb_a", "doc1", ['the NEAR "and" OR not'])
    assert await words(database, "alice", ["kb_a"], 'NEAR( "and" * ^not') == ids


async def test_search_never_crosses_owners_even_with_the_same_kb_id(
    database: Database, vectors: VectorSearch
) -> None:
    await add_base(database, "alice", "kb_shared")
    alice = await add_document(
        database, "alice", "kb_shared", "doc_a", ["alpha secret"], unit(1, 0, 0, 0)[None, :]
    )
    # rows of bob's under the same knowledge base id string (only the owner differs)
    bob = await add_document(
        database, "bob", "kb_shared", "doc_b", ["alpha secret"], unit(1, 0, 0, 0)[None, :]
    )
    assert await words(database, "alice", ["kb_shared"], "alpha secret") == alice
    assert await words(database, "bob", ["kb_shared"], "alpha secret") == bob
    kb = await ref(database, "kb_shared")
    found = await vectors.search("alice", [kb], MODEL, unit(1, 0, 0, 0), 10)
    assert [chunk_id for chunk_id, _ in found] == alice
    # the base row is alice's: bob has no vectors to load under that id
    assert await vectors.search("bob", [kb], MODEL, unit(1, 0, 0, 0), 10) == []
    assert set(await database.read(lambda conn: fetch_chunks(conn, "alice", alice + bob))) == {
        *alice
    }


async def test_only_ready_documents_are_found(database: Database, vectors: VectorSearch) -> None:
    await add_base(database, "alice", "kb_a")
    ready = await add_document(
        database, "alice", "kb_a", "doc_ready", ["gamma ready"], unit(1, 0, 0, 0)[None, :]
    )
    for status in ("queued", "indexing", "failed", "cancelled", "deleting"):
        await add_document(
            database,
            "alice",
            "kb_a",
            f"doc_{status}",
            [f"gamma {status}"],
            unit(1, 0, 0, 0)[None, :],
            status=status,
        )
    assert await words(database, "alice", ["kb_a"], "gamma") == ready
    kb = await ref(database, "kb_a")
    found = await vectors.search("alice", [kb], MODEL, unit(1, 0, 0, 0), 10)
    assert [chunk_id for chunk_id, _ in found] == ready


async def test_deleting_a_document_cascades_to_chunks_and_the_fts_index(
    database: Database,
) -> None:
    sqlite_only(database, "FTS5's external-content index and the triggers that keep it")
    await add_base(database, "alice", "kb_a")
    gone = await add_document(database, "alice", "kb_a", "doc1", ["delta one", "delta two"])
    kept = await add_document(database, "alice", "kb_a", "doc2", ["delta three"])

    def fts_count(conn: Connection, expression: str) -> int:
        return int(
            conn.execute(
                text("SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH :e"),
                {"e": expression},
            ).scalar_one()
        )

    assert await database.read(lambda conn: fts_count(conn, "delta")) == 3
    await database.write(
        lambda conn: conn.execute(kb_documents.delete().where(kb_documents.c.id == "doc1"))
    )
    left = await database.read(
        lambda conn: conn.execute(select(kb_chunks.c.id).order_by(kb_chunks.c.id)).scalars().all()
    )
    assert list(left) == kept
    assert await database.read(lambda conn: fts_count(conn, "delta")) == 1
    assert await database.read(lambda conn: fts_count(conn, "one OR two")) == 0
    rowids = await database.read(
        lambda conn: (
            conn.execute(text("SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH 'delta'"))
            .scalars()
            .all()
        )
    )
    assert set(rowids).isdisjoint(gone)
    # the index agrees with its content table
    await database.write(
        lambda conn: conn.execute(
            text("INSERT INTO kb_chunks_fts(kb_chunks_fts) VALUES ('integrity-check')")
        )
    )
    # and deleting the base removes the rest
    await database.write(
        lambda conn: conn.execute(knowledge_bases.delete().where(knowledge_bases.c.id == "kb_a"))
    )
    assert await database.read(lambda conn: fts_count(conn, "delta")) == 0


async def test_common_terms_are_dropped_while_rare_ones_decide(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "MIN_MATCHES", 3)
    monkeypatch.setattr(index, "MAX_MATCHES", 3)
    await add_base(database, "alice", "kb_a")
    ids = await add_document(
        database,
        "alice",
        "kb_a",
        "doc1",
        [f"the report number {n}" for n in range(6)] + ["the zeppelin report"],
    )
    # "the" and "report" are in 7 chunks each (> 3): only "zeppelin" is searched
    assert await words(database, "alice", ["kb_a"], "the zeppelin report") == [ids[6]]
    # every term common: the rarer one alone ranks the newest 3 chunks holding it
    found = await words(database, "alice", ["kb_a"], "the report")
    assert sorted(found) == ids[4:7]


def test_choose_keeps_the_rarest_terms_within_the_budget() -> None:
    terms = ["a", "b", "c", "d", "e"]
    assert index._choose(terms, [101, 30, 0, 60, 20], 100) == (["b", "e"], False)
    assert index._choose(terms, [101, 30, 0, 50, 20], 100) == (["b", "d", "e"], False)
    assert index._choose(terms, [101, 101, 0, 101, 101], 100) == (["a", "b", "d", "e"], True)
    assert index._choose(terms, [0, 0, 0, 0, 0], 100) == ([], False)


async def test_the_budget_follows_the_size_of_the_index(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "MIN_MATCHES", 2)
    monkeypatch.setattr(index, "MAX_MATCHES", 3)
    monkeypatch.setattr(index, "CHUNKS_PER_MATCH", 4)
    assert await database.read(index._budget) == 2  # empty
    await add_base(database, "alice", "kb_a")
    await add_document(database, "alice", "kb_a", "doc1", ["x"] * 9)
    assert await database.read(index._budget) == 2  # 9 // 4
    await add_document(database, "alice", "kb_a", "doc2", ["x"] * 30)
    assert await database.read(index._budget) == 3


# --- fusion and reading ---------------------------------------------------------------------


def ranked(hits: list[Hit]) -> list[tuple[int, float, int | None, int | None]]:
    return [(h.chunk_id, round(h.score, 12), h.lexical_rank, h.vector_rank) for h in hits]


def test_reciprocal_rank_fusion() -> None:
    hits = fuse([[(1, 9.0), (2, 8.0), (3, 7.0)], [(3, 0.9), (4, 0.8)]], limit=10)
    assert ranked(hits) == [
        (3, round(1 / 63 + 1 / 61, 12), 3, 1),
        (1, round(1 / 61, 12), 1, None),
        # 2 and 4 tie (1/62 each), with the same best rank: the lower id first
        (2, round(1 / 62, 12), 2, None),
        (4, round(1 / 62, 12), None, 2),
    ]
    assert [h.chunk_id for h in fuse([[(1, 1.0)], [(2, 1.0)]], limit=1)] == [1]
    assert fuse([[(5, 1.0)], [(6, 1.0)]], k=0, limit=5)[0].score == 1.0
    # symmetric ranks give exactly equal scores, whatever the list order
    both = fuse([[(1, 0), (2, 0)], [(2, 0), (1, 0)]], limit=2)
    assert both[0].score == both[1].score
    assert [h.chunk_id for h in both] == [1, 2]
    assert fuse([[], []], limit=3) == []
    # a repeated chunk counts at its first place only
    assert ranked(fuse([[(7, 1.0), (7, 0.5), (8, 0.1)]], limit=3)) == [
        (7, round(1 / 61, 12), 1, None),
        (8, round(1 / 62, 12), 2, None),
    ]


def test_score_fusion_weighs_word_coverage_against_rescaled_cosines() -> None:
    words = [(1, 10.0), (2, 5.0), (3, 2.0)]  # coverage 1, 0.5, 0.2 of a ceiling of 10
    meaning = [(3, 0.9), (4, 0.8), (1, 0.5)]  # rescaled from 0.5 to 0.9: 1, 0.75, 0
    hits = fuse_scores(words, meaning, ceiling=10.0, floor=0.5, limit=10)
    assert ranked(hits) == [
        # the vectors' best shares one word of five with the question: 0.5 * 0.2^4 + 0.5
        (3, 0.5008, 3, 1),
        # every word of the question, nothing by meaning: 0.5 * 1^4 + 0
        (1, 0.5, 1, 3),
        (4, 0.375, None, 2),
        # half the question's words: 0.5 * 0.5^4
        (2, 0.03125, 2, None),
    ]
    # reciprocal rank fusion put the chunk found by both lists first, whatever it held
    assert [h.chunk_id for h in fuse([words, meaning], limit=2)] == [1, 3]
    assert [h.chunk_id for h in fuse_scores(words, meaning, ceiling=10.0, limit=1)] == [3]
    # the weight moves the balance: words alone, then vectors alone
    assert [
        h.chunk_id
        for h in fuse_scores(words, meaning, ceiling=10.0, floor=0.5, lexical_weight=1.0, limit=4)
    ] == [1, 2, 3, 4]
    assert [
        h.chunk_id
        for h in fuse_scores(words, meaning, ceiling=10.0, floor=0.5, lexical_weight=0.0, limit=4)
    ][:3] == [3, 4, 1]


def test_score_fusion_of_one_list_keeps_its_order_at_full_weight() -> None:
    words = [(5, 30.0), (6, 10.0), (7, 5.0)]  # over the ceiling counts as 1
    assert ranked(fuse_scores(words, [], ceiling=10.0, limit=5)) == [
        (5, 1.0, 1, None),
        (6, 1.0, 2, None),  # a tie at 1: the better rank first
        (7, 0.0625, 3, None),
    ]
    # without a ceiling (PostgreSQL's ts_rank): relative to the best
    assert ranked(fuse_scores([(8, 0.4), (9, 0.2)], [], ceiling=None, limit=5)) == [
        (8, 1.0, 1, None),
        (9, 0.0625, 2, None),
    ]
    # vectors alone: rescaled between the lowest (by default, of the list) and the best
    assert ranked(fuse_scores([], [(1, 0.9), (2, 0.7), (3, 0.5)], ceiling=None, limit=5)) == [
        (1, 1.0, None, 1),
        (2, 0.5, None, 2),
        (3, 0.0, None, 3),
    ]
    # one candidate, or all alike: each is the best
    assert ranked(fuse_scores([], [(4, 0.3), (5, 0.3)], ceiling=None, limit=5)) == [
        (4, 1.0, None, 1),
        (5, 1.0, None, 2),
    ]
    assert fuse_scores([], [], ceiling=None, limit=3) == []
    # a chunk repeated within a list counts at its first place only
    assert ranked(fuse_scores([(7, 10.0), (7, 5.0), (8, 5.0)], [], ceiling=10.0, limit=3)) == [
        (7, 1.0, 1, None),
        (8, 0.0625, 2, None),
    ]


def test_bm25_ceiling_sums_the_idf_of_the_words_a_chunk_could_hold() -> None:
    def idf(n: int, total: int = 10) -> float:
        return max(1e-6, math.log((total - n + 0.5) / (n + 0.5)))

    # searched terms, and a word no chunk holds; not "the", too common to be searched
    ceiling = bm25_ceiling(["alpha", "beta", "zeta", "the"], [1, 3, 0, 9], ["alpha", "beta"], 10)
    assert ceiling == pytest.approx(idf(1) + idf(3) + idf(0))
    # an unknown CJK pair touching a known one is a seam between words (肉炒, 炒糖), not
    # a word; one that touches none (生日) counts
    terms = ["红烧", "烧肉", "肉炒", "炒糖", "糖色", "生日"]
    counts = [2, 2, 0, 0, 1, 0]
    chosen = ["红烧", "烧肉", "糖色"]
    assert bm25_ceiling(terms, counts, chosen, 10) == pytest.approx(
        idf(2) + idf(2) + idf(1) + idf(0)
    )


async def test_a_chunk_holding_every_word_scores_its_ceiling(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    texts = ["omega delta", "omega filler", *(f"filler {n}" for n in range(6))]  # 2 terms
    ids = await add_document(database, "alice", "kb_a", "doc1", texts)
    matched = await database.read(
        lambda conn: lexical_matches(
            conn, owner="alice", kb_ids=["kb_a"], terms=["omega", "delta", "absent"], limit=5
        )
    )
    assert [chunk_id for chunk_id, _ in matched.hits] == ids[:2]
    assert matched.ceiling is not None
    # FTS5's BM25 of a chunk of average length holding each word once is the ceiling
    # (less the word no chunk holds); every chunk here is of the same length
    total = max(ids)
    expected = sum(math.log((total - n + 0.5) / (n + 0.5)) for n in (2, 1, 0))
    assert matched.ceiling == pytest.approx(expected)
    absent = math.log((total + 0.5) / 0.5)
    assert matched.hits[0][1] == pytest.approx(expected - absent, rel=1e-6)


async def test_fetch_chunks(database: Database) -> None:
    await add_base(database, "alice", "kb_a")
    ids = await add_document(
        database, "alice", "kb_a", "doc1", ["first", "second"], title="The Guide"
    )
    found = await database.read(lambda conn: fetch_chunks(conn, "alice", [ids[1], 999, ids[1]]))
    assert list(found) == [ids[1]]
    view = found[ids[1]]
    assert (view.id, view.text, view.ordinal, view.page, view.section) == (
        ids[1],
        "second",
        1,
        2,
        "Intro",
    )
    assert (view.document_id, view.kb_id, view.filename, view.title) == (
        "doc1",
        "kb_a",
        "doc1.txt",
        "The Guide",
    )
    assert await database.read(lambda conn: fetch_chunks(conn, "bob", ids)) == {}
    assert await database.read(lambda conn: fetch_chunks(conn, "alice", [])) == {}


# --- vectors --------------------------------------------------------------------------------


class Calls:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loads = 0
        self.changes = 0
        load, changes = vector_module._load, vector_module._changes

        def counted_load(*args: Any, **kwargs: Any) -> Any:
            self.loads += 1
            return load(*args, **kwargs)

        def counted_changes(*args: Any, **kwargs: Any) -> Any:
            self.changes += 1
            return changes(*args, **kwargs)

        monkeypatch.setattr(vector_module, "_load", counted_load)
        monkeypatch.setattr(vector_module, "_changes", counted_changes)


async def ids_by_vector(
    vectors: VectorSearch, kb: KbRef, query: npt.NDArray[np.float32], limit: int = 10
) -> list[int]:
    return [chunk_id for chunk_id, _ in await vectors.search("alice", [kb], MODEL, query, limit)]


async def test_vectors_load_then_follow_changes_without_reloading(
    database: Database, matrices: VectorIndexes, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    await add_base(database, "alice", "kb_a")
    one = await add_document(
        database,
        "alice",
        "kb_a",
        "doc1",
        ["a", "b"],
        np.stack([unit(1, 0, 0, 0), unit(0, 1, 0, 0)]),
    )
    kb = await ref(database, "kb_a")
    # two searches at once share one read
    found, again = await asyncio.gather(
        matrices.search("alice", [kb], MODEL, unit(1, 0.1, 0, 0), 10),
        matrices.search("alice", [kb], MODEL, unit(1, 0.1, 0, 0), 10),
    )
    assert found == again
    assert [chunk_id for chunk_id, _ in found] == [one[0], one[1]]
    assert found[0][1] == pytest.approx(float(unit(1, 0.1, 0, 0) @ unit(1, 0, 0, 0)))
    assert (calls.loads, calls.changes) == (1, 0)
    assert matrices.cached("alice", "kb_a") == (kb.version, 2)
    # the same version again: nothing read
    await ids_by_vector(matrices, kb, unit(1, 0, 0, 0))
    assert (calls.loads, calls.changes) == (1, 0)

    # a document made ready (here, by the ingestion): only it is read
    two = await add_document(database, "alice", "kb_a", "doc2", ["c"], unit(0, 0, 1, 0)[None, :])
    kb2 = await ref(database, "kb_a")
    matrices.document_ready("kb_a", kb2.version, "doc2")
    assert await ids_by_vector(matrices, kb2, unit(0, 0, 1, 0), 1) == two
    assert (calls.loads, calls.changes) == (1, 1)
    assert matrices.cached("alice", "kb_a") == (kb2.version, 3)
    # an older reference is served from the newer matrix
    assert len(await ids_by_vector(matrices, kb, unit(0, 0, 1, 0))) == 3

    # forgetting a document drops its rows at once, before any version change
    matrices.forget_document("kb_a", "doc1")
    assert await ids_by_vector(matrices, kb2, unit(1, 0, 0, 0)) == two
    assert matrices.cached("alice", "kb_a") == (kb2.version, 1)
    assert (calls.loads, calls.changes) == (1, 1)


async def test_vectors_follow_changes_made_elsewhere(
    database: Database, matrices: VectorIndexes, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    await add_base(database, "alice", "kb_a")
    one = await add_document(database, "alice", "kb_a", "doc1", ["a"], unit(1, 0, 0, 0)[None, :])
    two = await add_document(database, "alice", "kb_a", "doc2", ["b"], unit(0, 1, 0, 0)[None, :])
    kb = await ref(database, "kb_a")
    assert await ids_by_vector(matrices, kb, unit(1, 1, 0, 0)) == one + two

    # another instance hides doc1 and re-indexes doc2 (new chunks, same document id)
    def elsewhere(conn: Connection) -> None:
        conn.execute(
            update(kb_documents).where(kb_documents.c.id == "doc1").values(status="deleting")
        )
        conn.execute(kb_chunks.delete().where(kb_chunks.c.document_id == "doc2"))
        insert_chunks(
            conn,
            owner="alice",
            kb_id="kb_a",
            document_id="doc2",
            chunks=[Chunk(0, "b2")],
            vectors=unit(0, 0, 0, 1)[None, :],
        )
        conn.execute(
            update(kb_documents)
            .where(kb_documents.c.id == "doc2")
            .values(updated_at=time.time() + 1)
        )
        bump(conn, "kb_a")

    await database.write(elsewhere)
    kb2 = await ref(database, "kb_a")
    found = await matrices.search("alice", [kb2], MODEL, unit(0, 0, 0, 1), 10)
    assert len(found) == 1
    assert found[0][1] == pytest.approx(1.0)  # the new vector (SQLite may reuse the id)
    assert (calls.loads, calls.changes) == (1, 1)
    assert matrices.cached("alice", "kb_a") == (kb2.version, 1)


async def test_a_new_embedding_model_reloads_and_mismatches_find_nothing(
    database: Database, matrices: VectorIndexes, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch)
    await add_base(database, "alice", "kb_a")
    await add_document(database, "alice", "kb_a", "doc1", ["a"], unit(1, 0, 0, 0)[None, :])
    kb = await ref(database, "kb_a")
    assert await matrices.search("alice", [kb], "other-model", unit(1, 0, 0, 0), 10) == []
    assert (calls.loads, calls.changes) == (0, 0)
    # the same base named twice is searched once
    assert len(await matrices.search("alice", [kb, kb], MODEL, unit(1, 0, 0, 0), 10)) == 1
    # the caller's model is not the base's: nothing compared
    assert await matrices.search("alice", [kb], "other-model", unit(1, 0, 0, 0), 10) == []
    # a query of the wrong size finds nothing
    assert await matrices.search("alice", [kb], MODEL, np.ones(3, dtype=np.float32), 10) == []
    assert len(await ids_by_vector(matrices, kb, unit(1, 0, 0, 0))) == 1

    # the base is re-embedded with another model (say, a re-index): a full reload
    await database.write(
        lambda conn: conn.execute(
            update(knowledge_bases)
            .where(knowledge_bases.c.id == "kb_a")
            .values(embedding_model="other-model", version=knowledge_bases.c.version + 1)
        )
    )
    kb2 = await ref(database, "kb_a")
    assert kb2.embedding_model == "other-model"
    assert await matrices.search("alice", [kb2], MODEL, unit(1, 0, 0, 0), 10) == []
    found = await matrices.search("alice", [kb2], "other-model", unit(1, 0, 0, 0), 10)
    assert len(found) == 1
    assert calls.loads == 2
    # an old reference with the old model: the matrix in memory is the new model's
    assert await matrices.search("alice", [kb], MODEL, unit(1, 0, 0, 0), 10) == []


async def test_memory_is_bounded_least_recently_searched_first_out(database: Database) -> None:
    rows = 10
    per_base = rows * (4 * 4 + 8 + 4 + 1 + 1)  # vector, id, document, alive, script
    vectors = VectorIndexes(database, max_bytes=per_base * 2 + per_base // 2)
    try:
        refs = []
        for name in ("kb_1", "kb_2", "kb_3"):
            await add_base(database, "alice", name)
            await add_document(
                database,
                "alice",
                name,
                f"doc_{name}",
                [f"text {n}" for n in range(rows)],
                np.stack([unit(1, n, 0, 0) for n in range(rows)]),
            )
            refs.append(await ref(database, name))
        for kb in refs[:2]:
            assert len(await ids_by_vector(vectors, kb, unit(1, 0, 0, 0))) == 10
        assert vectors.nbytes == 2 * per_base
        assert await ids_by_vector(vectors, refs[0], unit(1, 0, 0, 0))  # kb_1 used last
        assert len(await ids_by_vector(vectors, refs[2], unit(1, 0, 0, 0))) == 10
        assert vectors.cached("alice", "kb_1") is not None
        assert vectors.cached("alice", "kb_2") is None  # least recently searched
        assert vectors.cached("alice", "kb_3") is not None
        assert vectors.nbytes <= vectors.max_bytes
        # a base larger than the whole budget is not searched by vector at all
        small = VectorIndexes(database, max_bytes=per_base // 2)
        try:
            assert await ids_by_vector(small, refs[0], unit(1, 0, 0, 0)) == []
            assert small.nbytes == 0
        finally:
            small.close()
    finally:
        vectors.close()


async def test_forget_base_drops_its_matrix(database: Database, vectors: VectorSearch) -> None:
    await add_base(database, "alice", "kb_a")
    await add_document(database, "alice", "kb_a", "doc1", ["a"], unit(1, 0, 0, 0)[None, :])
    kb = await ref(database, "kb_a")
    assert await ids_by_vector(vectors, kb, unit(1, 0, 0, 0))
    vectors.forget_base("kb_a")
    assert vectors.cached("alice", "kb_a") is None
    assert vectors.nbytes == 0


async def test_many_changes_compact_the_matrix(database: Database, matrices: VectorIndexes) -> None:
    await add_base(database, "alice", "kb_a")
    kept: list[int] = []
    for n in range(8):
        ids = await add_document(
            database, "alice", "kb_a", f"doc{n}", ["x", "y"], np.stack([unit(1, n, 0, 0)] * 2)
        )
        if n % 2:
            kept += ids
        kb = await ref(database, "kb_a")
        await ids_by_vector(matrices, kb, unit(1, 0, 0, 0))  # each document read alone
    for n in range(0, 8, 2):
        matrices.forget_document("kb_a", f"doc{n}")
    found = await ids_by_vector(matrices, kb, unit(0, 1, 0, 0), 100)
    assert sorted(found) == sorted(kept)
    assert matrices.cached("alice", "kb_a") == (kb.version, 8)


# --- both -----------------------------------------------------------------------------------


async def test_hybrid_search_fuses_words_and_vectors(
    database: Database, vectors: VectorSearch
) -> None:
    await add_base(database, "alice", "kb_a")
    await add_base(database, "alice", "kb_b", model="")  # no vectors at all
    ids = await add_document(
        database,
        "alice",
        "kb_a",
        "doc1",
        ["omega words match here", "nothing in common", "omega again"],
        np.stack([unit(0, 1, 0, 0), unit(1, 0, 0, 0), unit(0, 0, 1, 0)]),
    )
    plain = await add_document(database, "alice", "kb_b", "doc2", ["omega plain"])
    kbs = [await ref(database, "kb_a"), await ref(database, "kb_b")]
    hits = await hybrid_search(
        database,
        vectors,
        owner="alice",
        kbs=kbs,
        query="omega",
        query_vector=unit(1, 0, 0, 0),
        model=MODEL,
        top_k=10,
    )
    by_id = {hit.chunk_id: hit for hit in hits}
    assert set(by_id) == {*ids, *plain}
    assert by_id[ids[1]].lexical_rank is None
    assert by_id[ids[1]].vector_rank == 1
    assert by_id[plain[0]].vector_rank is None
    assert by_id[ids[0]].lexical_rank is not None
    assert by_id[ids[0]].vector_rank is not None
    assert hits == sorted(hits, key=lambda h: -h.score)
    # without a query vector: by words alone
    alone = await hybrid_search(
        database,
        vectors,
        owner="alice",
        kbs=kbs,
        query="omega",
        query_vector=None,
        model=None,
        top_k=2,
    )
    assert len(alone) == 2
    assert all(h.vector_rank is None and h.lexical_rank for h in alone)
    assert (
        await hybrid_search(
            database,
            vectors,
            owner="bob",
            kbs=kbs,
            query="omega",
            query_vector=unit(1, 0, 0, 0),
            model=MODEL,
            top_k=5,
        )
        == []
    )


async def test_hybrid_search_lets_a_shared_word_not_outweigh_meaning(
    database: Database, vectors: VectorSearch
) -> None:
    """A paraphrase's answer, found by meaning alone, stays above a chunk sharing one
    word of the question; a chunk holding every word of it comes first; the question's
    stop words ("what", "does", "the") find nothing by themselves."""
    await add_base(database, "alice", "kb_a")
    fillers = [f"the filler text number {n}" for n in range(5)]
    ids = await add_document(
        database,
        "alice",
        "kb_a",
        "doc1",
        ["omega is mentioned here", "nothing shared at all", "omega delta gamma kappa", *fillers],
        np.stack(
            [unit(0.8, 0.6, 0, 0), unit(1, 0, 0, 0), unit(0.5, 0.5, 0, 0)]
            + [unit(0, 0, 1, 0)] * len(fillers)
        ),
    )
    kbs = [await ref(database, "kb_a")]
    hits = await hybrid_search(
        database,
        vectors,
        owner="alice",
        kbs=kbs,
        query="What does the omega delta gamma kappa do?",
        query_vector=unit(1, 0, 0, 0),
        model=MODEL,
        top_k=3,
    )
    assert [h.chunk_id for h in hits] == [ids[2], ids[1], ids[0]]
    assert (hits[0].lexical_rank, hits[0].vector_rank) == (1, 3)
    assert (hits[1].lexical_rank, hits[1].vector_rank) == (None, 1)
    assert (hits[2].lexical_rank, hits[2].vector_rank) == (2, 2)
    # by reciprocal rank, the chunk in both lists (one shared word) beat the answer
    words_list = [(ids[2], 2.0), (ids[0], 0.5)]
    meaning = [(ids[1], 1.0), (ids[0], 0.8), (ids[2], 0.7)]
    assert [h.chunk_id for h in fuse([words_list, meaning], limit=3)] == [ids[2], ids[0], ids[1]]
    # stop words are not searched: no filler is found by "the"
    alone = await hybrid_search(
        database,
        vectors,
        owner="alice",
        kbs=kbs,
        query="What does the omega do?",
        query_vector=None,
        model=None,
        top_k=10,
    )
    assert {h.chunk_id for h in alone} == {ids[0], ids[2]}


async def test_hybrid_search_survives_a_failing_vector_search(
    database: Database, vectors: VectorSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_base(database, "alice", "kb_a")
    ids = await add_document(database, "alice", "kb_a", "doc1", ["sigma"], unit(1, 0, 0, 0)[None])

    async def broken(*args: Any) -> list[tuple[int, float]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(vectors, "search", broken)
    hits = await hybrid_search(
        database,
        vectors,
        owner="alice",
        kbs=[await ref(database, "kb_a")],
        query="sigma",
        query_vector=unit(1, 0, 0, 0),
        model=MODEL,
        top_k=3,
    )
    assert [h.chunk_id for h in hits] == ids


async def test_another_owners_flood_of_common_words_never_hides_a_match(
    database: Database,
) -> None:
    """Every query term common: the window of newest matching chunks is the owner's own,
    so another owner's uploads (newer, and more than the budget) cannot push it out."""
    await add_base(database, "alice", "kb_a")
    await add_base(database, "bob", "kb_b")
    [mine] = await add_document(database, "alice", "kb_a", "d_a", ["the budget report for May"])
    assert await words(database, "alice", ["kb_a"], "budget report") == [mine]
    flood = [f"budget report number {n}" for n in range(index.MIN_MATCHES + 100)]
    await add_document(database, "bob", "kb_b", "d_b", flood)
    assert await words(database, "alice", ["kb_a"], "budget report") == [mine]
