"""``Idempotency-Key`` over a real server: a request sent again with its key gets the first
answer (replayed, or joined while it runs) and never reaches the upstream twice; another
request under the same key is 422; keys belong to one API key; responses that are not
kept run again; records outlive a restart, and a request cut off by one says so."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "none"})
    with ParleyServer(tmp_path_factory.mktemp("idempotency"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client


def _chat(text: str, *, stream: bool = False) -> dict[str, Any]:
    return {"model": "fast", "messages": [{"role": "user", "content": text}], "stream": stream}


def _key(name: str) -> dict[str, str]:
    return {"Idempotency-Key": f"{name}-{time.monotonic_ns()}"}


def _user_messages(server: ParleyServer, text: str) -> int:
    rows = db_rows(server, "SELECT parts FROM messages WHERE role = 'user'")
    return sum(text in row["parts"] for row in rows)


def test_the_official_client_gets_the_same_completion_once(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=keys["alice"], max_retries=0)
    upstream.queue_text("Blue", " it is.")
    headers = _key("sdk")
    message = [{"role": "user", "content": "Name a colour (sdk)"}]
    first = client.chat.completions.with_raw_response.create(
        model="fast", messages=message, extra_headers=headers
    )
    again = client.chat.completions.with_raw_response.create(
        model="fast", messages=message, extra_headers=headers
    )
    assert first.parse().choices[0].message.content == "Blue it is."
    assert again.parse().model_dump() == first.parse().model_dump()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(upstream.requests) == 1
    assert _user_messages(server, "Name a colour (sdk)") == 1


def test_a_stream_sent_again_is_the_same_stream(
    server: ParleyServer, alice: httpx.Client, upstream: MockOpenAI
) -> None:
    upstream.queue_text("one", " two")
    headers = _key("stream")
    body = _chat("count (stream)", stream=True)
    first = alice.post("/chat/completions", json=body, headers=headers)
    again = alice.post("/chat/completions", json=body, headers=headers)
    assert first.status_code == again.status_code == 200
    assert first.content == again.content
    assert first.content.endswith(b"data: [DONE]\n\n")
    assert again.headers["content-type"].startswith("text/event-stream")
    assert len(upstream.requests) == 1


def _read_stream(client: httpx.Client, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    with client.stream("POST", "/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        return b"".join(response.iter_bytes())


def test_a_request_sent_while_the_first_runs_joins_it(
    server: ParleyServer, alice: httpx.Client, upstream: MockOpenAI
) -> None:
    upstream.queue_text("slow", " and", " steady", delay=0.3)
    headers = _key("join")
    body = _chat("race (join)", stream=True)
    results: dict[str, bytes] = {}
    first = threading.Thread(
        target=lambda: results.update(first=_read_stream(alice, body, headers))
    )
    first.start()
    _wait_for(lambda: len(upstream.requests) == 1)
    with alice.stream("POST", "/chat/completions", json=body, headers=headers) as joined:
        assert joined.headers["idempotent-replayed"] == "true"
        results["joined"] = b"".join(joined.iter_bytes())
    first.join(timeout=30)
    assert results["joined"] == results["first"]
    assert b"steady" in results["joined"]
    assert results["joined"].endswith(b"data: [DONE]\n\n")
    assert len(upstream.requests) == 1
    assert _user_messages(server, "race (join)") == 1


def test_a_client_that_left_gets_the_whole_reply_when_it_asks_again(
    server: ParleyServer, alice: httpx.Client, upstream: MockOpenAI
) -> None:
    upstream.queue_text("first", " second", " third", delay=0.3)
    headers = _key("left")
    body = _chat("leave early (left)", stream=True)
    with alice.stream("POST", "/chat/completions", json=body, headers=headers) as response:
        next(response.iter_bytes())  # one frame, then the connection closes
    again = _read_stream(alice, body, headers)
    text = "".join(
        (chunk["choices"][0]["delta"].get("content") or "")
        for chunk in _chunks(again)
        if chunk.get("choices")
    )
    assert text == "first second third"
    assert again.endswith(b"data: [DONE]\n\n")
    assert len(upstream.requests) == 1
    assert _user_messages(server, "leave early (left)") == 1


def test_another_request_under_the_same_key_is_422(
    alice: httpx.Client, upstream: MockOpenAI
) -> None:
    upstream.queue_text("ok")
    headers = _key("reused")
    assert alice.post("/chat/completions", json=_chat("a"), headers=headers).status_code == 200
    response = alice.post("/chat/completions", json=_chat("b"), headers=headers)
    error = api_error(response, 422)
    assert error["code"] == "idempotency_key_reused"
    assert error["param"] == "Idempotency-Key"
    assert response.headers["x-should-retry"] == "false"
    other_route = alice.post("/memories", json={"text": "a"}, headers=headers)
    assert api_error(other_route, 422)["code"] == "idempotency_key_reused"
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "naïve"])
def test_a_malformed_key_is_400(alice: httpx.Client, key: str) -> None:
    response = alice.post(
        "/memories", json={"text": "never stored"}, headers={"Idempotency-Key": key.encode()}
    )
    assert api_error(response, 400)["code"] == "invalid_idempotency_key"


def test_keys_belong_to_one_api_key(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    upstream.queue_text("for alice")
    upstream.queue_text("for bob")
    headers = {"Idempotency-Key": f"shared-{time.monotonic_ns()}"}
    body = _chat("who am I (scoped)")
    with server.client(keys["alice"]) as alice, server.client(keys["bob"]) as bob:
        first = alice.post("/chat/completions", json=body, headers=headers).json()
        other = bob.post("/chat/completions", json=body, headers=headers)
    assert other.status_code == 200
    assert "idempotent-replayed" not in other.headers
    assert other.json()["choices"][0]["message"]["content"] == "for bob"
    assert first["choices"][0]["message"]["content"] == "for alice"
    assert len(upstream.requests) == 2


def test_a_revoked_key_gets_401_not_the_kept_response(server: ParleyServer) -> None:
    key = server.create_key("carol")
    headers = _key("revoked")
    with server.client(key) as carol:
        created = carol.post("/memories", json={"text": "kept"}, headers=headers)
        assert created.status_code == 201
        result = server.cli("keys", "revoke", key[:16])
        assert result.returncode == 0, result.stderr
        _wait_for(lambda: carol.get("/models").status_code == 401)
        assert api_error(carol.post("/memories", json={"text": "kept"}, headers=headers), 401)


def test_a_server_error_is_not_kept_so_a_retry_runs_again(
    alice: httpx.Client, upstream: MockOpenAI
) -> None:
    upstream.queue_error(503, "busy")
    upstream.queue_text("second time lucky")
    headers = _key("retry")
    body = _chat("try twice (retry)")
    failed = alice.post("/chat/completions", json=body, headers=headers)
    assert failed.status_code >= 500
    retried = alice.post("/chat/completions", json=body, headers=headers)
    assert retried.status_code == 200
    assert retried.json()["choices"][0]["message"]["content"] == "second time lucky"
    assert len(upstream.requests) == 2


def test_other_creating_posts_run_once(server: ParleyServer, alice: httpx.Client) -> None:
    headers = _key("memory")
    text = f"I take my tea green {time.monotonic_ns()}"
    first = alice.post("/memories", json={"text": text}, headers=headers)
    again = alice.post("/memories", json={"text": text}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    rows = db_rows(server, "SELECT id FROM memories WHERE text = ?", text)
    assert len(rows) == 1
    assistant = {"name": f"Once {time.monotonic_ns()}"}
    headers = _key("assistant")
    made = [alice.post("/assistants", json=assistant, headers=headers) for _ in range(2)]
    assert made[0].json()["id"] == made[1].json()["id"]
    names = [a["name"] for a in alice.get("/assistants", params={"limit": 100}).json()["data"]]
    assert names.count(assistant["name"]) == 1


def test_an_upload_sent_again_with_a_new_boundary_is_the_same_upload(
    alice: httpx.Client,
) -> None:
    """httpx, like the SDKs, draws a new multipart boundary for every attempt."""
    base = alice.post("/knowledge_bases", json={"name": f"kb-{time.monotonic_ns()}"}).json()
    headers = _key("upload")
    content = b"Plain words about otters. " * 2000

    def upload() -> httpx.Response:
        files = [("files", ("otters.txt", io.BytesIO(content), "text/plain"))]
        return alice.post(f"/knowledge_bases/{base['id']}/documents", files=files, headers=headers)

    first, again = upload(), upload()
    assert first.status_code == again.status_code == 202, first.text
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    documents = alice.get(f"/knowledge_bases/{base['id']}/documents").json()["data"]
    assert len(documents) == 1
    changed = [("files", ("otters.txt", io.BytesIO(content + b"!"), "text/plain"))]
    response = alice.post(
        f"/knowledge_bases/{base['id']}/documents", files=changed, headers=headers
    )
    assert api_error(response, 422)["code"] == "idempotency_key_reused"


def test_kept_responses_outlive_a_restart_and_a_cut_off_request_says_so(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    server = ParleyServer(tmp_path / "restart", server_config(upstream), process=True)  # kill -9
    upstream.queue_text("kept")
    upstream.queue_text("never", " finished", delay=2.0)
    done_key, cut_key = _key("kept"), _key("cut")
    with server, server.client("unused") as client:
        kept = client.post("/chat/completions", json=_chat("keep me"), headers=done_key)
        assert kept.status_code == 200
        body = _chat("cut me off", stream=True)
        with client.stream("POST", "/chat/completions", json=body, headers=cut_key) as cut:
            next(cut.iter_bytes())
            server.stop(9)
    with server, server.client("unused") as client:
        replayed = client.post("/chat/completions", json=_chat("keep me"), headers=done_key)
        assert replayed.json() == kept.json()
        assert replayed.headers["idempotent-replayed"] == "true"
        cut_off = client.post("/chat/completions", json=body, headers=cut_key)
        assert api_error(cut_off, 409)["code"] == "idempotency_key_interrupted"
        assert cut_off.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == 2


def test_a_key_expires(upstream: MockOpenAI, tmp_path: Path) -> None:
    config = server_config(upstream, server={"idempotency_ttl_seconds": 0.5})
    upstream.queue_text("first")
    upstream.queue_text("second")
    headers = _key("expiring")
    with ParleyServer(tmp_path / "ttl", config) as server, server.client("unused") as client:
        first = client.post("/chat/completions", json=_chat("expire"), headers=headers)
        time.sleep(1.0)
        second = client.post("/chat/completions", json=_chat("expire"), headers=headers)
    assert first.json()["choices"][0]["message"]["content"] == "first"
    assert second.json()["choices"][0]["message"]["content"] == "second"


def _chunks(stream: bytes) -> list[dict[str, Any]]:
    frames = [line[6:] for line in stream.split(b"\n") if line.startswith(b"data: {")]
    return [orjson.loads(frame) for frame in frames]


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_cancel_on_disconnect_forgets_the_key_and_large_responses_are_not_kept(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    server_settings = {"on_disconnect": "cancel", "idempotency_max_response_bytes": 3_000}
    config = server_config(upstream, server=server_settings)
    with ParleyServer(tmp_path / "cancel", config) as server, server.client("x") as client:
        upstream.queue_text("cut", " short", " here", delay=0.5)
        upstream.queue_text("ran", " again")
        headers = _key("cancel")
        body = _chat("cancel me", stream=True)
        with client.stream("POST", "/chat/completions", json=body, headers=headers) as first:
            next(first.iter_bytes())
        _wait_for(lambda: _interrupted(server, "cancel me"))
        again = _read_stream(client, body, headers)
        assert b"ran" in again
        assert len(upstream.requests) == 2

        upstream.queue_text(*["many words"] * 40)
        headers = _key("large")
        large = client.post(
            "/chat/completions", json=_chat("be long", stream=True), headers=headers
        )
        assert large.status_code == 200
        assert large.content.endswith(b"data: [DONE]\n\n")
        retried = client.post(
            "/chat/completions", json=_chat("be long", stream=True), headers=headers
        )
        assert api_error(retried, 409)["code"] == "idempotency_response_too_large"
        assert len(upstream.requests) == 3


def _interrupted(server: ParleyServer, text: str) -> bool:
    rows = db_rows(
        server,
        "SELECT a.status FROM messages a JOIN messages u ON a.parent_id = u.id "
        "WHERE CAST(u.parts AS TEXT) LIKE ? AND a.role = 'assistant'",
        f"%{text}%",
    )
    return any(row["status"] == "interrupted" for row in rows)


def test_a_stranger_gets_401_whatever_the_key(server: ParleyServer) -> None:
    """Found by the schema fuzzer: a malformed key was checked before authentication."""
    with httpx.Client(base_url=f"{server.url}/v1") as stranger:
        for key in ("", "fine-key"):
            response = stranger.post(
                "/memories", json={"text": "x"}, headers={"Idempotency-Key": key}
            )
            assert api_error(response, 401)["type"] == "authentication_error"
