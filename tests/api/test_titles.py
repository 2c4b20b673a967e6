"""Titles and follow-up suggestions after a successful turn in a conversation the client
named, through a real server: a fast model writes them in the background, and the
conversations API shows them (a stateless request gets neither:
tests/api/test_stateless_spend.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        chat={"generate_titles": True, "generate_suggestions": True, "fast_model": "mock/small"},
    )
    with ParleyServer(tmp_path_factory.mktemp("titles"), config) as parley:
        yield parley


def conversation(server: ParleyServer, cid: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.url}/v1/conversations/{cid}").json()
    return body


def wait_for(check: Any) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def test_a_title_and_suggestions_follow_a_successful_turn(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.reset()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0)
    upstream.queue_text("Hello.")
    first = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "hi"}]
    )
    cid = (first.model_extra or {})["parley"]["conversation_id"]
    assert len(upstream.requests) == 1  # stateless: no title, no suggestions
    # continued by its id: the user will see it again
    upstream.queue_text("Paris is the capital of France.")
    upstream.route_text("short title", "Capital of France")
    upstream.route_text("follow-up", '["What about Germany?", "How big is Paris?"]')
    client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "what is the capital of france"}],
        extra_body={"conversation_id": cid},
    )
    # the provisional title (the first line) until the generated one lands
    wait_for(lambda: conversation(server, cid)["title"] == "Capital of France")
    wait_for(lambda: conversation(server, cid)["suggestions"] != [])
    body = conversation(server, cid)
    assert body["suggestions"] == ["What about Germany?", "How big is Paris?"]
    fast = [r for r in upstream.requests if r["model"] == "small"]
    assert len(fast) == 2  # both went to chat.fast_model
    # a user's title is never replaced, and suggestions belong to the newest reply
    httpx.patch(f"{server.url}/v1/conversations/{cid}", json={"title": "Mine"})
    upstream.queue_text("Berlin.")
    upstream.route_text("short title", "Should not be used")
    upstream.route_text("follow-up", '["And Italy?"]')
    client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "and germany?"}],
        extra_body={"conversation_id": cid},
    )
    wait_for(lambda: conversation(server, cid)["suggestions"] == ["And Italy?"])
    assert conversation(server, cid)["title"] == "Mine"
    assert not any("short title" in str(r) for r in upstream.requests[-2:])


def test_a_failing_fast_model_costs_the_user_nothing(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.reset()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0)
    upstream.queue_text("Hi.")
    first = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "hello there"}]
    )
    cid = (first.model_extra or {})["parley"]["conversation_id"]
    upstream.queue_text("Fine.")  # nothing scripted for the title: the mock answers 500
    reply = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "how are you"}],
        extra_body={"conversation_id": cid},
    )
    assert reply.choices[0].message.content == "Fine."
    wait_for(lambda: len(upstream.requests) >= 4)  # two turns, then title and suggestions
    for doing in ("generating a title", "generating suggestions"):  # their failures handled
        server.log_with(f"conversation {cid}: {doing} failed")
    body = conversation(server, cid)
    assert body["title"] == "hello there"  # the provisional one stays
    assert body["suggestions"] == []
    assert "title" in server.log() or "suggestion" in server.log()


def test_a_conversation_created_empty_gets_its_title_from_the_first_reply(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    """``POST /v1/conversations`` then the first message by id (what the web UI does): the
    first reply already gets a title and suggestions, the first line standing in until
    then; an assistant named at creation is the conversation's."""
    upstream.reset()
    created = httpx.post(f"{server.url}/v1/conversations", json={})
    assert created.status_code == 201, created.text
    cid = created.json()["id"]
    assert created.json()["title"] is None
    assert created.json()["assistant_id"] is None
    assert conversation(server, cid)["messages"] == []
    listed = httpx.get(f"{server.url}/v1/conversations").json()["data"]
    assert listed[0]["id"] == cid
    upstream.queue_text("Oslo.")
    upstream.route_text("short title", "Capital of Norway")
    upstream.route_text("follow-up", '["And Sweden?"]')
    sent = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={
            "model": "fast",
            "conversation_id": cid,
            "messages": [{"role": "user", "content": "capital of norway?\nthanks"}],
        },
    )
    assert sent.status_code == 200, sent.text
    wait_for(lambda: conversation(server, cid)["title"] == "Capital of Norway")
    wait_for(lambda: conversation(server, cid)["suggestions"] == ["And Sweden?"])
    assert [m["role"] for m in conversation(server, cid)["messages"]] == ["user", "assistant"]
    # with no title written (the fast model fails), the first line stays the title
    upstream.reset()
    other = httpx.post(f"{server.url}/v1/conversations", json={}).json()["id"]
    upstream.queue_text("Fine.")
    httpx.post(
        f"{server.url}/v1/chat/completions",
        json={
            "model": "fast",
            "conversation_id": other,
            "messages": [{"role": "user", "content": "how are you\ntoday"}],
        },
    )
    wait_for(lambda: len(upstream.requests) >= 2)  # the title was asked for, and failed
    assert conversation(server, other)["title"] == "how are you"


def test_creating_a_conversation_checks_what_it_is_given(server: ParleyServer) -> None:
    titled = httpx.post(f"{server.url}/v1/conversations", json={"title": "Mine"})
    assert titled.status_code == 201
    assert titled.json()["title"] == "Mine"
    missing = httpx.post(f"{server.url}/v1/conversations", json={"assistant": "nobody"})
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "assistant"
    assert httpx.post(f"{server.url}/v1/conversations", json={"title": ""}).status_code == 400
    assert httpx.post(f"{server.url}/v1/conversations", json={"x": 1}).status_code == 400
    made = httpx.post(
        f"{server.url}/v1/assistants", json={"name": "helper", "system_prompt": "Be brief."}
    )
    assert made.status_code in (200, 201), made.text
    with_assistant = httpx.post(f"{server.url}/v1/conversations", json={"assistant": "helper"})
    assert with_assistant.json()["assistant_id"] == made.json()["id"]
    assert conversation(server, with_assistant.json()["id"])["assistant_id"] == made.json()["id"]
