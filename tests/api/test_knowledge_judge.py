"""``knowledge.judge_model``: a model reads the passages each search found and keeps those
that answer the question, for the search API and in chat (where none answering means the
model is told that no document matched). It fails open: an answer it cannot read, or an
upstream error, leaves the passages. A real server, the mock upstream as the judge, the
official ``openai`` client; retrieval by words, so that what is found is certain."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.knowledge import indexed_base
from tests.support.server import ParleyServer

from parley.conversations.judge import JUDGE_PROMPT, parse
from parley.testing.mock_openai import MockOpenAI

DOCUMENTS = {
    "mineral.txt": "The zorbulite crystal glows green when copper is near it.",
    "glassware.txt": "Crystal glasses must be washed by hand, never in the machine.",
    "garden.txt": "Tomatoes need six hours of sun a day.",
}


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    knowledge = {"embedder": "none", "judge_model": "fast", "min_relative_score": 0}
    config = server_config(upstream, knowledge=knowledge)
    with ParleyServer(tmp_path_factory.mktemp("judge"), config) as parley:
        files = {name: text.encode() for name, text in DOCUMENTS.items()}
        indexed_base(parley.url, "home", files)
        yield parley


def search(server: ParleyServer, query: str) -> list[dict[str, Any]]:
    found = httpx.post(
        f"{server.url}/v1/knowledge_bases/home/search", json={"query": query, "top_k": 5}
    )
    assert found.status_code == 200, found.text
    return list(found.json()["data"])


def judge_prompt(upstream: MockOpenAI) -> str:
    [request] = [r for r in upstream.requests if JUDGE_PROMPT[:40] in str(r["messages"])]
    return str(request["messages"][0]["content"])


def test_only_the_passages_the_judge_names_are_kept(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.reset()
    upstream.queue_text('{"relevant": [2]}')
    found = search(server, "Which crystal glows near copper?")
    prompt = judge_prompt(upstream)
    assert "Question: Which crystal glows near copper?" in prompt
    shown = re.findall(r"^\[(\d)\] (.*)$", prompt, re.MULTILINE)
    assert len(shown) == 2  # both crystal passages were found by words, and shown
    assert [hit["text"] for hit in found] == [shown[1][1]]
    assert [hit["rank"] for hit in found] == [1]
    request = upstream.requests[-1]
    assert request["temperature"] == 0.0


def test_a_judge_naming_none_leaves_nothing_and_the_chat_says_so(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.reset()
    upstream.queue_text('{"relevant": []}')
    assert search(server, "How long does a crystal wedding anniversary last?") == []

    upstream.reset()
    upstream.route_text(JUDGE_PROMPT[:40], '{"relevant": []}')
    upstream.queue_text("No document answers that.")
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "Is crystal a good anniversary gift?"}],
            extra_body={"knowledge_bases": ["home"]},
        )
    chat = [r for r in upstream.requests if JUDGE_PROMPT[:40] not in str(r["messages"])]
    assert "no document matched" in chat[-1]["messages"][0]["content"]
    assert "citations" not in (reply.model_extra or {}).get("parley", {})


@pytest.mark.parametrize("answer", ["both, I think", '{"relevant": "all"}', None])
def test_a_judge_that_cannot_say_leaves_the_passages(
    server: ParleyServer, upstream: MockOpenAI, answer: str | None
) -> None:
    upstream.reset()
    if answer is None:
        upstream.queue_error(500, "judge down")
        upstream.queue_error(500, "judge down")  # in case of a retry
        upstream.queue_error(500, "judge down")
    else:
        upstream.queue_text(answer)
    found = search(server, "Which crystal glows near copper?")
    assert {hit["filename"] for hit in found} == {"mineral.txt", "glassware.txt"}


def test_parse() -> None:
    assert parse('{"relevant": [3, 1, 1]}', 3) == [0, 2]
    assert parse('Sure! {"relevant": [2, 9, 0]} done', 3) == [1]
    assert parse('{"relevant": []}', 3) == []
    assert parse('{"relevant": [true]}', 3) is None
    assert parse('{"relevant": "1"}', 3) is None
    assert parse("[1, 2]", 3) is None
    assert parse("{not json}", 3) is None
    assert parse('I think {so}. {"relevant": [1]} Done {here}.', 3) == [0]
