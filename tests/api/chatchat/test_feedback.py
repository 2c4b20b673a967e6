"""Chatchat's ``POST /chat/feedback`` over a real server: a chat turn on
``/chat/chat/completions`` with the official client the way Chatchat's web UI sends it
(``base_url=<server>/chat``, the reply's id read from the chunks' ``message_id``), then
feedback sent as ``ApiRequest.chat_feedback`` sends it, kept on the reply and shown by
``GET /v1/conversations/{id}``; another owner's reply is answered as a missing one.
"""

from __future__ import annotations

import time
import uuid
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
    with ParleyServer(tmp_path_factory.mktemp("feedback"), server_config(upstream)) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


def chat_turn(server: ParleyServer, key: str, upstream: MockOpenAI) -> tuple[str, str]:
    """One streamed turn as Chatchat's dialogue page sends it: the reply's message id
    (every chunk's ``message_id``) and Parley's conversation id."""
    upstream.queue_text("Blue ", "is a colour.")
    client = openai.OpenAI(base_url=f"{server.url}/chat", api_key=key)
    ids: set[str] = set()
    conversations: set[str] = set()
    stream = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "Name a colour."}],
        stream=True,
        extra_body={"conversation_id": uuid.uuid4().hex, "tool_input": {}, "metadata": {}},
    )
    for chunk in stream:
        extra = chunk.model_extra or {}
        ids.add(extra["message_id"])
        conversations.add(extra["parley"]["conversation_id"])
    assert len(ids) == 1, ids
    assert len(conversations) == 1, conversations
    return ids.pop(), conversations.pop()


def chat_feedback(
    server: ParleyServer, key: str, message_id: str, score: Any, reason: str = ""
) -> httpx.Response:
    """``ApiRequest.chat_feedback``: a JSON body of these three fields."""
    data = {"message_id": message_id, "score": score, "reason": reason}
    return httpx.post(
        f"{server.url}/chat/feedback",
        json=data,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def messages(server: ParleyServer, key: str, conversation_id: str) -> list[dict[str, Any]]:
    with server.client(key) as client:
        response = client.get(f"/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["messages"]
    return found


def test_feedback_is_kept_on_the_reply_and_the_last_wins(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    message_id, conversation_id = chat_turn(server, keys["alice"], upstream)
    assert message_id.startswith("msg_")
    before = time.time()

    first = chat_feedback(server, keys["alice"], message_id, 80, "accurate")
    assert first.status_code == 200
    assert first.json() == {"code": 200, "msg": f"已反馈聊天记录 {message_id}", "data": None}
    user, reply = messages(server, keys["alice"], conversation_id)
    assert "feedback" not in user
    assert reply["id"] == message_id
    assert reply["feedback"]["score"] == 80
    assert reply["feedback"]["reason"] == "accurate"
    given = reply["feedback"]["time"]
    assert before - 1 <= given <= time.time() + 1

    second = chat_feedback(server, keys["alice"], message_id, 20)
    assert second.json()["code"] == 200
    (_, reply) = messages(server, keys["alice"], conversation_id)
    assert reply["feedback"]["score"] == 20
    assert reply["feedback"]["reason"] == ""
    assert reply["feedback"]["time"] >= given


def test_another_owners_reply_is_answered_as_a_missing_one(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    message_id, conversation_id = chat_turn(server, keys["alice"], upstream)
    assert chat_feedback(server, keys["alice"], message_id, 90, "mine").json()["code"] == 200
    made_up = "msg_" + "0" * 26

    foreign = chat_feedback(server, keys["bob"], message_id, 0, "spite")
    missing = chat_feedback(server, keys["bob"], made_up, 0, "spite")

    assert foreign.status_code == missing.status_code == 200
    assert foreign.json()["code"] == 404
    assert foreign.json()["msg"]
    assert foreign.json() == {
        **missing.json(),
        "msg": missing.json()["msg"].replace(made_up, message_id),
    }
    (_, reply) = messages(server, keys["alice"], conversation_id)
    assert reply["feedback"]["score"] == 90
    assert reply["feedback"]["reason"] == "mine"


def test_a_user_message_is_not_a_reply(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    _, conversation_id = chat_turn(server, keys["alice"], upstream)
    user, _ = messages(server, keys["alice"], conversation_id)
    answer = chat_feedback(server, keys["alice"], user["id"], 50)
    assert answer.json()["code"] == 404
    assert "feedback" not in messages(server, keys["alice"], conversation_id)[0]


@pytest.mark.parametrize("score", [-1, 101, 50.5, "80", True, None])
def test_a_bad_score_is_refused_in_chatchats_shape(
    server: ParleyServer, keys: dict[str, str], score: Any
) -> None:
    answer = chat_feedback(server, keys["alice"], "msg_00000000000000000000000000", score)
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == 400
    assert "score" in body["msg"]
    assert body["error"]["param"] == "score"


def test_a_missing_message_id_is_refused(server: ParleyServer, keys: dict[str, str]) -> None:
    answer = httpx.post(
        f"{server.url}/chat/feedback",
        json={"score": 10},
        headers={"authorization": f"Bearer {keys['alice']}"},
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == 400
    assert "message_id" in answer.json()["msg"]
