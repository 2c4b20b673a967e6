"""The synthetic corpus of the knowledge figures (11 and 12, in ``knowledge.py``), and the
seeding of the databases they measure.

The corpus is the same in every run (fixed seeds): English-like text drawn from a fixed
word list with a Zipf-like distribution of word frequencies (a few hundred real English
words, most frequent first, then made-up words for the long tail), cut into chunks of
about 1,400 characters, 50 chunks per document; and random unit-length 384-d float32
vectors (the fake embedder). Queries read like questions: a few common words ("the",
"what") and a few rarer content words of the same distribution.

Here: the word lists, the vocabulary (``corpus``), chunk texts (``chunk_texts``), vectors
(``unit_vectors``) and queries (``questions``); and the seeding of a database: a
temporary migrated SQLite database (``bench_database``), a knowledge base
(``add_base``), documents of chunks written as ingestion writes them, returning the
seconds of each chunk-writing transaction (``fill_base``), and a base's version
(``base_version``).

What does not belong here: running and timing the figures' queries and deletes, the
figures' results, and their rows and Markdown in the report (``knowledge.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, select

from parley.knowledge.index import ChunkRow, chunk_rows, insert_chunks, insert_rows
from parley.knowledge.types import Chunk
from parley.settings import Settings
from parley.store.database import Database
from parley.store.schema import kb_documents, knowledge_bases

DIMENSIONS = 384
CHUNK_CHARS = 1400
CHUNKS_PER_DOCUMENT = 50

_COMMON = """
the of and to a in is that for it as was with be by on not he this are or his from at
which but have an they you were her she there been one all we their has would when if
so no will more can out up who them some into than its only other time could new two
about also may then do any like these first said my made over did down after most
where now way people years should very must each through because between before
under while such those well same both how many what again against during without
within every our your us much own however since until often still here why
system data report contract service user customer policy section page account
payment support process project team product market price order request access
network server database document file version change update release security
password login email message address number value level rate cost budget plan
schedule meeting review approval manager employee staff office company business
client partner vendor supplier invoice tax income expense revenue profit loss
quarter year month week day date period term notice agreement clause party law
court case claim right liability insurance risk safety health training quality
standard requirement specification design test result error issue problem
solution feature option setting configuration install upgrade backup storage
memory disk traffic load performance response limit threshold alert
monitor log event record history table field column row index query search key
token model dataset evaluation metric accuracy learning patient
treatment dose clinical trial study research method analysis figure sample
control group effect increase decrease average total annual monthly daily weekly
north south east west city region country state local national international
water energy power fuel carbon emission building room floor door window light
"""
"""The most frequent English words, roughly most frequent first, then common words of
the documents people put in knowledge bases."""
_MADE = """
ka ri to mu ne sa lo vi de pa ra ti mo ze ku la be no fi da ta ro si me gu
ter lon mar vel dor pin sol tra cor bel fen gar hul jas kel lim nor pol quin
ras sen tor ul ven wil yar zan bri cla dre fro gla kri plo sto
"""
"""Syllables of the made-up words of the long tail."""


@dataclass(frozen=True, slots=True)
class Corpus:
    """A vocabulary and its word probabilities (Zipf-Mandelbrot, exponent 1.0)."""

    words: npt.NDArray[np.object_]
    probabilities: npt.NDArray[np.float64]


def corpus(vocabulary: int = 40_000) -> Corpus:
    syllables = _MADE.split()
    made = (
        "".join(parts)
        for length in (2, 3, 4)
        for parts in itertools.product(syllables, repeat=length)
    )
    words = list(dict.fromkeys(_COMMON.split()))
    seen = set(words)
    for word in made:
        if len(words) >= vocabulary:
            break
        if word not in seen:
            seen.add(word)
            words.append(word)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    weights = 1.0 / (ranks + 2.7)
    return Corpus(np.array(words, dtype=object), weights / weights.sum())


def chunk_texts(
    source: Corpus, count: int, *, seed: int = 11, chars: int = CHUNK_CHARS
) -> list[str]:
    """``count`` chunks of about ``chars`` characters: sentences of 6 to 20 words."""
    rng = np.random.default_rng(seed)
    words_per_chunk = chars // 5 + 40  # more than enough: average word ~4.6 chars + space
    texts: list[str] = []
    block = 1000
    for start in range(0, count, block):
        n = min(block, count - start)
        drawn = rng.choice(len(source.words), size=(n, words_per_chunk), p=source.probabilities)
        lengths = rng.integers(6, 21, size=(n, words_per_chunk // 6 + 1))
        for row, sentence_lengths in zip(drawn, lengths, strict=True):
            tokens = source.words[row].tolist()
            sentences: list[str] = []
            size = 0
            position = 0
            for length in sentence_lengths.tolist():
                part = tokens[position : position + length]
                position += length
                if not part:
                    break
                sentence = " ".join(part)
                sentence = sentence[0].upper() + sentence[1:] + "."
                if size + len(sentence) + 1 > chars:
                    break
                sentences.append(sentence)
                size += len(sentence) + 1
            texts.append(" ".join(sentences))
    return texts


def unit_vectors(
    count: int, *, seed: int = 7, dimensions: int = DIMENSIONS
) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((count, dimensions), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def questions(source: Corpus, count: int, *, seed: int = 5) -> list[str]:
    """Question-like queries: 3 to 5 common words and 2 to 4 rarer content words."""
    rng = np.random.default_rng(seed)
    common = source.words[:60]
    rare_p = source.probabilities[100:] / source.probabilities[100:].sum()
    out = []
    for _ in range(count):
        head = rng.choice(common, size=int(rng.integers(3, 6))).tolist()
        tail = source.words[100 + rng.choice(len(rare_p), size=int(rng.integers(2, 5)), p=rare_p)]
        words = head[:2] + tail.tolist() + head[2:]
        out.append(" ".join(words).capitalize() + "?")
    return out


# --- building a corpus into a database ------------------------------------------------------

OWNER = "bench"
OTHER = "bench-other"
MODEL = "fake-384"


@contextlib.asynccontextmanager
async def bench_database() -> AsyncIterator[Database]:
    """A migrated database in a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="parley-bench-kb-") as folder:
        database = Database(Settings(data_dir=Path(folder)))
        await database.migrate()
        try:
            yield database
        finally:
            await database.dispose()


async def add_base(database: Database, owner: str, kb_id: str) -> None:
    """An empty knowledge base ``kb_id`` of ``owner``, for the fake 384-d model."""
    now = time.time()

    def transaction(conn: Connection) -> None:
        conn.execute(
            knowledge_bases.insert().values(
                id=kb_id,
                owner=owner,
                name=kb_id,
                description="",
                embedding_model=MODEL,
                dimensions=DIMENSIONS,
                chunk_size=CHUNK_CHARS,
                chunk_overlap=0,
                version=0,
                created_at=now,
                updated_at=now,
            )
        )

    await database.write(transaction)


async def fill_base(
    database: Database,
    *,
    owner: str,
    kb_id: str,
    texts: list[str],
    vectors: npt.NDArray[np.float32],
    batch: int,
    per_document: int = CHUNKS_PER_DOCUMENT,
    prepared: bool = False,
) -> tuple[list[float], float]:
    """Documents of ``per_document`` chunks, written ``batch`` chunks per transaction
    (``insert_chunks``; with ``prepared``, ``chunk_rows`` first, then ``insert_rows`` in
    the transaction), each then marked ready (the base's version bumped). The seconds of
    each chunk-writing transaction, and the seconds spent in ``chunk_rows``."""
    spent: list[float] = []
    preparing = 0.0
    for start in range(0, len(texts), per_document):
        document_id = f"{kb_id}-doc{start // per_document}"

        def document(conn: Connection, d: str = document_id, at: float = time.time()) -> None:
            conn.execute(
                kb_documents.insert().values(
                    id=d,
                    kb_id=kb_id,
                    owner=owner,
                    filename=f"{d}.txt",
                    size=0,
                    sha256="",
                    status="indexing",
                    chunks_done=0,
                    created_at=at,
                    updated_at=at,
                )
            )

        await database.write(document)
        end = min(len(texts), start + per_document)
        for first in range(start, end, batch):
            last = min(end, first + batch)
            chunks = [Chunk(n - start, texts[n]) for n in range(first, last)]
            part = vectors[first:last]
            write: Callable[[Connection], None]
            if prepared:
                began = time.perf_counter()
                rows = chunk_rows(
                    owner=owner, kb_id=kb_id, document_id=document_id, chunks=chunks, vectors=part
                )
                preparing += time.perf_counter() - began

                def write(conn: Connection, r: list[ChunkRow] = rows) -> None:
                    insert_rows(conn, r)

            else:

                def write(
                    conn: Connection, c: list[Chunk] = chunks, v: Any = part, d: str = document_id
                ) -> None:
                    insert_chunks(
                        conn, owner=owner, kb_id=kb_id, document_id=d, chunks=c, vectors=v
                    )

            began = time.perf_counter()
            await database.write(write)
            spent.append(time.perf_counter() - began)

        def ready(conn: Connection, d: str = document_id) -> None:
            conn.execute(kb_documents.update().where(kb_documents.c.id == d).values(status="ready"))
            conn.execute(
                knowledge_bases.update()
                .where(knowledge_bases.c.id == kb_id)
                .values(version=knowledge_bases.c.version + 1)
            )

        await database.write(ready)
    return spent, preparing


async def base_version(database: Database, kb_id: str) -> int:
    """The version of knowledge base ``kb_id`` (``fill_base`` bumps it per document)."""
    return await database.read(
        lambda conn: int(
            conn.execute(
                select(knowledge_bases.c.version).where(knowledge_bases.c.id == kb_id)
            ).scalar_one()
        )
    )
