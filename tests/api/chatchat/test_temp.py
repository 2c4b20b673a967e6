"""Chatchat's temporary knowledge bases (``/knowledge_base/upload_temp_docs`` and
``search_temp_docs``) over a real server, the upload sent as Chatchat's
``ApiRequest.upload_temp_docs`` sends it (httpx multipart, ``knowledge_id`` None unless
adding to a base).

The server searches by words only (``knowledge.embedder: none``), so what matches is
certain. A second server with a TTL of seconds shows expiry.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

NOTES = (
    b"Bananas are yellow fruit that grow in warm places.\n\n"
    b"Zebrafish are small striped fish that are often kept in aquariums at home.\n"
)
GUIDE = b"# Guide\n\nRun the server with the walrus command; it listens on port 8000.\n"
PICTURE = b"\x89PNG\r\n\x1a\n" + bytes(64)  # no text to read: it fails to index
MAX_FILES = 3
MAX_BYTES = 20_000
SHORT_TTL = 3


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    knowledge = {
        "embedder": "none",
        "max_files_per_upload": MAX_FILES,
        "max_upload_bytes": MAX_BYTES,
    }
    config = server_config(upstream, knowledge=knowledge)
    with ParleyServer(tmp_path_factory.mktemp("chatchat-temp"), config) as running:
        yield running


class ApiRequest:
    """The temporary-base calls of Chatchat's ``ApiRequest``, request for request."""

    def __init__(self, server: ParleyServer, key: str) -> None:
        self.http = httpx.Client(
            base_url=server.url, headers={"authorization": f"Bearer {key}"}, timeout=90
        )

    def close(self) -> None:
        self.http.close()

    def upload_temp_docs(
        self,
        files: list[tuple[str, bytes]],
        knowledge_id: str | None = None,
        chunk_size: int = 750,
        chunk_overlap: int = 150,
        **extra: Any,
    ) -> httpx.Response:
        data = {
            "knowledge_id": knowledge_id,
            "chunk_size": chunk_size,
            "chunk_overlap": chunk_overlap,
            "zh_title_enhance": False,
            **extra,
        }
        return self.http.post(
            "/knowledge_base/upload_temp_docs",
            data=data,
            files=[("files", (name, io.BytesIO(content))) for name, content in files],
        )

    def search_temp_docs(
        self, knowledge_id: str, query: str, top_k: int = 3, score_threshold: float = 2.0
    ) -> httpx.Response:
        body = {
            "knowledge_id": knowledge_id,
            "query": query,
            "top_k": top_k,
            "score_threshold": score_threshold,
        }
        return self.http.post("/knowledge_base/search_temp_docs", json=body)


@pytest.fixture(scope="module")
def alice(server: ParleyServer) -> Iterator[ApiRequest]:
    api = ApiRequest(server, server.create_key("alice"))
    yield api
    api.close()


@pytest.fixture(scope="module")
def bob(server: ParleyServer) -> Iterator[ApiRequest]:
    api = ApiRequest(server, server.create_key("bob"))
    yield api
    api.close()


@pytest.fixture(scope="module")
def temp_id(alice: ApiRequest) -> str:
    """Alice's temporary base holding notes.txt (the picture failed)."""
    body = answer(alice.upload_temp_docs([("notes.txt", NOTES), ("photo.png", PICTURE)]))
    assert body["code"] == 200, body
    return str(body["data"]["id"])


def answer(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    """A Chatchat ``BaseResponse``."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "msg", "data"}, body
    return body


def sources(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    hits = response.json()
    assert isinstance(hits, list), hits
    return [hit["metadata"]["source"] for hit in hits]


def test_upload_indexes_at_once_and_names_the_file_that_failed(alice: ApiRequest) -> None:
    body = answer(alice.upload_temp_docs([("notes.txt", NOTES), ("photo.png", PICTURE)]))
    assert body["code"] == 200
    assert body["msg"] == "success"
    assert body["data"]["id"].startswith("kb_")
    failed = body["data"]["failed_files"]
    assert [list(entry) for entry in failed] == [["photo.png"]]
    assert failed[0]["photo.png"]
    # indexed before the answer: searchable at once
    assert sources(alice.search_temp_docs(body["data"]["id"], "zebrafish")) == ["notes.txt"]


def test_search_finds_the_right_passage(alice: ApiRequest, temp_id: str) -> None:
    response = alice.search_temp_docs(temp_id, "striped zebrafish aquariums")
    hits = response.json()
    assert len(hits) == 1, hits
    hit = hits[0]
    assert "Zebrafish are small striped fish" in hit["page_content"]
    assert hit["metadata"]["source"] == "notes.txt"
    assert hit["score"] == 0.0  # the best hit's distance
    assert alice.search_temp_docs(temp_id, "volcano").json() == []
    assert alice.search_temp_docs(temp_id, "zebrafish", top_k=0).json() == []


def test_a_previous_id_adds_to_the_same_base(alice: ApiRequest) -> None:
    first = answer(alice.upload_temp_docs([("notes.txt", NOTES)]))["data"]["id"]
    body = answer(alice.upload_temp_docs([("guide.md", GUIDE)], knowledge_id=first))
    assert body["code"] == 200, body
    assert body["data"] == {"id": first, "failed_files": []}
    # Chatchat's server names the field prev_id
    body = answer(
        alice.upload_temp_docs(
            [("more.txt", b"Owls hoot at night in the old barn.")], prev_id=first
        )
    )
    assert body["data"]["id"] == first
    assert sources(alice.search_temp_docs(first, "walrus")) == ["guide.md"]
    assert sources(alice.search_temp_docs(first, "zebrafish")) == ["notes.txt"]
    assert sources(alice.search_temp_docs(first, "owls barn")) == ["more.txt"]
    # other chunking than the base's is ignored, and said so
    body = answer(
        alice.upload_temp_docs([("x.txt", b"Otters")], knowledge_id=first, chunk_size=500)
    )
    assert "chunk_size 500" in body["msg"]


def test_temporary_bases_are_left_out_of_both_listings(
    server: ParleyServer, alice: ApiRequest, temp_id: str
) -> None:
    made = alice.http.post(
        "/knowledge_base/create_knowledge_base", json={"knowledge_base_name": "library"}
    )
    assert made.json()["code"] == 200, made.text
    listed = answer(alice.http.get("/knowledge_base/list_knowledge_bases"))["data"]
    assert [b["kb_name"] for b in listed] == ["library"]
    own = alice.http.get("/v1/knowledge_bases", params={"limit": 100})
    assert own.status_code == 200, own.text
    assert [b["name"] for b in own.json()["data"]] == ["library"]
    assert temp_id not in own.text
    # still the caller's to read by id
    assert alice.http.get(f"/v1/knowledge_bases/{temp_id}").status_code == 200


def test_another_key_cannot_reach_the_base(
    alice: ApiRequest, bob: ApiRequest, temp_id: str
) -> None:
    refused = answer(bob.search_temp_docs(temp_id, "zebrafish"))
    assert refused["code"] == 404
    assert temp_id in refused["msg"]
    refused = answer(bob.upload_temp_docs([("spy.txt", b"Zebrafish spy")], knowledge_id=temp_id))
    assert refused["code"] == 404
    assert refused["data"] == {"id": None, "failed_files": []}
    assert sources(alice.search_temp_docs(temp_id, "zebrafish")) == ["notes.txt"]
    assert answer(alice.search_temp_docs("kb_nothing", "zebrafish"))["code"] == 404


def test_upload_limits_answer_as_chatchat(alice: ApiRequest) -> None:
    too_many = [(f"n{n}.txt", b"Zebrafish") for n in range(MAX_FILES + 1)]
    body = answer(alice.upload_temp_docs(too_many), status=413)
    assert body["code"] == 413
    assert "files" in body["msg"].lower()

    big = b"Zebrafish " * (MAX_BYTES // 10 + 1)
    body = answer(alice.upload_temp_docs([("big.txt", big), ("small.txt", b"Herons wade.")]))
    assert body["code"] == 200
    assert [list(entry) for entry in body["data"]["failed_files"]] == [["big.txt"]]
    assert str(MAX_BYTES) in body["data"]["failed_files"][0]["big.txt"]

    def chunked() -> Iterator[bytes]:
        yield b"--b\r\nContent-Disposition: form-data; name=files; filename=a.txt\r\n\r\n"
        yield b"x\r\n--b--\r\n"

    body = answer(
        alice.http.post(
            "/knowledge_base/upload_temp_docs",
            content=chunked(),
            headers={"content-type": "multipart/form-data; boundary=b"},
        ),
        status=411,
    )
    assert body["code"] == 411

    nothing = alice.http.post("/knowledge_base/upload_temp_docs", data={"knowledge_id": ""})
    assert nothing.status_code == 400, nothing.text
    bad = alice.upload_temp_docs([("a.txt", b"Zebrafish")], chunk_size=50)
    assert bad.status_code == 400, bad.text
    assert "chunk_size" in bad.text


# --- expiry ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_lived(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    knowledge = {"embedder": "none", "temporary_ttl_seconds": SHORT_TTL}
    config = server_config(upstream, knowledge=knowledge)
    with ParleyServer(tmp_path_factory.mktemp("chatchat-temp-ttl"), config) as running:
        yield running


def test_an_expired_id_is_missing_and_its_base_deleted(short_lived: ParleyServer) -> None:
    api = ApiRequest(short_lived, short_lived.create_key("carol"))
    try:
        body = answer(api.upload_temp_docs([("notes.txt", NOTES)]))
        temp_id = body["data"]["id"]
        uploaded = time.monotonic()
        assert sources(api.search_temp_docs(temp_id, "zebrafish")) == ["notes.txt"]
        stored = db_rows(short_lived, "select * from knowledge_bases where id = ?", temp_id)
        assert stored[0]["expires_at"] is not None
        folder = short_lived.data_dir / "knowledge" / temp_id
        assert folder.is_dir()

        time.sleep(max(0.0, SHORT_TTL + 0.3 - (time.monotonic() - uploaded)))
        refused = answer(api.search_temp_docs(temp_id, "zebrafish"))
        assert refused["code"] == 404
        refused = answer(api.upload_temp_docs([("more.txt", b"Owls")], knowledge_id=temp_id))
        assert refused["code"] == 404
        assert api.http.get(f"/v1/knowledge_bases/{temp_id}").status_code == 404
        deadline = time.monotonic() + 10  # rows, then files, are purged in the background
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not folder.exists()
        for table in ("knowledge_bases", "kb_documents", "kb_chunks"):
            column = "id" if table == "knowledge_bases" else "kb_id"
            query = f"select count(*) from {table} where {column} = ?"
            assert db_rows(short_lived, query, temp_id)[0][0] == 0, table
    finally:
        api.close()
