"""Branches over HTTP, through the official client: regenerate, edit, select, delete, fork.

Regenerate and edit answer exactly like chat completions, so the client's own
``ChatCompletion`` and ``Stream[ChatCompletionChunk]`` types read them.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI


def say(client: openai.OpenAI, upstream: MockOpenAI, text: str, reply: str, cid: str | None) -> str:
    upstream.queue_text(reply)
    extra = {"conversation_id": cid} if cid else {}
    answer = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": text}], extra_body=extra
    )
    return str((answer.model_extra or {})["parley"]["conversation_id"])


def conversation(parley: ParleyServer, cid: str) -> dict[str, Any]:
    response = httpx.get(f"{parley.url}/v1/conversations/{cid}")
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"]]


@pytest.fixture
def three_turns(client: openai.OpenAI, upstream: MockOpenAI) -> str:
    cid = say(client, upstream, "one", "first answer", None)
    say(client, upstream, "two", "second answer", cid)
    say(client, upstream, "three", "third answer", cid)
    return cid


def post(client: openai.OpenAI, path: str, body: dict[str, Any]) -> ChatCompletion:
    return client.post(path, body=body, cast_to=ChatCompletion)


def test_regenerating_an_assistant_message_keeps_what_followed(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    before = conversation(parley, cid)
    second = before["messages"][3]
    assert second["content"] == "second answer"
    upstream.queue_text("second, again")
    reply = post(client, f"/conversations/{cid}/messages/{second['id']}/regenerate", {})
    assert reply.choices[0].message.content == "second, again"
    assert reply.choices[0].finish_reason == "stop"
    # the model saw the history before the regenerated reply, nothing after it
    sent = upstream.requests[-1]["messages"]
    assert [m["content"] for m in sent] == ["one", "first answer", "two"]
    after = conversation(parley, cid)
    assert contents(after) == [
        "one",
        "first answer",
        "two",
        "second, again",
        "three",
        "third answer",
    ]
    versions = after["messages"][3]["versions"]
    assert versions["count"] == 2
    assert versions["index"] == 1
    assert versions["ids"][0] == second["id"]
    assert after["messages"][0]["versions"]["count"] == 1
    # the old version is still there, with its own later messages
    old = httpx.post(f"{parley.url}/v1/conversations/{cid}/messages/{second['id']}/select").json()
    assert contents(old) == contents(before)


def test_regenerate_streams_like_chat_completions(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    last = conversation(parley, cid)["messages"][-1]
    upstream.queue_text("a streamed redo")
    stream = client.post(
        f"/conversations/{cid}/messages/{last['id']}/regenerate",
        body={"stream": True, "stream_options": {"include_usage": True}},
        cast_to=ChatCompletionChunk,
        stream=True,
        stream_cls=Stream[ChatCompletionChunk],
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "a streamed redo"
    assert chunks[-1].usage is not None  # include_usage honoured, as in chat completions
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    assert contents(conversation(parley, cid))[-1] == "a streamed redo"


def test_regenerating_from_a_user_message_starts_a_new_branch_there(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    two = conversation(parley, cid)["messages"][2]
    assert two["content"] == "two"
    upstream.queue_text("another take on two")
    post(client, f"/conversations/{cid}/messages/{two['id']}/regenerate", {})
    after = conversation(parley, cid)
    assert contents(after) == ["one", "first answer", "two", "another take on two"]
    assert after["messages"][3]["versions"]["count"] == 2


def test_editing_a_user_message_adds_a_version_and_answers_it(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    two = conversation(parley, cid)["messages"][2]
    upstream.queue_text("answer to the edit")
    reply = post(client, f"/conversations/{cid}/messages/{two['id']}/edit", {"content": "TWO"})
    assert reply.choices[0].message.content == "answer to the edit"
    assert [m["content"] for m in upstream.requests[-1]["messages"]] == [
        "one",
        "first answer",
        "TWO",
    ]
    after = conversation(parley, cid)
    assert contents(after) == ["one", "first answer", "TWO", "answer to the edit"]
    assert after["messages"][2]["versions"] == {
        "count": 2,
        "index": 1,
        "ids": [two["id"], after["messages"][2]["id"]],
    }
    # the first message can be edited too (a new root)
    first = after["messages"][0]
    upstream.queue_text("fresh start")
    post(client, f"/conversations/{cid}/messages/{first['id']}/edit", {"content": "uno"})
    assert contents(conversation(parley, cid)) == ["uno", "fresh start"]
    assert conversation(parley, cid)["messages"][0]["versions"]["count"] == 2


def test_bad_edits_and_regenerates_are_clear_errors(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    body = conversation(parley, cid)
    user, assistant = body["messages"][0], body["messages"][1]
    with pytest.raises(openai.BadRequestError) as empty:
        post(client, f"/conversations/{cid}/messages/{user['id']}/edit", {"content": "  "})
    assert empty.value.code == "empty_message"
    with pytest.raises(openai.BadRequestError) as no_content:
        post(client, f"/conversations/{cid}/messages/{user['id']}/edit", {})
    assert (no_content.value.body or {})["param"] == "content"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        post(client, f"/conversations/{cid}/messages/{assistant['id']}/edit", {"content": "x"})
    with pytest.raises(openai.NotFoundError) as missing:
        post(client, f"/conversations/{cid}/messages/msg_nope/regenerate", {})
    assert missing.value.code == "message_not_found"
    with pytest.raises(openai.NotFoundError):
        post(client, f"/conversations/conv_nope/messages/{user['id']}/regenerate", {})
    with pytest.raises(openai.NotFoundError) as model:
        post(
            client, f"/conversations/{cid}/messages/{user['id']}/regenerate", {"model": "dead/nope"}
        )
    assert model.value.code == "model_not_found"
    assert contents(conversation(parley, cid)) == contents(body)  # nothing changed


def test_delete_a_version_moves_the_branch_to_the_other(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    second = conversation(parley, cid)["messages"][3]
    upstream.queue_text("redo")
    post(client, f"/conversations/{cid}/messages/{second['id']}/regenerate", {})
    redo = conversation(parley, cid)["messages"][3]
    response = httpx.delete(f"{parley.url}/v1/conversations/{cid}/messages/{redo['id']}")
    assert response.status_code == 200
    body = response.json()
    assert contents(body) == [
        "one",
        "first answer",
        "two",
        "second answer",
        "three",
        "third answer",
    ]
    assert body["messages"][3]["versions"]["count"] == 1
    gone = httpx.delete(f"{parley.url}/v1/conversations/{cid}/messages/{redo['id']}")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "message_not_found"
    # deleting the only version of a position ends the branch before it
    three = body["messages"][4]
    cut = httpx.delete(f"{parley.url}/v1/conversations/{cid}/messages/{three['id']}").json()
    assert contents(cut) == ["one", "first answer", "two", "second answer"]
    # and the conversation carries on from there
    say(client, upstream, "four", "fourth answer", cid)
    assert contents(conversation(parley, cid))[-2:] == ["four", "fourth answer"]


def test_fork_copies_the_branch_into_a_new_conversation(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, three_turns: str
) -> None:
    cid = three_turns
    body = conversation(parley, cid)
    upto = body["messages"][3]["id"]
    response = httpx.post(
        f"{parley.url}/v1/conversations/{cid}/fork", json={"message_id": upto, "title": "Side"}
    )
    assert response.status_code == 201
    fork = response.json()
    assert fork["id"] != cid
    assert fork["title"] == "Side"
    assert contents(fork) == ["one", "first answer", "two", "second answer"]
    assert not {m["id"] for m in fork["messages"]} & {m["id"] for m in body["messages"]}
    say(client, upstream, "only in the fork", "ok", fork["id"])
    assert contents(conversation(parley, cid)) == contents(body)  # the original is untouched
    whole = httpx.post(f"{parley.url}/v1/conversations/{cid}/fork").json()
    assert contents(whole) == contents(body)
    assert (
        httpx.post(
            f"{parley.url}/v1/conversations/{cid}/fork", json={"message_id": "x"}
        ).status_code
        == 404
    )


def test_another_owner_cannot_touch_the_branches(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with ParleyServer(tmp_path_factory.mktemp("owners"), server_config(upstream)) as server:
        alice, mallory = (server.create_key(who) for who in ("alice", "mallory"))
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=alice, max_retries=0)
        cid = say(client, upstream, "mine", "yours", None)
        own = {"Authorization": f"Bearer {alice}"}
        body = httpx.get(f"{server.url}/v1/conversations/{cid}", headers=own).json()
        message = body["messages"][0]["id"]
        base = f"{server.url}/v1/conversations/{cid}"
        for method, path in [
            ("POST", f"/messages/{message}/select"),
            ("DELETE", f"/messages/{message}"),
            ("POST", "/fork"),
            ("POST", f"/messages/{message}/regenerate"),
            ("POST", f"/messages/{message}/edit"),
        ]:
            response = httpx.request(
                method,
                base + path,
                headers={"Authorization": f"Bearer {mallory}"},
                json={"content": "x"} if path.endswith("edit") else None,
            )
            assert response.status_code == 404, (method, path, response.text)
        after = httpx.get(f"{server.url}/v1/conversations/{cid}", headers=own).json()
        assert after == body
