"""Figure 14, retrieval quality: does knowledge search find the passage that answers a
question, and does it return nothing when no document answers it?

The corpus is the project's own (``quality_data/``): 30 short documents, 20 English and
10 Simplified Chinese, in five groups of near topics (leave, travel expenses, server
operations, cooking, local history) so that shared words mislead; and 70 questions in
``questions.json``, each of a ``kind``:

- ``lexical``: shares content words with its answer;
- ``paraphrase``: shares none (question words like "how" aside);
- ``cross-language``: asked in the other language than its answer's document;
- ``unanswerable``: no document answers it, though documents on near topics exist.

An answer is a document and a short passage of it: a retrieved chunk answers when it is
of that document and holds the passage (whitespace aside).

The run, in-process like figures 11 and 12: a migrated SQLite database in a temporary
folder, Parley's own ``KnowledgeService`` with the embedder the settings name (``auto``:
the local model when installed; ``none``: words only), every document uploaded and
indexed by the real ingestion queue, then each question searched (top ``top_k``) three
ways: ``hybrid`` (``KnowledgeService.search``, what the chat and the API do), ``words``
(``hybrid_search`` without a query vector) and ``vectors`` (``hybrid_search`` with the
vector and no words); the weak-match cuts of the settings apply to each. Per kind and
language: recall@1, recall@k, MRR@k, and how often nothing was returned; for
unanswerable questions the false-citation rate: the share for which anything was
returned (the chat would cite it).

The figure records its configuration (embedder, fusion, cuts, chunking, the corpus's
digest) and, side by side, the last measured configuration before it
(``quality_data/previous.json``, unless this run is the same configuration with the
same results; ``previous_of`` makes that file from a figure).

What does not belong here: the knowledge code measured (``parley.knowledge``); the
speed figures (``knowledge.py``); the report's table (``report.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from parley.knowledge import background
from parley.knowledge.background import Floors
from parley.knowledge.fusion import FUSION
from parley.knowledge.index import MIN_COVERAGE, fetch_chunks, hybrid_search
from parley.knowledge.service import KnowledgeService, build_embedder
from parley.knowledge.types import Embedder, Hit, KbRef
from parley.settings import Settings
from parley.settings.knowledge import KnowledgeSettings
from parley.store.database import Database
from parley.store.knowledge import KnowledgeBase

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

DATA = Path(__file__).with_name("quality_data")
DOCUMENTS = DATA / "documents"
QUESTIONS = DATA / "questions.json"
OFF_TOPIC = DATA / "offtopic.json"
"""Questions on other subjects altogether (``nothing_matches`` was set on these)."""
OFF_TOPIC_HELD_OUT = DATA / "offtopic_holdout.json"
HELD_OUT = DATA / "holdout.json"
"""Questions of the same kinds never used to choose a weight or a threshold: what was
fitted on ``QUESTIONS`` is checked on them (reported apart, not in ``previous.json``)."""
PREVIOUS = DATA / "previous.json"
OWNER = "quality"
KINDS = ("lexical", "paraphrase", "cross-language", "unanswerable", "off-topic")
UNANSWERABLE = ("unanswerable", "off-topic")
"""Kinds no document answers: near topics, and other subjects altogether."""
LANGUAGES = ("en", "zh")
MODES = ("hybrid", "words", "vectors")
INGEST_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class Answer:
    file: str
    passage: str


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    language: str
    kind: str
    question: str
    answers: tuple[Answer, ...]


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    data = orjson.loads(path.read_bytes())
    return [
        Question(
            id=item["id"],
            language=item["language"],
            kind=item["kind"],
            question=item["question"],
            answers=tuple(Answer(a["file"], a["passage"]) for a in item["answers"]),
        )
        for item in data["questions"]
    ]


def document_files(folder: Path = DOCUMENTS) -> list[Path]:
    return sorted(folder.glob("*.md"))


def corpus_digest(folder: Path = DOCUMENTS, questions: Path = QUESTIONS) -> str:
    """SHA-256 of the documents and questions (12 hex digits): runs compare only on the
    same corpus."""
    digest = hashlib.sha256()
    for path in [*document_files(folder), questions]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def answers(question: Question, filename: str, text: str) -> bool:
    """Whether a chunk (its document's file name, its text) answers ``question``."""
    squeezed = _squeeze(text)
    return any(a.file == filename and _squeeze(a.passage) in squeezed for a in question.answers)


# --- metrics --------------------------------------------------------------------------------


def first_relevant(relevant: Sequence[bool]) -> int | None:
    """The 1-based rank of the first relevant result, None when there is none."""
    return next((n for n, hit in enumerate(relevant, 1) if hit), None)


def recall_at(ranks: Sequence[int | None], k: int) -> float:
    """The share of questions whose first relevant result is within the first ``k``."""
    if not ranks:
        return float("nan")
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


def mrr_at(ranks: Sequence[int | None], k: int) -> float:
    """Mean reciprocal rank of the first relevant result, 0 past ``k`` or without one."""
    if not ranks:
        return float("nan")
    return sum(1 / r for r in ranks if r is not None and r <= k) / len(ranks)


def false_citation_rate(returned: Sequence[int]) -> float:
    """For unanswerable questions (how many results each got): the share that got any."""
    if not returned:
        return float("nan")
    return sum(1 for n in returned if n > 0) / len(returned)


def _round(value: float) -> float:
    return round(value, 3)


def group_metrics(
    rows: Sequence[dict[str, Any]], mode: str, *, answerable: bool, k: int
) -> dict[str, Any]:
    """One group's figures for one mode, from the per-question rows of ``run``."""
    returned = [row["returned"][mode] for row in rows]
    if not answerable:
        cited = sum(1 for n in returned if n > 0)
        return {"false_citations": cited, "false_citation_rate": _round(cited / len(rows))}
    ranks = [row["rank"][mode] for row in rows]
    return {
        "recall_at_1": _round(recall_at(ranks, 1)),
        "recall_at_k": _round(recall_at(ranks, k)),
        "mrr_at_k": _round(mrr_at(ranks, k)),
        "nothing_returned": sum(1 for n in returned if n == 0),
    }


def summarise(rows: Sequence[dict[str, Any]], modes: Sequence[str], k: int) -> dict[str, Any]:
    """Per ``kind/language`` group, then ``answerable`` and ``unanswerable`` overall."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for kind in KINDS:
        for language in LANGUAGES:
            chosen = [r for r in rows if r["kind"] == kind and r["language"] == language]
            if chosen:
                groups[f"{kind}/{language}"] = chosen
    groups["answerable"] = [r for r in rows if r["kind"] not in UNANSWERABLE]
    groups["unanswerable"] = [r for r in rows if r["kind"] == "unanswerable"]
    groups["off-topic"] = [r for r in rows if r["kind"] == "off-topic"]
    out: dict[str, Any] = {}
    for name, chosen in groups.items():
        if not chosen:
            continue
        answerable = name.split("/")[0] not in UNANSWERABLE
        entry: dict[str, Any] = {"questions": len(chosen)}
        for mode in modes:
            entry[mode] = group_metrics(chosen, mode, answerable=answerable, k=k)
        out[name] = entry
    return out


# --- the run ----------------------------------------------------------------------------------


async def _pieces(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _ingest(service: KnowledgeService, files: Sequence[Path]) -> KnowledgeBase:
    base = await service.create(OWNER, "quality")
    for path in files:
        await service.upload(OWNER, base, path.name, "text/markdown", _pieces(path.read_bytes()))
    deadline = time.monotonic() + INGEST_TIMEOUT
    while True:
        documents = await service.store.documents(OWNER, base.id, limit=500)
        if all(d.status not in ("queued", "indexing") for d in documents):
            break
        if time.monotonic() > deadline:
            raise TimeoutError("the quality corpus was not indexed in time")
        await asyncio.sleep(0.05)
    failed = [f"{d.filename}: {d.status} {d.error or ''}" for d in documents if d.status != "ready"]
    if failed:
        raise RuntimeError(f"documents not indexed: {failed}")
    return await service.store.get(OWNER, base.id)


async def _chunks(service: KnowledgeService, hits: Sequence[Hit]) -> list[tuple[str, str]]:
    """(file name, text) of the hits' chunks, in rank order."""
    found = await service._db.read(
        lambda conn: fetch_chunks(conn, OWNER, [h.chunk_id for h in hits], ready_only=True)
    )
    return [
        (found[h.chunk_id].filename, found[h.chunk_id].text) for h in hits if h.chunk_id in found
    ]


def _fusion() -> str:
    """How hybrid search fuses, recorded with the figure (``fusion.FUSION``)."""
    return FUSION


async def retrieval_quality(
    knowledge: KnowledgeSettings | None = None, *, top_k: int | None = None
) -> dict[str, Any]:
    """Figure 14: the suite on the project's corpus, with ``knowledge``'s embedder and
    cuts (default settings: the local model when installed)."""
    settings = knowledge or KnowledgeSettings()
    k = top_k or settings.top_k
    questions = load_questions() + load_questions(OFF_TOPIC)
    held_out = load_questions(HELD_OUT) + load_questions(OFF_TOPIC_HELD_OUT)
    files = document_files()
    began = time.perf_counter()
    async with httpx.AsyncClient() as client:
        embedder = build_embedder(settings, client)
        with tempfile.TemporaryDirectory(prefix="parley-bench-quality-") as folder:
            database = Database(Settings(data_dir=Path(folder)))
            await database.migrate()
            service = KnowledgeService(settings, database, Path(folder) / "knowledge", embedder)
            try:
                await service.start()
                base = await _ingest(service, files)
                ingest_seconds = time.perf_counter() - began
                rows, modes = await _search_all(service, base, [*questions, *held_out], k)
                search_seconds = time.perf_counter() - began - ingest_seconds
            finally:
                await service.close()
                await database.dispose()
    model = embedder.model if embedder is not None else "none"
    configuration = {
        "embedder": model,
        "embedder_setting": settings.embedder,
        "base_model": base.embedding_model or "none",
        "dimensions": base.dimensions,
        "fusion": _fusion(),
        "min_similarity": settings.min_similarity,
        "min_relative_score": settings.min_relative_score,
        "nothing_matches": _nothing_matches(settings, model),
        "chunk_size": settings.chunk_size,
        "chunk_overlap": settings.chunk_overlap,
        "top_k": k,
        "corpus": corpus_digest(),
    }
    figure: dict[str, Any] = {
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "configuration": configuration,
        "documents": len(files),
        "chunks": base.chunks,
        "questions_asked": len(questions),
        "held_out_asked": len(held_out),
        "modes": list(modes),
        "ingest_seconds": round(ingest_seconds, 1),
        "search_ms_mean": round(search_seconds / max(1, len(questions) * len(modes)) * 1000, 2),
        "method": (
            "in-process: the corpus uploaded to a fresh knowledge base (real SQLite, the "
            "ingestion queue); each question searched top k: hybrid = KnowledgeService.search, "
            "words = hybrid_search without a query vector, vectors = hybrid_search without "
            "words; the settings' weak-match cuts apply to each"
        ),
        "groups": summarise(rows[: len(questions)], modes, k),
        "held_out": summarise(rows[len(questions) :], modes, k),
        "questions": rows,
    }
    previous = load_previous()
    if previous is not None and (
        not _same_configuration(previous["configuration"], configuration)
        or previous["groups"] != figure["groups"]
    ):
        figure["previous"] = previous
    return figure


async def _search_all(
    service: KnowledgeService, base: KnowledgeBase, questions: Sequence[Question], k: int
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    embedder = service.embedder
    vectors_too = embedder is not None and base.embedding_model == embedder.model
    modes = MODES if vectors_too else ("hybrid", "words")
    kbs = [KbRef(base.id, base.embedding_model, base.version)]
    settings = service.settings
    rows = []
    for question in questions:
        found: dict[str, list[tuple[str, str]]] = {}
        results = await service.search(OWNER, [base], question.question, top_k=k)
        found["hybrid"] = [(r.chunk.filename, r.chunk.text) for r in results]
        vector = None
        if vectors_too:
            assert embedder is not None
            vector = (await embedder.embed([question.question]))[0]
        common: dict[str, Any] = {
            "owner": OWNER,
            "kbs": kbs,
            "top_k": k,
            "min_similarity": settings.min_similarity,
            "min_relative_score": settings.min_relative_score,
            "floors": _floors(settings, embedder, vector),
        }
        words = await hybrid_search(
            service._db,
            service.vectors,
            query=question.question,
            query_vector=None,
            model=None,
            **common,
        )
        found["words"] = await _chunks(service, words)
        best_cosine = None
        if vector is not None:
            assert embedder is not None
            meaning = await hybrid_search(
                service._db,
                service.vectors,
                query="",
                query_vector=vector,
                model=embedder.model,
                **common,
            )
            found["vectors"] = await _chunks(service, meaning)
            nearest = await service.vectors.search(OWNER, kbs, embedder.model, vector, 1)
            best_cosine = round(float(nearest[0][1]), 3) if nearest else None
        rows.append(
            {
                "id": question.id,
                "kind": question.kind,
                "language": question.language,
                "rank": {
                    mode: first_relevant([answers(question, f, t) for f, t in found[mode]])
                    for mode in modes
                },
                "returned": {mode: len(found[mode]) for mode in modes},
                "top_file": {mode: found[mode][0][0] if found[mode] else None for mode in modes},
                "best_cosine": best_cosine,
            }
        )
    return rows, modes


def _nothing_matches(settings: KnowledgeSettings, model: str) -> str:
    """How "nothing matches" is decided, in words (figure 14 records it)."""
    margin = background.MARGINS.get(model)
    if not settings.nothing_matches or margin is None:
        return "off"
    return (
        f"a chunk's cosine >= the mean of the question's {background.TOP} best cosines with "
        f"generic passages of its script {margin:+.2f}; by words alone, coverage >= "
        f"{MIN_COVERAGE}"
    )


def _floors(
    settings: KnowledgeSettings, embedder: Embedder | None, vector: Vectors | None
) -> Floors | None:
    """What ``KnowledgeService.search`` cuts at (``knowledge.nothing_matches``)."""
    if vector is None or embedder is None or not settings.nothing_matches:
        return None
    return background.floors(embedder.model, vector)


def load_previous(path: Path = PREVIOUS) -> dict[str, Any] | None:
    """The configuration measured before (its ``configuration`` and ``groups``)."""
    if not path.is_file():
        return None
    data: dict[str, Any] = orjson.loads(path.read_bytes())
    return data


def _same_configuration(one: dict[str, Any], other: dict[str, Any]) -> bool:
    keys = ("embedder", "fusion", "min_similarity", "min_relative_score", "top_k", "corpus")
    return all(one.get(key) == other.get(key) for key in keys)


def previous_of(figure: dict[str, Any]) -> dict[str, Any]:
    """What ``previous.json`` holds for this figure: its configuration and groups (to be
    put beside the next configuration's run)."""
    return {
        "measured": figure["measured"],
        "configuration": figure["configuration"],
        "groups": figure["groups"],
    }


# --- the report -------------------------------------------------------------------------------

TARGET_RECALL = 0.85
"""Recall@k of Chinese paraphrases and of cross-language questions (issue 21)."""
TARGET_FALSE_CITATIONS = 0.1
_LABELS = {
    "lexical/en": "lexical, English",
    "lexical/zh": "lexical, Chinese",
    "paraphrase/en": "paraphrase, English",
    "paraphrase/zh": "paraphrase, Chinese",
    "cross-language/en": "cross-language, asked in English (Chinese answers)",
    "cross-language/zh": "cross-language, asked in Chinese (English answers)",
    "answerable": "**all answerable**",
    "unanswerable/en": "unanswerable, English: false citations",
    "unanswerable/zh": "unanswerable, Chinese: false citations",
    "unanswerable": "**all unanswerable: false citations**",
    "off-topic/en": "off-topic, English: false citations",
    "off-topic/zh": "off-topic, Chinese: false citations",
    "off-topic": "**all off-topic: false citations**",
}


def _cell(entry: dict[str, Any] | None, mode: str) -> str:
    if not entry or mode not in entry:
        return "-"
    values = entry[mode]
    if "false_citations" in values:
        return f"{values['false_citations']} of {entry['questions']}"
    return f"{values['recall_at_1']:.2f} / {values['recall_at_k']:.2f} / {values['mrr_at_k']:.2f}"


def verdict(figure: dict[str, Any]) -> bool | None:
    """Issue 21's bar: hybrid at least as good as the better half on every kind (recall@k
    and MRR), Chinese paraphrase and cross-language recall@k >= 0.85, false citations
    <= 1 in 10. None without vectors (nothing to fuse)."""
    groups = figure["groups"]
    if "vectors" not in figure["modes"]:
        return None
    for name, entry in groups.items():
        if name.split("/")[0] in UNANSWERABLE:
            continue
        for key in ("recall_at_k", "mrr_at_k"):
            best = max(entry["words"][key], entry["vectors"][key])
            if entry["hybrid"][key] < best - 1e-9:
                return False
    for name in ("paraphrase/zh", "cross-language/en", "cross-language/zh"):
        if name in groups and groups[name]["hybrid"]["recall_at_k"] < TARGET_RECALL:
            return False
    rate = groups.get("unanswerable", {}).get("hybrid", {}).get("false_citation_rate")
    return rate is None or rate <= TARGET_FALSE_CITATIONS


def quality_rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The table's row for figure 14 (none when it was not measured)."""
    figure = figures.get("14_retrieval_quality")
    if not figure:
        return []
    groups = figure["groups"]
    k = figure["configuration"]["top_k"]
    recalls = " / ".join(
        f"{groups['answerable'][mode]['recall_at_k']:.2f}" for mode in figure["modes"]
    )
    cited = groups.get("unanswerable", {}).get("hybrid")
    false = f"; false citations {cited['false_citations']} of {groups['unanswerable']['questions']}"
    off = groups.get("off-topic", {}).get("hybrid")
    if cited and off:
        false += f" (off-topic {off['false_citations']} of {groups['off-topic']['questions']})"
    ok = verdict(figure)
    return [
        (
            f"14. retrieval quality, recall@{k} of answerable questions "
            f"({' / '.join(figure['modes'])}), {figure['configuration']['embedder']}",
            recalls + (false if cited else ""),
            "-",
            "-",
            "hybrid >= its better half; zh paraphrase, cross-language >= 0.85; "
            "false citations <= 1 in 10",
            "-" if ok is None else ("met" if ok else "**missed**"),
        )
    ]


def quality_markdown(report: dict[str, Any]) -> list[str]:
    """The detail of figure 14 (empty when it was not measured)."""
    figure = report["figures"].get("14_retrieval_quality")
    if not figure:
        return []
    config = figure["configuration"]
    k = config["top_k"]
    previous = figure.get("previous")
    head = "| questions | n | hybrid | words only | vectors only |"
    rule = "|---|---|---|---|---|"
    if previous:
        head += " before: hybrid | before: words | before: vectors |"
        rule += "---|---|---|"
    lines = [
        "",
        "### 14. Retrieval quality (the project's own corpus)",
        "",
        f"{figure['documents']} documents (English and Chinese, near topics), "
        f"{figure['chunks']} chunks, {figure['questions_asked']} questions "
        f"(`src/parley/bench/quality_data/`, corpus {config['corpus']}). "
        f"Recall@1 / recall@{k} / MRR@{k}; unanswerable and off-topic: questions for which "
        f"anything was returned (the chat would cite it). {figure['method']}.",
        "",
        f"Configuration: embedder `{config['embedder']}`, fusion {config['fusion']}, "
        f"cuts: cosine >= {config['min_similarity']}, words >= "
        f"{config['min_relative_score']} of the best; nothing matches: "
        f"{config.get('nothing_matches', 'off')}; chunks of {config['chunk_size']} "
        f"characters; indexing {figure['ingest_seconds']} s, "
        f"{figure['search_ms_mean']} ms a search.",
    ]
    if previous:
        before = previous["configuration"]
        same = " (the same corpus)" if before.get("corpus") == config["corpus"] else ""
        lines += [
            "",
            f"Previous: embedder `{before['embedder']}`, fusion {before['fusion']}, cuts "
            f"{before['min_similarity']} / {before['min_relative_score']}, measured "
            f"{previous.get('measured', '?')}{same}.",
        ]
    lines += ["", head, rule]
    for name, label in _LABELS.items():
        entry = figure["groups"].get(name)
        if entry is None:
            continue
        cells = [_cell(entry, mode) for mode in MODES]
        row = f"| {label} | {entry['questions']} | {' | '.join(cells)} |"
        if previous:
            before_entry = previous["groups"].get(name)
            row += " " + " | ".join(_cell(before_entry, mode) for mode in MODES) + " |"
        lines.append(row)
    held_out = figure.get("held_out")
    if held_out:
        lines += [
            "",
            f"Held out ({figure['held_out_asked']} more questions of the same kinds in "
            "`holdout.json` and `offtopic_holdout.json`, never used to choose a weight or "
            "a threshold):",
            "",
            "| questions | n | hybrid | words only | vectors only |",
            "|---|---|---|---|---|",
        ]
        for name, label in _LABELS.items():
            entry = held_out.get(name)
            if entry is not None:
                cells = [_cell(entry, mode) for mode in MODES]
                lines.append(f"| {label} | {entry['questions']} | {' | '.join(cells)} |")
    return lines
