"""A PDF bomb uploaded to a knowledge base, through a real server (issue 17): ingestion
reads documents in the server's reader processes under
``knowledge.extract_timeout_seconds``, so a 20 KB PDF of 100 pages sharing one
50,000-operator stream (minutes of pypdf) ends ``failed`` saying why within the deadline,
while another owner's document is indexed meanwhile. Before, it was read in a thread
with no deadline and no page limit: about two minutes of the indexing worker.

The bomb is read only by the server's reader processes, never here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.hostile_documents import shared_stream_pdf
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

DEADLINE = 4.0


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream, knowledge={"embedder": "none", "extract_timeout_seconds": DEADLINE}
    )
    with ParleyServer(tmp_path_factory.mktemp("uploads"), config) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


def test_a_pdf_bomb_ingested_ends_failed_while_other_documents_index(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    bomb = shared_stream_pdf(pages=100, operators=50_000)
    with server.client(keys["alice"]) as alice, server.client(keys["bob"]) as bob:
        alice_kb = alice.post("/knowledge_bases", json={"name": "alice-docs"}).json()["id"]
        bob_kb = bob.post("/knowledge_bases", json={"name": "bob-docs"}).json()["id"]
        started = time.monotonic()
        uploaded = alice.post(
            f"/knowledge_bases/{alice_kb}/documents",
            files=[("files", ("bomb.pdf", bomb, "application/pdf"))],
        )
        [bombed] = uploaded.json()["data"]
        text = b"The harbour of Velmora has four lighthouses.\n\n" * 50
        [fine] = bob.post(
            f"/knowledge_bases/{bob_kb}/documents",
            files=[("files", ("harbour.txt", text, "text/plain"))],
        ).json()["data"]
        ready = _settled(bob, bob_kb, fine["id"], DEADLINE + 10)
        assert ready["status"] == "ready", ready
        assert time.monotonic() - started < DEADLINE  # not after the bomb
        failed = _settled(alice, alice_kb, bombed["id"], DEADLINE + 20)
    assert failed["status"] == "failed", failed
    assert f"longer than {DEADLINE:g} s" in failed["error"]
    assert time.monotonic() - started < DEADLINE + 20


def _settled(client: httpx.Client, kb_id: str, document_id: str, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        document: dict[str, Any] = client.get(
            f"/knowledge_bases/{kb_id}/documents/{document_id}"
        ).json()
        if document["status"] not in ("queued", "indexing") or time.monotonic() > deadline:
            return document
        time.sleep(0.1)
