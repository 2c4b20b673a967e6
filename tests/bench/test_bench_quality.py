"""Figure 14, retrieval quality (``parley.bench.quality``): the metrics on hand-made
rankings, the integrity of the corpus and its questions, and one run on the real corpus
by words only (no embedding model: seconds).

The quality itself is judged from ``parley bench`` (the default embedder), never here:
only what words alone must find is checked.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from parley.bench.quality import (
    DOCUMENTS,
    HELD_OUT,
    KINDS,
    OFF_TOPIC,
    OFF_TOPIC_HELD_OUT,
    PREVIOUS,
    QUESTIONS,
    answers,
    corpus_digest,
    document_files,
    false_citation_rate,
    first_relevant,
    group_metrics,
    load_questions,
    mrr_at,
    quality_markdown,
    quality_rows,
    recall_at,
    retrieval_quality,
    summarise,
    verdict,
)
from parley.bench.report import rows
from parley.knowledge import lexical
from parley.settings.knowledge import KnowledgeSettings

DECLARED = {
    ("lexical", "en"): 12,
    ("lexical", "zh"): 6,
    ("paraphrase", "en"): 20,
    ("paraphrase", "zh"): 10,
    ("cross-language", "en"): 6,
    ("cross-language", "zh"): 6,
    ("unanswerable", "en"): 6,
    ("unanswerable", "zh"): 4,
}
DECLARED_HELD_OUT = {
    ("paraphrase", "en"): 6,
    ("paraphrase", "zh"): 6,
    ("cross-language", "en"): 6,
    ("cross-language", "zh"): 6,
    ("unanswerable", "en"): 9,
    ("unanswerable", "zh"): 7,
}
_QUESTION_WORDS = (
    "a an the of to in on for at by with from and or but if is are was were be been do does "
    "did i my me we our you your it its this that there what which who whom when where why "
    "how many much long often far can could may might should must will would get have has "
    "any some all up into over out about than then so not no as per"
)
QUESTION_WORDS = set(_QUESTION_WORDS.split())
"""Words a paraphrase may share with its answer's document (they say nothing of it)."""
CHINESE_QUESTION_BIGRAMS = {"多少", "什么", "怎么", "可以", "需要", "时候", "哪一", "一年", "几天"}
_CJK = re.compile(r"[\u4e00-\u9fff]")


# --- the metrics --------------------------------------------------------------------------


def test_first_relevant() -> None:
    assert first_relevant([False, False, True, True]) == 3
    assert first_relevant([True]) == 1
    assert first_relevant([False, False]) is None
    assert first_relevant([]) is None


def test_recall_and_mrr_on_hand_made_ranks() -> None:
    ranks = [1, 2, None, 7, 6]
    assert recall_at(ranks, 1) == 1 / 5
    assert recall_at(ranks, 6) == 3 / 5
    assert recall_at(ranks, 10) == 4 / 5
    assert mrr_at(ranks, 6) == pytest.approx((1 + 1 / 2 + 1 / 6) / 5)
    assert mrr_at(ranks, 10) == pytest.approx((1 + 1 / 2 + 1 / 6 + 1 / 7) / 5)
    assert mrr_at([3], 2) == 0.0
    assert math.isnan(recall_at([], 6))
    assert math.isnan(mrr_at([], 6))


def test_false_citation_rate() -> None:
    assert false_citation_rate([0, 0, 6, 1]) == 0.5
    assert false_citation_rate([0, 0]) == 0.0
    assert math.isnan(false_citation_rate([]))


def test_an_answer_needs_its_file_and_its_passage() -> None:
    [question] = [q for q in load_questions() if q.id == "en-lex-05"]
    text = "In London, Paris, Zurich and New York the cap is 210 euros\nper night, because"
    assert answers(question, "travel-hotels.md", text)  # whitespace aside
    assert not answers(question, "travel-flights.md", text)  # another document
    assert not answers(question, "travel-hotels.md", "The hotel cap is 140 euros per night")


def _row(kind: str, language: str, hybrid: int | None, words: int | None, n: int) -> dict[str, Any]:
    return {
        "kind": kind,
        "language": language,
        "rank": {"hybrid": hybrid, "words": words},
        "returned": {"hybrid": n, "words": n},
    }


def test_groups_are_summarised_per_kind_and_language() -> None:
    rows_ = [
        _row("lexical", "en", 1, 1, 6),
        _row("lexical", "en", 3, None, 6),
        _row("paraphrase", "zh", None, None, 0),
        _row("unanswerable", "en", None, None, 6),
        _row("unanswerable", "zh", None, None, 0),
    ]
    groups = summarise(rows_, ("hybrid", "words"), 6)
    assert list(groups) == [
        "lexical/en",
        "paraphrase/zh",
        "unanswerable/en",
        "unanswerable/zh",
        "answerable",
        "unanswerable",
    ]
    assert groups["lexical/en"]["hybrid"] == {
        "recall_at_1": 0.5,
        "recall_at_k": 1.0,
        "mrr_at_k": round((1 + 1 / 3) / 2, 3),
        "nothing_returned": 0,
    }
    assert groups["lexical/en"]["words"]["recall_at_k"] == 0.5
    assert groups["answerable"]["questions"] == 3
    assert groups["answerable"]["hybrid"]["recall_at_k"] == round(2 / 3, 3)
    assert groups["answerable"]["hybrid"]["nothing_returned"] == 1
    assert groups["unanswerable"]["hybrid"] == {"false_citations": 1, "false_citation_rate": 0.5}
    assert group_metrics(rows_[3:4], "words", answerable=False, k=6)["false_citations"] == 1


def test_the_verdict_is_issue_21s_bar() -> None:
    def entry(hybrid: float, words: float, vectors: float) -> dict[str, Any]:
        def one(r: float) -> dict[str, float]:
            return {"recall_at_1": r, "recall_at_k": r, "mrr_at_k": r}

        return {"questions": 5, "hybrid": one(hybrid), "words": one(words), "vectors": one(vectors)}

    def unanswerable(rate: float) -> dict[str, Any]:
        return {
            "questions": 10,
            "hybrid": {"false_citations": 10 * rate, "false_citation_rate": rate},
        }

    figure: dict[str, Any] = {
        "modes": ["hybrid", "words", "vectors"],
        "groups": {
            "lexical/en": entry(1.0, 1.0, 0.9),
            "paraphrase/zh": entry(0.9, 0.1, 0.9),
            "cross-language/zh": entry(0.9, 0.0, 0.85),
            "unanswerable": unanswerable(0.1),
        },
    }
    assert verdict(figure) is True
    figure["groups"]["lexical/en"] = entry(0.95, 1.0, 0.9)  # worse than words alone
    assert verdict(figure) is False
    figure["groups"]["lexical/en"] = entry(1.0, 1.0, 0.9)
    figure["groups"]["unanswerable"] = unanswerable(0.2)
    assert verdict(figure) is False
    figure["groups"]["unanswerable"] = unanswerable(0.0)
    figure["groups"]["cross-language/zh"] = entry(0.8, 0.0, 0.8)
    assert verdict(figure) is False
    assert verdict({"modes": ["hybrid", "words"], "groups": {}}) is None


# --- the data -----------------------------------------------------------------------------


def test_the_corpus() -> None:
    files = document_files()
    assert len(files) == 30
    chinese = [f for f in files if _CJK.search(f.read_text())]
    assert len(chinese) == 10
    assert all(f.stem.endswith("-zh") for f in chinese)
    for path in files:
        text = path.read_text()
        assert text.startswith("# "), path.name
        shortest = 150 if path in chinese else 400  # a few paragraphs
        assert shortest <= len(text) <= 1_400, path.name
    assert re.fullmatch(r"[0-9a-f]{12}", corpus_digest())


@pytest.mark.parametrize(
    ("path", "declared"), [(QUESTIONS, DECLARED), (HELD_OUT, DECLARED_HELD_OUT)]
)
def test_the_questions(path: Path, declared: dict[tuple[str, str], int]) -> None:
    raw = orjson.loads(path.read_bytes())["questions"]
    assert all(set(item) == {"id", "language", "kind", "question", "answers"} for item in raw)
    questions = load_questions(path)
    assert len({q.id for q in questions}) == len(questions) == sum(declared.values())
    assert len({q.question for q in questions}) == len(questions)
    assert Counter((q.kind, q.language) for q in questions) == declared
    assert {q.kind for q in questions} <= set(KINDS)
    names = {path.name for path in document_files()}
    for question in questions:
        chinese = bool(_CJK.search(question.question))
        assert chinese == (question.language == "zh"), question.id
        if question.kind == "unanswerable":
            assert question.answers == (), question.id
            continue
        assert question.answers, question.id
        for answer in question.answers:
            assert answer.file in names, question.id
            document = re.sub(r"\s+", " ", (DOCUMENTS / answer.file).read_text())
            assert document.count(re.sub(r"\s+", " ", answer.passage)) == 1, question.id
            in_chinese = answer.file.endswith("-zh.md")
            if question.kind == "cross-language":
                assert in_chinese != chinese, question.id
            else:
                assert in_chinese == chinese, question.id


@pytest.mark.parametrize(("path", "count"), [(OFF_TOPIC, 25), (OFF_TOPIC_HELD_OUT, 30)])
def test_the_off_topic_questions(path: Path, count: int) -> None:
    questions = load_questions(path)
    assert len({q.id for q in questions}) == len({q.question for q in questions}) == count
    assert {q.kind for q in questions} == {"off-topic"}
    assert all(q.answers == () for q in questions)
    for question in questions:
        assert bool(_CJK.search(question.question)) == (question.language == "zh"), question.id


def test_the_held_out_questions_are_new() -> None:
    fitted = load_questions() + load_questions(OFF_TOPIC)
    held_out = load_questions(HELD_OUT) + load_questions(OFF_TOPIC_HELD_OUT)
    assert not {q.id for q in fitted} & {q.id for q in held_out}
    assert not {q.question for q in fitted} & {q.question for q in held_out}
    answered = {(a.file, a.passage) for q in fitted for a in q.answers}
    assert not answered & {(a.file, a.passage) for q in held_out for a in q.answers}


def test_paraphrases_share_no_content_word_with_their_answer() -> None:
    for question in [*load_questions(), *load_questions(HELD_OUT)]:
        if question.kind != "paraphrase":
            continue
        [answer] = question.answers
        document = set(lexical.index_terms((DOCUMENTS / answer.file).read_text()).split())
        asked = set(lexical.query_terms(question.question))
        shared = asked & document - QUESTION_WORDS - CHINESE_QUESTION_BIGRAMS
        assert not shared, (question.id, shared)


def test_lexical_questions_share_content_words_with_their_answer() -> None:
    for question in load_questions():
        if question.kind != "lexical":
            continue
        [answer] = question.answers
        document = set(lexical.index_terms((DOCUMENTS / answer.file).read_text()).split())
        asked = set(lexical.query_terms(question.question))
        assert len(asked & document - QUESTION_WORDS - CHINESE_QUESTION_BIGRAMS) >= 2, question.id


def test_the_previous_configuration_is_a_figure_of_the_same_shape() -> None:
    if not PREVIOUS.is_file():
        pytest.skip("no previous configuration recorded")
    previous = orjson.loads(PREVIOUS.read_bytes())
    assert {"embedder", "fusion", "top_k", "corpus"} <= set(previous["configuration"])
    assert {"answerable", "unanswerable", "lexical/en"} <= set(previous["groups"])


# --- a run --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_run_by_words_only_on_the_real_corpus(tmp_path: Path) -> None:
    figure = await retrieval_quality(KnowledgeSettings(embedder="none"))
    config = figure["configuration"]
    assert config["embedder"] == "none"
    assert config["top_k"] == 6
    assert config["corpus"] == corpus_digest()
    assert figure["modes"] == ["hybrid", "words"]  # no vectors to search by
    assert figure["documents"] == 30
    assert figure["chunks"] >= 30
    assert len(figure["questions"]) == 165  # 70 and 25 off-topic; 40 and 30 held out
    assert figure["held_out"]["answerable"]["questions"] == 24
    assert figure["held_out"]["unanswerable"]["questions"] == 16
    assert figure["held_out"]["off-topic"]["questions"] == 30
    groups = figure["groups"]
    assert set(groups) == {f"{k}/{lang}" for k, lang in DECLARED} | {
        "answerable",
        "unanswerable",
        "off-topic/en",
        "off-topic/zh",
        "off-topic",
    }
    assert config["nothing_matches"] == "off"  # no embedder: no floors
    assert groups["answerable"]["questions"] == 60
    # what words alone must find
    for name in ("lexical/en", "lexical/zh"):
        assert groups[name]["words"]["recall_at_k"] >= 0.8, name
        assert groups[name]["hybrid"] == groups[name]["words"]  # nothing else to fuse
    for name in ("cross-language/en", "cross-language/zh"):
        assert groups[name]["words"]["recall_at_k"] == 0.0, name  # no shared words
    assert groups["paraphrase/en"]["words"]["recall_at_k"] < 0.5
    assert 0 <= groups["unanswerable"]["words"]["false_citation_rate"] <= 1
    # the report: a row in the table and the detail
    report = {"figures": {"14_retrieval_quality": figure}}
    [row] = quality_rows(report["figures"])
    assert row[0].startswith("14. retrieval quality")
    assert row[-1] == "-"
    lines = quality_markdown(report)
    assert any(line.startswith("| lexical, English | 12 |") for line in lines)
    assert any(line.startswith("Held out (70 more questions") for line in lines)
    assert any(line.startswith("| **all off-topic: false citations** | 25 |") for line in lines)
    assert any(line.startswith("| paraphrase, Chinese | 6 |") for line in lines)  # held out
    assert any("false citations" in line for line in lines)
    assert row in rows({"figures": report["figures"]})
    orjson.dumps(figure)  # JSON-able


@pytest.mark.anyio
async def test_running_figure_14_alone_twice_into_one_folder(tmp_path: Path) -> None:
    from parley.bench.run import run_quality

    settings = KnowledgeSettings(embedder="none")
    first = await run_quality(tmp_path, settings)
    second = await run_quality(tmp_path, settings)  # over its own report: no other figures
    assert first["profile"] == second["profile"] == "quality"
    assert list(second["figures"]) == ["14_retrieval_quality"]
    assert "| lexical, English | 12 |" in (tmp_path / "bench.md").read_text()
