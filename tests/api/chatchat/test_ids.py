"""Langchain-Chatchat makes its own conversation ids; owners never share one (issue 17,
item 6).

Before, another owner's conversation id reached the model with the message and only
then answered 404, and a free id answered 200: the 404 told that the id was taken. Now
a client-made id names a conversation of the caller's own, so another owner's id
answers exactly like a free one, and nothing of the other conversation is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("chatchat-ids"), server_config(upstream)) as s:
        yield s


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


def _chatchat(server: ParleyServer, key: str, conversation: str, text: str) -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/chat/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={
            "model": "fast",
            "messages": [{"role": "user", "content": text}],
            "conversation_id": conversation,
            "max_tokens": 0,
        },
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _sent(upstream: MockOpenAI) -> list[str]:
    return [m["content"] for m in upstream.requests[-1]["messages"]]


def test_two_owners_with_one_client_id_have_two_conversations(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    upstream.queue_text("noted, alice")
    first = _chatchat(server, keys["alice"], "shared-id", "alice's secret is 42")
    upstream.queue_text("hello bob")
    other = _chatchat(server, keys["bob"], "shared-id", "what was said before?")

    assert _sent(upstream) == ["what was said before?"]  # nothing of alice's
    assert other["parley"]["conversation_id"] != first["parley"]["conversation_id"]

    upstream.queue_text("still 42")
    _chatchat(server, keys["alice"], "shared-id", "and again?")
    assert _sent(upstream) == ["alice's secret is 42", "noted, alice", "and again?"]


def test_another_owners_conversation_id_answers_like_a_free_one(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    upstream.queue_text("private")
    taken = _chatchat(server, keys["alice"], "alice-only", "private words")
    alices_id = taken["parley"]["conversation_id"]

    for conversation in (alices_id, "alice-only", "never-used-by-anyone"):
        upstream.queue_text("fresh")
        reply = _chatchat(server, keys["bob"], conversation, "hi")
        assert reply["choices"][0]["message"]["content"] == "fresh"
        assert _sent(upstream) == ["hi"]  # a new conversation of bob's, every time
        assert reply["parley"]["conversation_id"] not in (alices_id, conversation)

    alice = httpx.get(
        f"{server.url}/v1/conversations/{alices_id}",
        headers={"authorization": f"Bearer {keys['alice']}"},
    ).json()
    assert [m["content"] for m in alice["messages"]] == ["private words", "private"]


def test_the_owners_own_conversation_ids_keep_working(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    upstream.queue_text("one")
    made = _chatchat(server, keys["alice"], "c-1", "first")["parley"]["conversation_id"]
    upstream.queue_text("two")
    again = _chatchat(server, keys["alice"], made, "second")  # the id Parley answered with

    assert again["parley"]["conversation_id"] == made
    assert _sent(upstream) == ["first", "one", "second"]
