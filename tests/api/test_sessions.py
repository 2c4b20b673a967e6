"""One reply at a time per conversation: a new message supersedes the reply in progress,
and ``POST /v1/conversations/{id}/cancel`` stops it. Through the official client."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import db_rows
from tests.support.server import ParleyServer
from tests.support.waiting import wait_until

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames


def slow_reply(upstream: MockOpenAI) -> None:
    upstream.queue(Reply(frames=text_frames([f"w{i} " for i in range(40)]), delay=0.05))


def started_conversation(client: openai.OpenAI, upstream: MockOpenAI) -> str:
    upstream.queue_text("hello")
    reply = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "hi"}]
    )
    return str((reply.model_extra or {})["parley"]["conversation_id"])


def stream_in_thread(
    client: openai.OpenAI, conversation_id: str, out: dict[str, Any]
) -> threading.Thread:
    def read() -> None:
        text = ""
        try:
            stream = client.chat.completions.create(
                model="fast",
                messages=[{"role": "user", "content": "tell me a long story"}],
                stream=True,
                extra_body={"conversation_id": conversation_id},
            )
            for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    out["so_far"] = text
        except openai.APIError as exc:
            out["error"] = exc
        out["text"] = text

    thread = threading.Thread(target=read)
    thread.start()
    return thread


def wait_for_text(out: dict[str, Any], upstream: MockOpenAI, requests: int) -> None:
    deadline = time.monotonic() + 10
    while len(upstream.requests) < requests:
        assert time.monotonic() < deadline, "the stream never reached the upstream"
        time.sleep(0.01)
    wait_until(lambda: out.get("so_far", "").startswith("w0 "), what="the stream's first words")


def test_a_new_message_supersedes_the_reply_in_progress(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
) -> None:
    conversation_id = started_conversation(client, upstream)
    slow_reply(upstream)
    out: dict[str, Any] = {}
    thread = stream_in_thread(client, conversation_id, out)
    wait_for_text(out, upstream, 2)
    upstream.queue_text("the newer answer")
    newer = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "never mind"}],
        extra_body={"conversation_id": conversation_id},
    )
    thread.join(10)
    assert newer.choices[0].message.content == "the newer answer"
    assert out["error"].code == "superseded"
    assert out["text"].startswith("w0 ")
    branch = httpx.get(f"{parley.url}/v1/conversations/{conversation_id}").json()["messages"]
    assert [(m["role"], m["status"]) for m in branch] == [
        ("user", "complete"),
        ("assistant", "complete"),
        ("user", "complete"),
        ("assistant", "interrupted"),
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert branch[3]["content"].startswith("w0 ")  # the partial reply is kept
    assert branch[3]["error"]["code"] == "superseded"


def test_cancel_stops_the_reply_and_keeps_what_was_said(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
) -> None:
    conversation_id = started_conversation(client, upstream)
    url = f"{parley.url}/v1/conversations/{conversation_id}/cancel"
    assert httpx.post(url).json()["cancelled"] is False  # nothing running
    slow_reply(upstream)
    out: dict[str, Any] = {}
    thread = stream_in_thread(client, conversation_id, out)
    wait_for_text(out, upstream, 2)
    cancelled = httpx.post(url).json()
    thread.join(10)
    assert cancelled["cancelled"] is True
    assert cancelled["object"] == "conversation.cancellation"
    assert out["error"].code == "cancelled"
    [row] = db_rows(parley, "SELECT status FROM messages WHERE id = ?", cancelled["message_id"])
    assert row["status"] == "interrupted"
    assert httpx.post(f"{parley.url}/v1/conversations/conv_nope/cancel").status_code == 404


@pytest.mark.parametrize("stream", [False, True])
def test_only_the_last_of_simultaneous_sends_answers(
    client: openai.OpenAI, upstream: MockOpenAI, stream: bool
) -> None:
    conversation_id = started_conversation(client, upstream)
    for _ in range(4):
        upstream.queue_text("answer")
    results: list[Any] = [None] * 4

    def send(n: int) -> None:
        try:
            reply = client.chat.completions.create(
                model="fast",
                messages=[{"role": "user", "content": f"q{n}"}],
                extra_body={"conversation_id": conversation_id},
                stream=stream,
            )
            results[n] = (
                "".join(
                    c.choices[0].delta.content or ""
                    for c in reply
                    if c.choices  # type: ignore[union-attr]
                )
                if stream
                else reply.choices[0].message.content
            )  # type: ignore[union-attr]
        except openai.APIError as exc:
            results[n] = exc

    threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    answered = [r for r in results if r == "answer"]
    refused = [r for r in results if isinstance(r, openai.APIError)]
    assert len(answered) >= 1
    assert len(answered) + len(refused) == 4  # nobody hangs
    assert all(r.code == "superseded" for r in refused)


def test_a_bad_request_does_not_stop_the_reply_in_progress(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
) -> None:
    conversation_id = started_conversation(client, upstream)
    slow_reply(upstream)
    out: dict[str, Any] = {}
    thread = stream_in_thread(client, conversation_id, out)
    wait_for_text(out, upstream, 2)
    bad_requests: list[dict[str, Any]] = [
        {"messages": [{"role": "user", "content": "x"}], "extra_body": {"assistant": "nobody"}},
        {"messages": [{"role": "assistant", "content": "x"}]},
        {"messages": []},
        {"messages": [{"role": "user", "content": "   "}]},
        {"messages": [{"role": "user", "content": "x"}], "model": "dead/nope"},
    ]
    for bad in bad_requests:
        extra = {"conversation_id": conversation_id, **bad.pop("extra_body", {})}
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(model=bad.pop("model", "fast"), extra_body=extra, **bad)
        assert 400 <= refused.value.status_code < 500
    thread.join(10)
    assert "error" not in out  # the reply in progress finished as it was
    assert out["text"] == "".join(f"w{i} " for i in range(40))
