"""Langchain-Chatchat's file routes at once on the same files, over a real server:
``update_docs``, ``recreate_vector_store``, ``upload_docs`` with ``override`` (which
replaces a file) and ``delete_docs``, round after round (issue 17, item 8: indexing
runs wrote chunks for documents deleted or replaced meanwhile, and failed with
``FOREIGN KEY constraint failed``).

The server embeds through a real OpenAI-compatible endpoint on loopback that answers
after a pause, so that indexing runs are in flight while the other routes change their
documents. After each round: every call was answered without an error, every file left
is ``ready`` with exactly its own chunks (a deleted or replaced file has none, and a
search never finds one), nothing stays queued, indexing or deleting; and the server
logged no error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import db_rows, server_config
from tests.support.mock_embeddings import Endpoint
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

pytestmark = pytest.mark.anyio

BASE = "races"
ROUNDS = 8
SETTLE_SECONDS = 60.0
"""How long a round may take to settle: far more than it needs; past it, something
stays pending for good."""
LOG_ERRORS = ("Traceback", "IntegrityError", "FOREIGN KEY", "ERROR")


@pytest.fixture(scope="module")
def embeddings() -> Iterator[Endpoint]:
    with Endpoint() as endpoint:
        endpoint.delay = 0.03  # runs are mid-document while other calls change it
        yield endpoint


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, embeddings: Endpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    knowledge = {
        "embedder": "openai",
        "embedding": {"base_url": embeddings.base_url, "model": "text-embed"},
        "workers": 2,
        "min_relative_score": 0,
    }
    config = server_config(upstream, knowledge=knowledge)
    with ParleyServer(tmp_path_factory.mktemp("chatchat-races"), config) as running:
        yield running


@pytest.fixture
async def http(server: ParleyServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"{server.url}/knowledge_base", timeout=120) as client:
        yield client


def content(name: str, marker: str) -> bytes:
    """About ten chunks, each naming ``marker`` (a word of this version alone)."""
    paragraph = f"The harbour of Velmora keeps {name} under the mark {marker}. " * 4
    return "\n\n".join(f"{paragraph}Paragraph {n}." for n in range(30)).encode()


async def upload(http: httpx.AsyncClient, name: str, marker: str) -> dict[str, Any]:
    form = {"knowledge_base_name": BASE, "override": "true", "to_vector_store": "true"}
    response = await http.post(
        "/upload_docs", data=form, files=[("files", (name, content(name, marker)))]
    )
    return answer(response)


async def update(http: httpx.AsyncClient, names: list[str]) -> dict[str, Any]:
    body = {"knowledge_base_name": BASE, "file_names": names}
    return answer(await http.post("/update_docs", json=body))


async def delete(http: httpx.AsyncClient, names: list[str]) -> dict[str, Any]:
    body = {"knowledge_base_name": BASE, "file_names": names, "delete_content": True}
    return answer(await http.post("/delete_docs", json=body))


async def recreate(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    async with http.stream(
        "POST", "/recreate_vector_store", json={"knowledge_base_name": BASE}
    ) as response:
        body = (await response.aread()).decode()
    assert response.status_code == 200, body
    if not response.headers["content-type"].startswith("text/event-stream"):
        raise AssertionError(f"recreate_vector_store answered {body}")
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == 200, body
    return body


def failures(body: dict[str, Any]) -> dict[str, str]:
    """The failed files of an answer, but those deleted or replaced meanwhile (a
    call that finds a file gone answers so, rightly)."""
    failed: dict[str, str] = body["data"]["failed_files"]
    return {name: why for name, why in failed.items() if not why.endswith("not found")}


async def settle(server: ParleyServer) -> list[Any]:
    """Wait until no document is pending or being deleted; the documents then."""
    deadline = asyncio.get_running_loop().time() + SETTLE_SECONDS
    while True:
        rows = db_rows(server, "SELECT * FROM kb_documents ORDER BY filename")
        busy = [r for r in rows if r["status"] in ("queued", "indexing", "deleting")]
        if not busy:
            return rows
        if asyncio.get_running_loop().time() > deadline:
            states = [(r["filename"], r["status"]) for r in busy]
            raise AssertionError(f"documents stay pending: {states}")
        await asyncio.sleep(0.1)


async def test_reindexing_replacing_and_deleting_at_once(
    server: ParleyServer, http: httpx.AsyncClient
) -> None:
    created = await http.post(
        "/create_knowledge_base", json={"knowledge_base_name": BASE, "embed_model": "bge"}
    )
    answer(created)
    for name in ("alpha.txt", "gamma.txt"):
        assert failures(await upload(http, name, f"{name[:5]}first")) == {}
    gone: list[str] = []
    for round_ in range(ROUNDS):
        assert failures(await upload(http, "beta.txt", f"betaround{round_}")) == {}
        replaced = f"alpharound{round_}"
        calls = await asyncio.gather(
            update(http, ["alpha.txt", "beta.txt", "gamma.txt"]),
            recreate(http),
            upload(http, "alpha.txt", replaced),
            delete(http, ["beta.txt"]),
            update(http, ["gamma.txt", "alpha.txt"]),
            upload(http, "gamma.txt", f"gammaround{round_}"),
            upload(http, "gamma.txt", f"gammaagain{round_}"),
            delete(http, ["beta.txt"]),
        )
        for body in (calls[0], *calls[2:]):
            assert failures(body) == {}, body
        for event in calls[1]:
            assert event["code"] == 200 or "deleted or cancelled" in event["msg"], event
        documents = await settle(server)
        assert [(d["filename"], d["status"]) for d in documents] == [
            ("alpha.txt", "ready"),
            ("gamma.txt", "ready"),
        ]
        for document in documents:
            chunks = db_rows(
                server,
                "SELECT count(*) AS n FROM kb_chunks WHERE document_id = ?",
                document["id"],
            )[0]["n"]
            assert chunks == document["chunks_done"] == document["chunks_total"] > 1
        gone += [f"betaround{round_}", f"alpharound{round_ - 1}" if round_ else "alphafirst"]
        for marker in gone:
            left = db_rows(
                server,
                "SELECT count(*) AS n FROM kb_chunks WHERE text LIKE ?",
                f"%{marker}%",
            )[0]["n"]
            assert left == 0, marker
            assert await search(http, marker) == []
        assert await search(http, replaced) != []
    logged = server.log()
    assert not [line for line in logged.splitlines() if any(e in line for e in LOG_ERRORS)]


async def search(http: httpx.AsyncClient, query: str) -> list[dict[str, Any]]:
    """The sources of the chunks ``search_docs`` finds that hold ``query``."""
    body = {"knowledge_base_name": BASE, "query": query, "top_k": 20, "score_threshold": 2.0}
    response = await http.post("/search_docs", json=body)
    assert response.status_code == 200, response.text
    hits: list[dict[str, Any]] = response.json()
    return [hit["metadata"] for hit in hits if query in hit["page_content"]]
