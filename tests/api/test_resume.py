"""Resumable streams on one instance: every event of a streamed reply has an id, and a
client that lost its connection sends ``Last-Event-ID`` to get the rest of the reply,
including what was produced while it was away (``api/resume.py``, ``parley.streams``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer
from tests.support.sse import (
    WORDS,
    body,
    events,
    first_events,
    new_conversation,
    resume,
    text_of,
)
from tests.support.waiting import wait_until

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("resume"), server_config(upstream)) as parley:
        yield parley


def stored_text(server: ParleyServer, conversation_id: str) -> tuple[str, str]:
    last = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()["messages"][-1]
    return last["content"], last["status"]


def test_every_event_has_an_id_counting_from_one(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_text("one", " two")
    data = body(new_conversation(server))
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=data) as response:
        stream = list(events(response))
    assert stream[-1].done
    message_id = stream[0].json()["parley"]["message_id"]
    assert [e.id for e in stream] == [f"{message_id}.{n}" for n in range(1, len(stream) + 1)]


def test_a_client_that_left_gets_the_rest_including_what_came_while_it_was_away(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue(Reply(frames=text_frames(WORDS), delay=0.05))
    conversation_id = new_conversation(server)
    before = first_events(server, body(conversation_id), 4)
    wait_until(lambda: stored_text(server, conversation_id)[0].startswith("w0 w1 w2 w3 w4 "))
    assert before[-1].id is not None
    rest = resume(server, before[-1].id)
    assert rest[-1].done
    assert text_of(before) + text_of(rest) == "".join(WORDS)
    message_id, n = before[-1].id.rsplit(".", 1)
    assert rest[0].id == f"{message_id}.{int(n) + 1}"
    assert stored_text(server, conversation_id) == ("".join(WORDS), "complete")


def test_a_finished_reply_resumes_from_any_event(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_text("alpha", " beta", " gamma")
    data = body(new_conversation(server))
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=data) as response:
        whole = list(events(response))
    for cut in range(1, len(whole)):
        assert whole[cut - 1].id is not None
        assert resume(server, whole[cut - 1].id) == whole[cut:]


def test_bad_and_foreign_ids_are_refused(server: ParleyServer) -> None:
    url = f"{server.url}/v1/chat/completions"
    bad = httpx.post(url, json={}, headers={"last-event-id": "17"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_last_event_id"
    unknown = httpx.post(url, json={}, headers={"last-event-id": "msg_nobody.3"})
    assert unknown.status_code == 404


def test_after_a_restart_the_stored_reply_is_sent_whole(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    config = server_config(upstream)
    with ParleyServer(tmp_path, config) as first:
        upstream.queue_text("kept", " in the database")
        data = body(new_conversation(first))
        with httpx.stream("POST", f"{first.url}/v1/chat/completions", json=data) as response:
            whole = list(events(response))
    with ParleyServer(tmp_path, config) as second:  # its event log starts empty
        assert whole[1].id is not None
        again = resume(second, whole[1].id)
    assert again[-1].done
    chunk = again[0].json()
    assert chunk["parley"]["resumed"] == "storage"
    assert chunk["choices"][0]["delta"]["content"] == "kept in the database"
    assert again[1].json()["choices"][0]["finish_reason"] == "stop"


def test_the_official_client_reads_a_stream_with_ids_and_keep_alives(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    """Its decoder keeps the last event id, so a blank line after a ``: ping`` became an
    event with empty data that it failed to parse: a keep-alive ends no event now."""
    import openai

    config = server_config(upstream, server={"keepalive_seconds": 0.05})
    with ParleyServer(tmp_path, config) as quiet:
        upstream.queue(Reply(frames=text_frames(["slow", " and", " steady"]), delay=0.3))
        client = openai.OpenAI(base_url=f"{quiet.url}/v1", api_key="sk-x", max_retries=0)
        stream = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "slow and steady"
