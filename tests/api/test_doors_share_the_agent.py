"""Every door reaches the same agent: a request through Anthropic's Messages API or
OpenAI's Responses API that names a knowledge base gets its passages, as one through
Chat Completions does, and its reply carries the citations; a server tool runs; a call
that needs a person's approval waits for it, and the approval resumes the turn. A real
server (retrieval by words, so that what is found is certain), the official SDKs, the mock
upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.knowledge import indexed_base
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

GUIDE = b"The zorbulite crystal glows green when copper is near it."
QUESTION = "What makes the zorbulite crystal glow?"


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        knowledge={"embedder": "none"},
        tools={"approval": {"workspace_write": "ask"}, "approval_ttl_seconds": 60},
    )
    with ParleyServer(tmp_path_factory.mktemp("doors"), config) as parley:
        indexed_base(parley.url, "guide", {"guide.txt": GUIDE})
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


def test_the_agent_runs_a_server_tool_behind_each_door(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    """A tool named by its name is Parley's own: the agent runs it and asks the model
    again, and the client gets the answer (not the call)."""
    upstream.reset()
    upstream.queue_tool_calls([("call_c1", "calculate", '{"text": "6 * 7"}')])
    upstream.queue_text("It is 42.")
    with anthropic.Anthropic(base_url=server.url, api_key="sk-x", max_retries=0) as client:
        message = client.messages.create(
            model="mock/mock-model",
            max_tokens=100,
            messages=[{"role": "user", "content": "What is 6 times 7?"}],
            tools=["calculate"],  # type: ignore[list-item]
        )
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "It is 42."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    answered = upstream.requests[-1]["messages"][-1]
    assert (answered["role"], answered["tool_call_id"], answered["content"]) == (
        "tool",
        "call_c1",
        "42",
    )

    upstream.reset()
    upstream.queue_tool_calls([("call_c2", "calculate", '{"text": "2 + 2"}')])
    upstream.queue_text("Four.")
    # the SDK's stream helper reads every tool as an object: the server tool is named in
    # Parley's tool_config instead (a plain name in tools works with plain HTTP)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0)
    with (
        client,
        client.responses.stream(
            model="mock/mock-model",
            input="What is 2 + 2?",
            extra_body={"tool_config": {"calculate": {}}},
        ) as stream,
    ):
        response = stream.get_final_response()
    assert response.output_text == "Four."
    assert upstream.requests[-1]["messages"][-1]["content"] == "4"

    upstream.queue_tool_calls([("call_c3", "calculate", '{"text": "3 * 3"}')])
    upstream.queue_text("Nine.")
    plain = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": "mock/mock-model", "input": "3 * 3?", "tools": ["calculate"]},
    ).json()
    assert plain["output"][-1]["content"][0]["text"] == "Nine."
    assert upstream.requests[-1]["messages"][-1]["content"] == "9"


def test_a_call_waits_for_approval_behind_each_door(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    write = ("call_w", "workspace_write", json.dumps({"path": "a.txt", "content": "hi"}))
    upstream.reset()
    upstream.queue_tool_calls([write])
    with anthropic.Anthropic(base_url=server.url, api_key="sk-x", max_retries=0) as client:
        message = client.messages.create(
            model="mock/mock-model",
            max_tokens=100,
            messages=[{"role": "user", "content": "Write a.txt."}],
            tools=["workspace_write"],  # type: ignore[list-item]
        )
    extra = (message.model_extra or {})["parley"]
    assert [p["id"] for p in extra["pending_approvals"]] == ["call_w"]
    assert message.stop_reason == "end_turn"  # the client runs nothing

    upstream.queue_text("Written.")
    resumed = httpx.post(
        f"{server.url}/v1/conversations/{extra['conversation_id']}/approvals",
        json={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}]},
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["choices"][0]["message"]["content"] == "Written."
    assert upstream.requests[-1]["messages"][-1]["tool_call_id"] == "call_w"

    upstream.reset()
    upstream.queue_tool_calls([write])
    plain = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": "mock/mock-model", "input": "Write a.txt.", "tools": ["workspace_write"]},
    ).json()
    assert [p["id"] for p in plain["parley"]["pending_approvals"]] == ["call_w"]


def test_streamed_replies_carry_parleys_extension_at_their_end(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    """The citations, ids and cost reach a streaming client of either door too: in
    Anthropic's ``message_delta`` and in the Responses API's final response."""
    upstream.reset()
    upstream.queue_text("Copper [1].")
    body = {
        "model": "mock/mock-model",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
        "knowledge_bases": ["guide"],
    }
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body) as streamed:
        lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    [delta] = [e for e in events if e["type"] == "message_delta"]
    assert [c["title"] for c in delta["parley"]["citations"]] == ["guide.txt"]

    upstream.queue_text("Copper [1].")
    with (
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as client,
        client.responses.stream(
            model="mock/mock-model", input=QUESTION, extra_body={"knowledge_bases": ["guide"]}
        ) as stream,
    ):
        final = stream.get_final_response()
    citations = (final.model_extra or {})["parley"]["citations"]
    assert [c["title"] for c in citations] == ["guide.txt"]
