"""Query stop words (``knowledge/stopwords.py``) and ``lexical.content_terms``: what a
knowledge search asks the lexical index for."""

from __future__ import annotations

from parley.knowledge import lexical, stopwords
from parley.knowledge.lexical import content_terms, query_terms


def test_english_function_words_are_dropped() -> None:
    assert content_terms("How many days of annual leave does a full-time employee get?") == [
        "days",
        "annual",
        "leave",
        "full",
        "time",
        "employee",
        "get",
    ]
    # contractions split into stop words too; content words such as "long" stay
    assert content_terms("Why doesn't the backup run for long?") == ["backup", "run", "long"]
    # the same on the general (non-ASCII) path
    assert content_terms("What does the café serve?") == ["café", "serve"]


def test_chinese_stop_words_split_the_run_before_it_is_cut_into_pairs() -> None:
    # 有多少个 -> 多少 and 个 go; no pair straddles them (有多, 少个, 个工 are not asked)
    assert query_terms("婚假有多少个工作日？") == [
        "婚假",
        "假有",
        "有多",
        "多少",
        "少个",
        "个工",
        "工作",
        "作日",
    ]
    assert content_terms("婚假有多少个工作日？") == ["婚假", "假有", "工作", "作日"]
    # 于 is not a stop word, 哪一 is; the lone 年 left after it is not a term
    assert content_terms("永宁桥建于哪一年？") == ["永宁", "宁桥", "桥建", "建于"]
    # longest match first: 为什么 as a whole, not 为 + 什么
    assert stopwords.split_chinese("茶行为什么败落") == ["茶行", "败落"]
    assert stopwords.split_chinese("的") == []
    assert stopwords.split_chinese("知识库") == ["知识库"]
    # Chinese and English in one query
    assert content_terms("什么是 the Wend Valley 线路") == ["wend", "valley", "线路"]


def test_a_query_of_stop_words_only_keeps_its_words() -> None:
    assert content_terms("what is the") == ["what", "is", "the"]
    assert content_terms("What is it?") == query_terms("What is it?") == ["what", "is", "it"]
    assert content_terms("是什么") == query_terms("是什么") == ["是什", "什么"]
    assert content_terms("的") == ["的"]
    assert content_terms("") == []
    assert content_terms("?!") == []


def test_only_queries_are_filtered() -> None:
    # the index keeps every term: a list changed in stopwords.py needs no re-indexing
    assert lexical.index_terms("How does the 知识库 work") == "how does the 知识 识库 work"
    assert "多少" in lexical.index_terms("有多少个")


def test_the_lists_hold_function_words_only() -> None:
    assert {"the", "how", "does", "what", "of"} <= stopwords.ENGLISH
    assert {"的", "了", "吗", "什么", "多少", "怎么"} <= stopwords.CHINESE
    # words that are sometimes the point of a question stay searchable
    assert not {"long", "leave", "year", "days", "time"} & stopwords.ENGLISH
    assert not {"有", "到", "过", "地", "时间"} & stopwords.CHINESE
    assert all(w == w.lower() and len(w) >= 2 for w in stopwords.ENGLISH)
