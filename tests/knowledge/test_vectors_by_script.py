"""A cross-lingual model's chunks are compared within their script (``vectors.py``):
a question's cosines with chunks in its own language are all higher than with any in
the other, so the other language's answer is judged by how far it stands out of its own
language. Real SQLite, real ``VectorIndexes``; 4-d vectors with chosen cosines."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import Connection, select

from parley.knowledge import lexical
from parley.knowledge.e5 import E5_MODEL_ID
from parley.knowledge.pgvector import vector_search
from parley.knowledge.vector_search import MIN_SCRIPT_ROWS, VectorSearch
from parley.settings import Settings
from parley.store.database import Database
from parley.store.schema import kb_chunks, kb_documents
from tests.knowledge.test_index import add_base, add_document, ref, unit
from tests.support.migrations import migrate_to

pytestmark = pytest.mark.anyio

QUERY = unit(1, 0, 0, 0)


def at(cosines: list[float]) -> npt.NDArray[np.float32]:
    """Unit vectors whose cosines with ``QUERY`` are ``cosines`` (each a little apart)."""
    rows = []
    for n, c in enumerate(cosines):
        rest = math.sqrt(1 - c * c)
        angle = n * 0.3
        rows.append([c, rest * math.cos(angle), rest * math.sin(angle), 0.0])
    return np.array(rows, dtype=np.float32)


@pytest.fixture
def vectors(database: Database) -> Iterator[VectorSearch]:
    """The engine's own: pgvector on PostgreSQL, matrices in memory on SQLite."""
    indexes = vector_search(database, max_bytes=2**24)
    yield indexes
    indexes.close()


def test_a_chunk_is_cjk_when_cjk_characters_are_a_fifth_of_its_letters() -> None:
    assert lexical.script("How many days of annual leave?") == lexical.LATIN
    assert lexical.script("全职员工每年有多少天年假？") == lexical.CJK
    assert lexical.script("本政策适用于 Harbour Logistics 的全体员工。") == lexical.CJK
    assert lexical.script("The Café 東京 is a restaurant in the centre of town") == lexical.LATIN
    assert lexical.script("12 345 !?") == lexical.LATIN


async def english_and_chinese(
    database: Database, model: str, chinese: int = 10
) -> tuple[list[int], list[int]]:
    """A base of 10 English chunks (cosines 0.80-0.91, the best last) and ``chinese``
    Chinese ones (0.50-0.54, and one at 0.70, the last)."""
    await add_base(database, "alice", "kb", model=model)
    english = [0.80 + 0.01 * n for n in range(9)] + [0.91]
    english_ids = await add_document(
        database, "alice", "kb", "en", [f"an English passage {n}" for n in range(10)], at(english)
    )
    cosines = [0.50 + 0.005 * n for n in range(chinese - 1)] + [0.70]
    texts = [f"一段中文内容第{n}段" for n in range(chinese)]
    chinese_ids = await add_document(database, "alice", "kb", "zh", texts, at(cosines))
    return english_ids, chinese_ids


async def test_the_other_languages_standout_comes_first_for_a_cross_lingual_model(
    database: Database, vectors: VectorSearch
) -> None:
    english, chinese = await english_and_chinese(database, E5_MODEL_ID)
    kb = await ref(database, "kb")
    found = await vectors.search("alice", [kb], E5_MODEL_ID, QUERY, 20)
    order = [chunk_id for chunk_id, _ in found]
    # the Chinese chunk stands out of its language (z about 3) more than the best
    # English one of its own (z about 1.9)
    assert order[:2] == [chinese[-1], english[-1]]
    # the scores are on the scale of the whole base: its mean is kept
    scores = np.array([score for _, score in found])
    cosines = np.concatenate(
        [
            at([0.80 + 0.01 * n for n in range(9)] + [0.91]) @ QUERY,
            at([0.50 + 0.005 * n for n in range(9)] + [0.70]) @ QUERY,
        ]
    )
    assert scores.mean() == pytest.approx(float(cosines.mean()), abs=1e-5)
    assert scores.std() == pytest.approx(float(cosines.std()), abs=1e-5)


async def test_other_models_rank_by_cosine(database: Database, vectors: VectorSearch) -> None:
    english, _ = await english_and_chinese(database, "test-4d")
    kb = await ref(database, "kb")
    found = await vectors.search("alice", [kb], "test-4d", QUERY, 20)
    assert [chunk_id for chunk_id, _ in found][:2] == [english[-1], english[-2]]
    assert found[0][1] == pytest.approx(0.91, abs=1e-5)
    assert found[-1][1] == pytest.approx(0.50, abs=1e-5)


async def test_a_script_with_too_few_chunks_is_left_as_it_is(
    database: Database, vectors: VectorSearch
) -> None:
    english, chinese = await english_and_chinese(database, E5_MODEL_ID, MIN_SCRIPT_ROWS - 1)
    kb = await ref(database, "kb")
    found = await vectors.search("alice", [kb], E5_MODEL_ID, QUERY, 20)
    assert found[0] == (english[-1], pytest.approx(0.91, abs=1e-5))
    assert dict(found)[chinese[-1]] == pytest.approx(0.70, abs=1e-5)


async def test_chunks_added_and_removed_later_keep_their_script(
    database: Database, vectors: VectorSearch
) -> None:
    await add_base(database, "alice", "kb", model=E5_MODEL_ID)
    english = await add_document(
        database,
        "alice",
        "kb",
        "en",
        [f"an English passage {n}" for n in range(10)],
        at([0.80 + 0.01 * n for n in range(9)] + [0.91]),
    )
    first = await vectors.search("alice", [await ref(database, "kb")], E5_MODEL_ID, QUERY, 3)
    assert first[0] == (english[-1], pytest.approx(0.91, abs=1e-5))  # one script: cosines
    texts = [f"一段中文内容第{n}段" for n in range(10)]
    cosines = [0.50 + 0.005 * n for n in range(9)] + [0.70]
    chinese = await add_document(database, "alice", "kb", "zh", texts, at(cosines))
    kb = await ref(database, "kb")
    found = await vectors.search("alice", [kb], E5_MODEL_ID, QUERY, 3)  # read as a change
    assert found[0][0] == chinese[-1]
    await database.write(
        lambda conn: conn.execute(kb_documents.delete().where(kb_documents.c.id == "zh"))
    )
    vectors.forget_document("kb", "zh")
    again = await vectors.search("alice", [kb], E5_MODEL_ID, QUERY, 3)
    assert again[0] == (english[-1], pytest.approx(0.91, abs=1e-5))


async def test_migration_0012_labels_the_chunks_already_there(tmp_path: Path) -> None:
    path = tmp_path / "parley.db"
    migrate_to(path, "0011")
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(
            "INSERT INTO knowledge_bases (id, owner, name, description, embedding_model, "
            "chunk_size, chunk_overlap, version, created_at, updated_at) VALUES "
            "('kb', 'alice', 'kb', '', '', 1400, 0, 0, 0, 0)"
        )
        connection.execute(
            "INSERT INTO kb_documents (id, kb_id, owner, filename, size, sha256, status, "
            "chunks_done, created_at, updated_at) VALUES "
            "('doc', 'kb', 'alice', 'a.md', 1, '', 'ready', 0, 0, 0)"
        )
        for n, text in enumerate(["Annual leave is 26 days.", "年假为二十六天。", "Mixed 中 text"]):
            connection.execute(
                "INSERT INTO kb_chunks (document_id, kb_id, owner, ordinal, text, terms, "
                "text_hash, embedding) VALUES ('doc', 'kb', 'alice', ?, ?, ?, '', NULL)",
                (n, text, lexical.index_terms(text)),
            )
    database = Database(Settings(data_dir=tmp_path))
    try:
        await database.migrate()

        def scripts(conn: Connection) -> list[int]:
            rows = conn.execute(select(kb_chunks.c.script).order_by(kb_chunks.c.ordinal))
            return [int(script) for script in rows.scalars()]

        assert await database.read(scripts) == [lexical.LATIN, lexical.CJK, lexical.LATIN]

        # the column was added in place: the words index's triggers still index new rows
        def add_and_count(conn: Connection) -> int:
            conn.exec_driver_sql(
                "INSERT INTO kb_chunks (document_id, kb_id, owner, ordinal, text, terms, "
                "text_hash) VALUES ('doc', 'kb', 'alice', 3, '年假五天', ?, '')",
                (lexical.index_terms("年假五天"),),
            )
            query = "SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH '\"年假\"'"
            return int(conn.exec_driver_sql(query).scalar_one())

        assert await database.write(add_and_count) == 2
    finally:
        await database.dispose()
