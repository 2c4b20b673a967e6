"""Rolling context routes over a real server: compact with instructions, read the
summary and its history, revert, and owners."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI

HISTORY = [
    {"role": "user", "content": "Plan a trip: 3 days in Rome, budget 900 EUR."},
    {"role": "assistant", "content": "Day 1 Colosseum, day 2 Vatican, day 3 Trastevere."},
    {"role": "user", "content": "Add a cooking class on day 2, about 80 EUR."},
    {"role": "assistant", "content": "Added: cooking class, day 2 evening, 80 EUR."},
    {"role": "user", "content": "What is left of the budget?"},
]


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        context={"threshold_tokens": 4000, "minimum_threshold_tokens": 256},
        chat={"generate_titles": False, "generate_suggestions": False},
    )
    with ParleyServer(tmp_path_factory.mktemp("context"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client


@pytest.fixture
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["bob"]) as client:
        yield client


def _conversation(client: httpx.Client, upstream: MockOpenAI, messages: list[Any]) -> str:
    """A stored conversation holding ``messages`` and a reply; its id."""
    upstream.queue_text("About 520 EUR are left.")
    response = client.post("/chat/completions", json={"model": "fast", "messages": messages})
    assert response.status_code == 200, response.text
    return str(response.json()["parley"]["conversation_id"])


def _ids(client: httpx.Client, conversation_id: str) -> list[str]:
    response = client.get(f"/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["messages"]]


def test_compact_read_and_revert(alice: httpx.Client, upstream: MockOpenAI) -> None:
    cid = _conversation(alice, upstream, HISTORY)
    ids = _ids(alice, cid)
    assert len(ids) == 6
    empty = alice.get(f"/conversations/{cid}/summary")
    assert empty.status_code == 200
    assert empty.json() == {"conversation_id": cid, "summary": None, "history": []}

    upstream.queue_text("Rome, 3 days, 900 EUR; cooking class day 2 (80 EUR).")
    response = alice.post(
        f"/conversations/{cid}/compact", json={"instructions": "Keep every amount in EUR."}
    )
    assert response.status_code == 200, response.text
    first = response.json()["summary"]
    assert first["object"] == "conversation.summary"
    assert first["text"] == "Rome, 3 days, 900 EUR; cooking class day 2 (80 EUR)."
    assert first["covers"] == ids[:4]  # everything before the newest user message
    assert first["instructions"] == "Keep every amount in EUR."
    assert first["model"] == "fast"
    assert first["tokens"] > 0
    assert first["applies"] is True
    assert first["reverted_at"] is None
    # the summariser got the instructions and the covered messages, not the newest turn
    request = upstream.requests[-1]
    system, user = request["messages"][0]["content"], request["messages"][-1]["content"]
    assert "Keep every amount in EUR." in system
    assert "budget 900 EUR" in user
    assert "cooking class on day 2" in user
    assert "What is left of the budget?" not in user

    read = alice.get(f"/conversations/{cid}/summary").json()
    assert read == {"conversation_id": cid, "summary": first, "history": []}

    upstream.queue_text("Trip to Rome with a cooking class.")
    second = alice.post(f"/conversations/{cid}/compact", json={"instructions": "Shorter."})
    assert second.status_code == 200, second.text
    second_summary = second.json()["summary"]
    read = alice.get(f"/conversations/{cid}/summary").json()
    assert read["summary"] == second_summary
    assert [s["id"] for s in read["history"]] == [first["id"]]

    reverted = alice.delete(f"/conversations/{cid}/summary")
    assert reverted.status_code == 200, reverted.text
    body = reverted.json()
    assert body["reverted"]["id"] == second_summary["id"]
    assert body["reverted"]["reverted_at"] is not None
    assert body["summary"] == first
    assert alice.get(f"/conversations/{cid}/summary").json()["summary"] == first

    body = alice.delete(f"/conversations/{cid}/summary").json()
    assert body["reverted"]["id"] == first["id"]
    assert body["summary"] is None
    body = alice.delete(f"/conversations/{cid}/summary").json()
    assert body == {"conversation_id": cid, "reverted": None, "summary": None}
    history = alice.get(f"/conversations/{cid}/summary").json()["history"]
    assert [s["id"] for s in history] == [second_summary["id"], first["id"]]


def test_compact_with_another_model_and_no_body(alice: httpx.Client, upstream: MockOpenAI):
    cid = _conversation(alice, upstream, HISTORY)
    upstream.queue_text("A short summary.")
    response = alice.post(f"/conversations/{cid}/compact", json={"model": "mock/mock-large"})
    assert response.status_code == 200, response.text
    assert response.json()["summary"]["model"] == "mock/mock-large"
    assert upstream.requests[-1]["model"] == "mock-large"

    # nothing new since, and no instructions
    error = api_error(alice.post(f"/conversations/{cid}/compact"), 400)
    assert error["code"] == "nothing_to_summarise"


def test_compact_refusals(alice: httpx.Client, upstream: MockOpenAI) -> None:
    short = _conversation(alice, upstream, [{"role": "user", "content": "Hello"}])
    error = api_error(alice.post(f"/conversations/{short}/compact", json={}), 400)
    assert error["code"] == "nothing_to_summarise"

    cid = _conversation(alice, upstream, HISTORY)
    error = api_error(alice.post(f"/conversations/{cid}/compact", json={"colour": "red"}), 400)
    assert "colour" in error["message"]
    error = api_error(
        alice.post(f"/conversations/{cid}/compact", json={"model": "dead/other"}), 404
    )
    assert error["code"] == "model_not_found"

    upstream.queue_error(500, "upstream down")
    error = api_error(alice.post(f"/conversations/{cid}/compact", json={}), 502)
    assert alice.get(f"/conversations/{cid}/summary").json()["summary"] is None

    error = api_error(alice.get("/conversations/conv_missing/summary"), 404)
    assert error["code"] == "conversation_not_found"


def test_another_owner_sees_nothing(
    alice: httpx.Client, bob: httpx.Client, upstream: MockOpenAI
) -> None:
    cid = _conversation(alice, upstream, HISTORY)
    upstream.queue_text("Alice's summary.")
    assert alice.post(f"/conversations/{cid}/compact", json={}).status_code == 200
    requests = len(upstream.requests)
    for response in (
        bob.get(f"/conversations/{cid}/summary"),
        bob.post(f"/conversations/{cid}/compact", json={"instructions": "x"}),
        bob.delete(f"/conversations/{cid}/summary"),
    ):
        assert api_error(response, 404)["code"] == "conversation_not_found"
    assert len(upstream.requests) == requests
    assert alice.get(f"/conversations/{cid}/summary").json()["summary"] is not None


def test_deleting_the_conversation_deletes_its_summaries(
    alice: httpx.Client, upstream: MockOpenAI, server: ParleyServer
) -> None:
    cid = _conversation(alice, upstream, HISTORY)
    upstream.queue_text("Soon gone.")
    assert alice.post(f"/conversations/{cid}/compact", json={}).status_code == 200
    assert db_rows(server, "SELECT id FROM summaries WHERE conversation_id=?", cid)
    assert alice.delete(f"/conversations/{cid}").status_code == 200
    assert not db_rows(server, "SELECT id FROM summaries WHERE conversation_id=?", cid)


def test_a_long_chat_sends_a_summary_and_the_recent_window(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Rolling context during chat, through the official client: past the threshold the
    older part goes as a summary in the system prompt, the recent part verbatim, and the
    stored messages stay whole."""
    config = server_config(
        upstream, context={"threshold_tokens": 600, "minimum_threshold_tokens": 256}
    )
    upstream.reset()
    with ParleyServer(tmp_path_factory.mktemp("rolling"), config) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        conversation_id: str | None = None
        for turn in range(6):
            upstream.queue_text(f"answer {turn} " + "lorem ipsum dolor " * 20)
            extra = {"conversation_id": conversation_id} if conversation_id else {}
            # a summary call, whenever one comes, gets this (never a chat reply)
            upstream.route_text("<previous_summary>", "SUMMARY: a trip to Rome was planned.")
            reply = client.chat.completions.create(
                model="fast",
                messages=[{"role": "user", "content": f"question {turn} " + "word " * 60}],
                extra_body=extra,
            )
            conversation_id = (reply.model_extra or {})["parley"]["conversation_id"]
        summarising = [r for r in upstream.requests if "<previous_summary>" in str(r["messages"])]
        assert summarising, "no summary was asked for"
        chat = [r for r in upstream.requests if r not in summarising]
        last = chat[-1]["messages"]
        assert last[0]["role"] == "system"
        assert "<rolling_context_summary>" in last[0]["content"]
        assert "SUMMARY: a trip to Rome was planned." in last[0]["content"]
        sent = " ".join(str(m["content"]) for m in last[1:])
        assert "question 0" not in sent  # summarised, not sent
        assert "question 5" in sent
        assert last[1]["role"] == "user"  # the recent window starts at a user message
        body = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()
        assert len(body["messages"]) == 12  # nothing stored was changed or dropped
        assert body["messages"][0]["content"].startswith("question 0")
        summary = httpx.get(f"{server.url}/v1/conversations/{conversation_id}/summary").json()
        assert summary["summary"]["text"] == "SUMMARY: a trip to Rome was planned."
        assert summary["summary"]["covers"][0] == body["messages"][0]["id"]
