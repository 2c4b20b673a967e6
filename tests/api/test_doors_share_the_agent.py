"""Every door reaches the same agent: a request through Anthropic's Messages API or
OpenAI's Responses API that names a knowledge base gets its passages, as one through
Chat Completions does, and its reply carries the citations. A real server (retrieval by
words, so that what is found is certain), the official SDKs, the mock upstream."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.mock_openai import MockOpenAI
from tests.support.server import ParleyServer

GUIDE = b"The zorbulite crystal glows green when copper is near it."
QUESTION = "What makes the zorbulite crystal glow?"


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "none"})
    with ParleyServer(tmp_path_factory.mktemp("doors"), config) as parley:
        httpx.post(f"{parley.url}/v1/knowledge_bases", json={"name": "guide"}).raise_for_status()
        files = [("files", ("guide.txt", GUIDE, "text/plain"))]
        httpx.post(f"{parley.url}/v1/knowledge_bases/guide/documents", files=files)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = httpx.get(f"{parley.url}/v1/knowledge_bases/guide/documents").json()
            if [d["status"] for d in listed["data"]] == ["ready"]:
                break
            time.sleep(0.1)
        yield parley


def system_text(upstream: MockOpenAI) -> str:
    first: dict[str, Any] = upstream.requests[-1]["messages"][0]
    assert first["role"] == "system"
    content = first["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def test_through_anthropics_door(server: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.reset()
    upstream.queue_text("Copper [1].")
    with anthropic.Anthropic(base_url=server.url, api_key="sk-x", max_retries=0) as client:
        message = client.messages.create(
            model="mock/mock-model",
            max_tokens=100,
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"knowledge_bases": ["guide"]},
        )
    assert "glows green when copper is near it" in system_text(upstream)
    citations = (message.model_extra or {})["parley"]["citations"]
    assert [c["title"] for c in citations] == ["guide.txt"]


def test_through_the_responses_door(server: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.reset()
    upstream.queue_text("Copper [1].")
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as client:
        response = client.responses.create(
            model="mock/mock-model", input=QUESTION, extra_body={"knowledge_bases": ["guide"]}
        )
    assert response.output_text == "Copper [1]."
    assert "glows green when copper is near it" in system_text(upstream)
    citations = (response.model_extra or {})["parley"]["citations"]
    assert [c["title"] for c in citations] == ["guide.txt"]
