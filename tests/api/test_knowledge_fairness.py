"""One owner's indexing does not hold back another's, over a real server (issue 17).

The server embeds through a real OpenAI-compatible endpoint on loopback that answers
alice's chunks (marked "alpha") slowly, as a busy model would, and bob's at once: bob's
small document is ready while alice's backlog (a large document and several more) is
still being indexed, and an owner past ``knowledge.max_queued_per_owner`` gets 429 with
``Retry-After`` while another owner's upload is accepted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.mock_embeddings import Endpoint
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI

FINISHED = ("ready", "failed", "cancelled")


def slow_for_alice(body: dict[str, Any]) -> float:
    return 0.25 if any("alpha" in text for text in body["input"]) else 0.0


@pytest.fixture
def embeddings() -> Iterator[Endpoint]:
    with Endpoint() as endpoint:
        endpoint.delay = slow_for_alice
        yield endpoint


def server(
    upstream: MockOpenAI, embeddings: Endpoint, data_dir: Path, **knowledge: Any
) -> ParleyServer:
    settings = {
        "embedder": "openai",
        "embedding": {"base_url": embeddings.base_url, "model": "text-embed", "batch_size": 16},
        **knowledge,
    }
    return ParleyServer(data_dir, server_config(upstream, knowledge=settings))


def document(marker: str, chunks: int) -> bytes:
    """About ``chunks`` chunks of 1,400 characters, every paragraph its own text (the
    embedding cache never answers for another)."""
    return "\n\n".join(
        f"{marker} {n}: the harbour of Velmora keeps its lighthouse number {n} lit. " * 18
        for n in range(chunks)
    ).encode()


def upload(client: httpx.Client, kb_id: str, *files: tuple[str, bytes]) -> httpx.Response:
    return client.post(
        f"/knowledge_bases/{kb_id}/documents",
        files=[("files", (name, data, "text/plain")) for name, data in files],
    )


def statuses(client: httpx.Client, kb_id: str) -> dict[str, str]:
    listed = client.get(f"/knowledge_bases/{kb_id}/documents", params={"limit": 100})
    return {d["filename"]: d["status"] for d in listed.json()["data"]}


def until_finished(client: httpx.Client, kb_id: str, document_id: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = client.get(f"/knowledge_bases/{kb_id}/documents/{document_id}")
        status = str(found.json()["status"])
        if status in FINISHED:
            return status
        time.sleep(0.05)
    raise AssertionError(f"document {document_id} is still pending after 60 s")


def test_another_owners_document_is_ready_while_a_backlog_indexes(
    upstream: MockOpenAI, embeddings: Endpoint, tmp_path: Path
) -> None:
    with server(upstream, embeddings, tmp_path) as running, ExitStack() as stack:
        alice = stack.enter_context(running.client(running.create_key("alice")))
        bob = stack.enter_context(running.client(running.create_key("bob")))
        mine = alice.post("/knowledge_bases", json={"name": "alice-docs"}).json()["id"]
        theirs = bob.post("/knowledge_bases", json={"name": "bob-docs"}).json()["id"]
        # a large document and four more: about 350 chunks, 22 slow embedding requests
        backlog = [("large.txt", document("alpha-large", 160))]
        backlog += [(f"a{n}.txt", document(f"alpha{n}", 48)) for n in range(4)]
        assert upload(alice, mine, *backlog).status_code == 202
        answer = upload(bob, theirs, ("small.txt", document("bravo", 1)))
        assert answer.status_code == 202
        small = answer.json()["data"][0]["id"]
        assert until_finished(bob, theirs, small) == "ready"
        # bob's document did not wait for alice's backlog
        waiting = {name for name, status in statuses(alice, mine).items() if status != "ready"}
        assert "a3.txt" in waiting
        hits = bob.post(f"/knowledge_bases/{theirs}/search", json={"query": "bravo lighthouse"})
        assert hits.json()["data"][0]["document_id"] == small


def test_an_owner_past_its_share_of_the_queue_gets_429(
    upstream: MockOpenAI, embeddings: Endpoint, tmp_path: Path
) -> None:
    embeddings.delay = lambda body: 1.0 if slow_for_alice(body) else 0.0
    running = server(upstream, embeddings, tmp_path, max_queued_per_owner=2)
    with running, ExitStack() as stack:
        alice = stack.enter_context(running.client(running.create_key("alice")))
        bob = stack.enter_context(running.client(running.create_key("bob")))
        mine = alice.post("/knowledge_bases", json={"name": "alice-docs"}).json()["id"]
        theirs = bob.post("/knowledge_bases", json={"name": "bob-docs"}).json()["id"]
        files = [(f"a{n}.txt", document(f"alpha{n}", 20)) for n in range(3)]
        answer = upload(alice, mine, *files)
        assert answer.status_code == 202
        assert [d["filename"] for d in answer.json()["data"]] == ["a0.txt", "a1.txt"]
        [refused] = answer.json()["failed_files"]
        assert (refused["filename"], refused["code"]) == ("a2.txt", "too_many_queued_documents")

        again = upload(alice, mine, ("a3.txt", document("alpha3", 1)))
        error = api_error(again, 429)
        assert again.headers["retry-after"] == "30"
        assert error["type"] == "rate_limit_error"
        assert error["code"] == "too_many_queued_documents"
        assert "knowledge.max_queued_per_owner" in error["message"]
        assert "2 of your documents" in error["message"]

        # another owner's upload is accepted, and indexed
        answer = upload(bob, theirs, ("b.txt", document("bravo", 1)))
        assert answer.status_code == 202
        assert until_finished(bob, theirs, answer.json()["data"][0]["id"]) == "ready"
