"""Client disconnects (by default a named conversation's reply finishes and a stateless
one is cancelled: tests/api/test_stateless_spend.py; or cancel them all), keep-alives,
API keys and owners."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

HELLO = [{"role": "user", "content": "hello"}]


def _wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _last_assistant(db: Path) -> dict[str, object]:
    row = db_rows(
        db, "SELECT status, parts FROM messages WHERE role='assistant' ORDER BY created_at DESC"
    )[0]
    return {"status": row["status"], "parts": json.loads(row["parts"])}


def _open_and_drop(parley: ParleyServer, conversation_id: str | None = None) -> None:
    """Read the first content chunk of a stream, then close the connection."""
    body: dict[str, object] = {"messages": HELLO, "stream": True}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    with httpx.stream("POST", f"{parley.url}/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if '"content":"w' in line:
                break


def _conversation(parley: ParleyServer) -> str:
    """A stored conversation to continue by id."""
    response = httpx.post(f"{parley.url}/v1/chat/completions", json={"messages": HELLO})
    assert response.status_code == 200, response.text
    conversation_id: str = response.json()["parley"]["conversation_id"]
    return conversation_id


def test_disconnect_by_default_finishes_and_saves_a_named_conversations_reply(
    parley: ParleyServer, upstream: MockOpenAI
):
    upstream.queue_text("hi")
    conversation_id = _conversation(parley)
    pieces = [f"w{n} " for n in range(12)]
    upstream.queue(Reply(frames=text_frames(pieces), delay=0.1))
    _open_and_drop(parley, conversation_id)
    _wait_for(lambda: _last_assistant(parley.db_path)["status"] == "complete")
    saved = _last_assistant(parley.db_path)
    assert saved["parts"] == [{"kind": "text", "text": "".join(pieces)}]


def test_checkpoints_partial_text_while_streaming(parley: ParleyServer, upstream: MockOpenAI):
    upstream.queue(Reply(frames=text_frames([f"w{n} " for n in range(20)]), delay=0.1))
    body = {"messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{parley.url}/v1/chat/completions", json=body) as response:
        seen_partial = False
        for line in response.iter_lines():
            if '"content":"w12' in line:
                row = _last_assistant(parley.db_path)
                assert row["status"] == "streaming"
                text = row["parts"][0]["text"]  # type: ignore[index]
                seen_partial = bool(text) and text.startswith("w0 w1 ")
        assert seen_partial


def test_keepalive_comments_while_upstream_is_quiet(parley: ParleyServer, upstream: MockOpenAI):
    upstream.queue(Reply(frames=text_frames(["a", "b"]), delay=1.6))
    body = {"messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{parley.url}/v1/chat/completions", json=body) as response:
        raw = b"".join(response.iter_raw())
    # a comment line that ends no event: the official SDK reads a blank line after an
    # event id as an empty event (tests/api/test_resume.py)
    assert b"\n\n: ping\n" in raw
    assert b": ping\n\n" not in raw
    assert raw.endswith(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def cancelling(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, server={"on_disconnect": "cancel", "keepalive_seconds": 1.0})
    with ParleyServer(tmp_path_factory.mktemp("cancel"), config) as server:
        yield server


def test_disconnect_can_cancel_the_upstream(cancelling: ParleyServer, upstream: MockOpenAI):
    """``cancel`` cancels every reply, even in a conversation the client named."""
    upstream.queue_text("hi")
    conversation_id = _conversation(cancelling)
    closed_before = upstream.connections_closed
    upstream.queue(Reply(frames=text_frames([f"w{n} " for n in range(100)]), delay=0.1))
    started = time.monotonic()
    _open_and_drop(cancelling, conversation_id)
    _wait_for(lambda: upstream.connections_closed > closed_before)
    assert time.monotonic() - started < 5  # not the 10 s the whole reply would take
    _wait_for(lambda: _last_assistant(cancelling.db_path)["status"] == "interrupted")
    text = _last_assistant(cancelling.db_path)["parts"][0]["text"]  # type: ignore[index]
    assert text.startswith("w0 ")
    assert "w99" not in text


@pytest.fixture(scope="module")
def keyed(upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("keyed"), server_config(upstream)) as server:
        yield server


def test_keys_and_owners(keyed: ParleyServer, upstream: MockOpenAI):
    url = f"{keyed.url}/v1"
    # no key exists yet: loopback clients are served whatever they send
    upstream.queue_text("open")
    anyone = openai.OpenAI(base_url=url, api_key="whatever", max_retries=0)
    assert anyone.chat.completions.create(model="fast", messages=HELLO).choices[0].message.content

    alice_key = keyed.create_key("alice")
    bob_key = keyed.create_key("bob")
    with pytest.raises(openai.AuthenticationError):
        anyone.chat.completions.create(model="fast", messages=HELLO)
    assert httpx.get(f"{url}/models").status_code == 401
    assert httpx.get(f"{url}/conversations").status_code == 401

    alice = openai.OpenAI(base_url=url, api_key=alice_key, max_retries=0)
    bob = openai.OpenAI(base_url=url, api_key=bob_key, max_retries=0)
    upstream.queue_text("hi alice")
    reply = alice.chat.completions.create(model="fast", messages=HELLO)
    conversation_id = (reply.model_extra or {})["parley"]["conversation_id"]

    # another owner's ids answer 404, for reading, continuing, renaming and deleting
    bob_headers = {"authorization": f"Bearer {bob_key}"}
    assert (
        httpx.get(f"{url}/conversations/{conversation_id}", headers=bob_headers).status_code == 404
    )
    assert (
        httpx.delete(f"{url}/conversations/{conversation_id}", headers=bob_headers).status_code
        == 404
    )
    renamed = httpx.patch(
        f"{url}/conversations/{conversation_id}", json={"title": "mine"}, headers=bob_headers
    )
    assert renamed.status_code == 404
    with pytest.raises(openai.NotFoundError):
        bob.chat.completions.create(
            model="fast", messages=HELLO, extra_body={"conversation_id": conversation_id}
        )
    assert httpx.get(f"{url}/conversations", headers=bob_headers).json()["data"] == []
    # Chatchat's ids are the client's: alice's id names a new conversation of bob's, as a
    # free id would (tests/api/chatchat/test_ids.py)
    upstream.queue_text("hi bob")
    chatchat = httpx.post(
        f"{keyed.url}/chat/chat/completions",
        json={"messages": HELLO, "conversation_id": conversation_id},
        headers=bob_headers,
    )
    assert chatchat.status_code == 200
    assert upstream.requests[-1]["messages"] == HELLO  # nothing of alice's
    bobs = [c["id"] for c in httpx.get(f"{url}/conversations", headers=bob_headers).json()["data"]]
    assert bobs == [chatchat.json()["parley"]["conversation_id"]]
    assert conversation_id not in bobs
    alice_headers = {"x-api-key": alice_key}
    listed = httpx.get(f"{url}/conversations", headers=alice_headers).json()["data"]
    assert [c["id"] for c in listed] == [conversation_id]

    # keys are stored as hashes only
    stored = db_rows(keyed, "SELECT key_hash, prefix FROM api_keys")
    assert all(alice_key not in (r["key_hash"], r["prefix"]) for r in stored)

    listing = keyed.cli("keys", "list")
    assert "alice" in listing.stdout
    assert alice_key not in listing.stdout
    prefix = alice_key[:16]
    assert keyed.cli("keys", "revoke", prefix).returncode == 0
    with pytest.raises(openai.AuthenticationError):
        alice.chat.completions.create(model="fast", messages=HELLO)
    upstream.queue_text("bob still works")
    assert bob.chat.completions.create(model="fast", messages=HELLO).choices[0].message.content
    assert keyed.cli("keys", "revoke", "nope").returncode == 1
