"""``/knowledge_base/*`` (Langchain-Chatchat 0.3.x) over a real server, each route called
the way Chatchat's web UI client (``webui_pages/utils.py``, ``ApiRequest``) calls it:
the same methods, JSON bodies, form fields and query parameters.

The server searches by words only (``knowledge.embedder: none``), so results do not
depend on a model.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

GUIDE = (
    b"# Parley Guide\n\n"
    b"## Installation\n\n"
    b"Install the zebrafish package with pip before you run anything else. The package "
    b"brings the server, its command line and the default settings file with it.\n\n"
    b"## Usage\n\n"
    b"Run the server with the walrus command. It listens on port 8000 and answers "
    b"every request with a friendly greeting, as a good server should.\n"
)
NOTES = (
    b"Bananas are yellow fruit that grow in warm places.\n\n"
    b"Zebrafish are small striped fish that are often kept in aquariums at home.\n"
)


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    # weak word matches kept (min_relative_score 0): these tests rank and threshold
    # Chatchat's distances over every match
    config = server_config(upstream, knowledge={"embedder": "none", "min_relative_score": 0})
    with ParleyServer(tmp_path_factory.mktemp("chatchat-kb"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


class ApiRequest:
    """The knowledge-base calls of Chatchat's ``ApiRequest``, request for request."""

    def __init__(self, server: ParleyServer, key: str | None) -> None:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.Client(base_url=server.url, headers=headers, timeout=90)

    def close(self) -> None:
        self.http.close()

    def list_knowledge_bases(self) -> httpx.Response:
        return self.http.get("/knowledge_base/list_knowledge_bases")

    def create_knowledge_base(self, name: str, **extra: Any) -> httpx.Response:
        data = {"knowledge_base_name": name, "vector_store_type": "faiss", "embed_model": "bge"}
        return self.http.post("/knowledge_base/create_knowledge_base", json={**data, **extra})

    def delete_knowledge_base(self, name: str) -> httpx.Response:
        return self.http.post("/knowledge_base/delete_knowledge_base", json=f"{name}")

    def list_kb_docs(self, name: str) -> httpx.Response:
        return self.http.get("/knowledge_base/list_files", params={"knowledge_base_name": name})

    def search_kb_docs(
        self,
        name: str,
        query: str = "",
        top_k: int = 3,
        score_threshold: float = 2.0,
        file_name: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> httpx.Response:
        data = {
            "query": query,
            "knowledge_base_name": name,
            "top_k": top_k,
            "score_threshold": score_threshold,
            "file_name": file_name,
            "metadata": metadata or {},
        }
        return self.http.post("/knowledge_base/search_docs", json=data)

    def upload_kb_docs(
        self,
        files: list[tuple[str, bytes]],
        name: str,
        override: bool = False,
        to_vector_store: bool = True,
        chunk_size: int = 750,
        chunk_overlap: int = 150,
        docs: dict[str, Any] | None = None,
    ) -> httpx.Response:
        data = {
            "knowledge_base_name": name,
            "override": override,
            "to_vector_store": to_vector_store,
            "chunk_size": chunk_size,
            "chunk_overlap": chunk_overlap,
            "zh_title_enhance": False,
            "docs": json.dumps(docs or {}, ensure_ascii=False),
            "not_refresh_vs_cache": False,
        }
        return self.http.post(
            "/knowledge_base/upload_docs",
            data=data,
            files=[("files", (filename, content)) for filename, content in files],
        )

    def delete_kb_docs(
        self, name: str, file_names: list[str], delete_content: bool = False
    ) -> httpx.Response:
        data = {
            "knowledge_base_name": name,
            "file_names": file_names,
            "delete_content": delete_content,
            "not_refresh_vs_cache": False,
        }
        return self.http.post("/knowledge_base/delete_docs", json=data)

    def update_kb_info(self, name: str, kb_info: str) -> httpx.Response:
        data = {"knowledge_base_name": name, "kb_info": kb_info}
        return self.http.post("/knowledge_base/update_info", json=data)

    def update_kb_docs(self, name: str, file_names: list[str]) -> httpx.Response:
        data = {
            "knowledge_base_name": name,
            "file_names": file_names,
            "override_custom_docs": False,
            "chunk_size": 750,
            "chunk_overlap": 150,
            "zh_title_enhance": False,
            "docs": json.dumps({}),
            "not_refresh_vs_cache": False,
        }
        return self.http.post("/knowledge_base/update_docs", json=data)

    def recreate_vector_store(
        self, name: str, allow_empty_kb: bool = True
    ) -> tuple[httpx.Response, list[dict[str, Any]]]:
        data = {
            "knowledge_base_name": name,
            "allow_empty_kb": allow_empty_kb,
            "vs_type": "faiss",
            "embed_model": "bge",
            "chunk_size": 750,
            "chunk_overlap": 150,
            "zh_title_enhance": False,
        }
        events: list[dict[str, Any]] = []
        with self.http.stream(
            "POST", "/knowledge_base/recreate_vector_store", json=data, timeout=None
        ) as response:
            body = response.read().decode()
        if response.headers["content-type"].startswith("text/event-stream"):
            for line in body.splitlines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                else:
                    assert not line or line.startswith(":"), line
        return response, events

    def download_doc(self, name: str, file_name: str, preview: bool = False) -> httpx.Response:
        params: dict[str, str | bool] = {
            "knowledge_base_name": name,
            "file_name": file_name,
            "preview": preview,
        }
        return self.http.get("/knowledge_base/download_doc", params=params)


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[ApiRequest]:
    api = ApiRequest(server, keys["alice"])
    yield api
    api.close()


@pytest.fixture
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[ApiRequest]:
    api = ApiRequest(server, keys["bob"])
    yield api
    api.close()


def ok(response: httpx.Response) -> dict[str, Any]:
    """A Chatchat ``BaseResponse`` with code 200."""
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "msg", "data"}, body
    assert body["code"] == 200, body
    assert isinstance(body["msg"], str)
    return body


def refused(response: httpx.Response, code: int) -> dict[str, Any]:
    """A failure the way Chatchat answers one: HTTP 200, the code inside."""
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["msg"]
    return body


def new_name() -> str:
    return f"samples-{uuid.uuid4().hex[:8]}"


def files_of(api: ApiRequest, name: str) -> dict[str, dict[str, Any]]:
    return {f["file_name"]: f for f in ok(api.list_kb_docs(name))["data"]}


def wait_indexed(api: ApiRequest, name: str, *file_names: str) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        files = files_of(api, name)
        if all(files.get(f, {}).get("in_db") for f in file_names):
            return files
        assert time.monotonic() < deadline, files
        time.sleep(0.1)


@pytest.fixture
def base(alice: ApiRequest) -> Iterator[str]:
    """A knowledge base of alice's holding guide.md and notes.txt, both indexed."""
    name = new_name()
    ok(alice.create_knowledge_base(name))
    body = ok(alice.upload_kb_docs([("guide.md", GUIDE), ("notes.txt", NOTES)], name))
    assert body["data"] == {"failed_files": {}}
    wait_indexed(alice, name, "guide.md", "notes.txt")
    yield name
    alice.delete_knowledge_base(name)


# --- knowledge bases ---------------------------------------------------------------------


def test_create_list_describe_and_delete_a_knowledge_base(alice: ApiRequest) -> None:
    name = new_name()
    body = ok(alice.create_knowledge_base(name, kb_info="answers about issues"))
    assert body["data"] is None
    refused(alice.create_knowledge_base(name), 404)  # the name is taken

    listed = ok(alice.list_knowledge_bases())["data"]
    mine = next(kb for kb in listed if kb["kb_name"] == name)
    assert set(mine) == {
        "id",
        "kb_name",
        "kb_info",
        "vs_type",
        "embed_model",
        "file_count",
        "create_time",
    }
    assert mine["kb_info"] == "answers about issues"
    assert mine["file_count"] == 0
    assert mine["vs_type"] == "parley"
    assert mine["create_time"][:4].isdigit()
    assert "T" in mine["create_time"]

    body = ok(alice.update_kb_info(name, "new description"))
    assert body["data"] == {"kb_info": "new description"}
    listed = ok(alice.list_knowledge_bases())["data"]
    assert next(kb for kb in listed if kb["kb_name"] == name)["kb_info"] == "new description"

    ok(alice.delete_knowledge_base(name))
    refused(alice.delete_knowledge_base(name), 404)
    refused(alice.update_kb_info(name, "x"), 404)
    assert name not in [kb["kb_name"] for kb in ok(alice.list_knowledge_bases())["data"]]


def test_names_are_checked(alice: ApiRequest) -> None:
    refused(alice.create_knowledge_base("../etc"), 403)
    refused(alice.create_knowledge_base("   "), 404)
    refused(alice.create_knowledge_base("kb_looks_like_an_id"), 404)
    refused(alice.list_kb_docs("../etc"), 403)
    response = alice.http.post(
        "/knowledge_base/delete_knowledge_base", json={"knowledge_base_name": "nothing-here"}
    )
    refused(response, 404)


def test_a_key_is_needed(server: ParleyServer, keys: dict[str, str]) -> None:
    anonymous = ApiRequest(server, None)
    try:
        response = anonymous.list_knowledge_bases()
        assert response.status_code == 401
        assert "error" in response.json()
    finally:
        anonymous.close()


# --- files -------------------------------------------------------------------------------


def test_upload_lists_files_with_their_details(alice: ApiRequest, base: str) -> None:
    files = files_of(alice, base)
    assert sorted(files) == ["guide.md", "notes.txt"]
    guide = files["guide.md"]
    assert guide["kb_name"] == base
    assert guide["file_ext"] == ".md"
    assert guide["file_size"] == len(GUIDE)
    assert guide["in_db"] is True
    assert guide["in_folder"] is True
    assert guide["docs_count"] >= 2  # its two sections are two chunks
    assert guide["status"] == "ready"
    assert sorted(f["No"] for f in files.values()) == [1, 2]
    listed = ok(alice.list_knowledge_bases())["data"]
    assert next(kb for kb in listed if kb["kb_name"] == base)["file_count"] == 2


def test_search_returns_documents_with_metadata_and_distances(alice: ApiRequest, base: str) -> None:
    response = alice.search_kb_docs(base, "walrus command")
    assert response.status_code == 200
    hits = response.json()
    assert isinstance(hits, list)
    assert hits
    top = hits[0]
    assert set(top) == {"id", "page_content", "metadata", "type", "score"}
    assert top["type"] == "Document"
    assert "walrus" in top["page_content"]
    assert top["metadata"]["source"] == "guide.md"
    assert "Usage" in top["metadata"]["section"]
    assert top["metadata"]["page"] is None
    assert top["score"] == 0.0  # the best hit is at distance 0

    everything = alice.search_kb_docs(base, "zebrafish aquariums", top_k=10).json()
    assert len(everything) >= 2
    assert [h["metadata"]["source"] for h in everything[:2]] == ["notes.txt", "guide.md"]
    scores = [h["score"] for h in everything]
    assert scores == sorted(scores)
    assert all(0.0 <= s <= 2.0 for s in scores)
    assert scores[1] > 0.0

    # lower is more relevant: a threshold of 0 keeps only the best hit
    closest = alice.search_kb_docs(base, "zebrafish aquariums", score_threshold=0.0).json()
    assert closest == [everything[0]]

    # top_k (3 by default) bounds the hits
    assert len(alice.search_kb_docs(base, "the", top_k=1).json()) == 1

    # file_name (a LIKE pattern) filters
    only_guide = alice.search_kb_docs(base, "zebrafish", file_name="GUIDE.%").json()
    assert only_guide
    assert {h["metadata"]["source"] for h in only_guide} == {"guide.md"}

    assert alice.search_kb_docs(base, "nothing matches xylophone").json() == []
    too_far = alice.search_kb_docs(base, "zebrafish", score_threshold=2.5)
    assert too_far.status_code == 400  # Chatchat bounds it to 0..2
    assert alice.search_kb_docs("no-such-base", "zebrafish").json() == []


def test_search_without_a_query_lists_a_files_chunks(alice: ApiRequest, base: str) -> None:
    chunks = alice.search_kb_docs(base, file_name="guide.md").json()
    assert len(chunks) >= 2
    assert all(c["metadata"]["source"] == "guide.md" for c in chunks)
    joined = "\n".join(c["page_content"] for c in chunks)
    assert "zebrafish" in joined
    assert "walrus" in joined
    assert joined.index("zebrafish") < joined.index("walrus")  # in document order
    by_metadata = alice.search_kb_docs(base, metadata={"source": "notes.txt"}).json()
    assert by_metadata
    assert all(c["metadata"]["source"] == "notes.txt" for c in by_metadata)
    assert alice.search_kb_docs(base).json() == []


def test_download_is_an_attachment_unless_a_safe_preview(alice: ApiRequest, base: str) -> None:
    response = alice.download_doc(base, "guide.md")
    assert response.status_code == 200
    assert response.content == GUIDE
    assert response.headers["content-disposition"].startswith("attachment")
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["x-content-type-options"] == "nosniff"

    preview = alice.download_doc(base, "notes.txt", preview=True)
    assert preview.content == NOTES
    assert preview.headers["content-disposition"].startswith("inline")
    assert preview.headers["content-type"].startswith("text/plain")

    refused(alice.download_doc(base, "missing.txt"), 404)
    refused(alice.download_doc("no-such-base", "guide.md"), 404)


def test_html_is_never_previewed_inline(alice: ApiRequest, base: str) -> None:
    page = b"<html><head><title>Page</title></head><body><p>Hello otter</p></body></html>"
    ok(alice.upload_kb_docs([("page.html", page)], base))
    response = alice.download_doc(base, "page.html", preview=True)
    assert response.content == page
    assert response.headers["content-disposition"].startswith("attachment")
    assert "html" not in response.headers["content-type"]


def test_override_and_failed_files(alice: ApiRequest, base: str) -> None:
    before = files_of(alice, base)["notes.txt"]["document_id"]
    body = ok(alice.upload_kb_docs([("notes.txt", NOTES)], base))
    assert "already exists" in body["data"]["failed_files"]["notes.txt"]
    assert files_of(alice, base)["notes.txt"]["document_id"] == before

    changed = NOTES + b"Otters hold hands while they sleep.\n"
    body = ok(alice.upload_kb_docs([("notes.txt", changed)], base, override=True))
    assert body["data"]["failed_files"] == {}
    files = wait_indexed(alice, base, "notes.txt")
    assert files["notes.txt"]["document_id"] != before
    assert len(ok(alice.list_kb_docs(base))["data"]) == 2  # replaced, not added
    assert alice.download_doc(base, "notes.txt").content == changed
    assert alice.search_kb_docs(base, "otters").json()[0]["metadata"]["source"] == "notes.txt"

    picture = b"\x89PNG\r\n\x1a\n" + bytes(64)
    body = ok(alice.upload_kb_docs([("photo.png", picture)], base))
    assert body["data"]["failed_files"].keys() == {"photo.png"}

    body = ok(alice.upload_kb_docs([("extra.txt", b"Penguins waddle.")], base, chunk_size=500))
    assert body["data"]["failed_files"] == {}
    assert "chunk_size 500" in body["msg"]
    assert "ignored" in body["msg"]

    body = ok(alice.upload_kb_docs([("more.txt", b"Owls hoot.")], base, docs={"other.txt": []}))
    assert body["data"]["failed_files"].keys() == {"other.txt"}

    refused(alice.upload_kb_docs([("a.txt", b"text")], "no-such-base"), 404)


def test_delete_docs_from_the_index_then_for_good(alice: ApiRequest, base: str) -> None:
    assert alice.search_kb_docs(base, "walrus").json()
    body = ok(alice.delete_kb_docs(base, ["guide.md", "missing.md"]))
    assert body["data"]["failed_files"].keys() == {"missing.md"}

    # delete_content false: the file stays, out of the index
    files = files_of(alice, base)
    assert files["guide.md"]["in_db"] is False
    assert alice.search_kb_docs(base, "walrus").json() == []
    assert alice.download_doc(base, "guide.md").content == GUIDE

    # update_docs indexes it again
    body = ok(alice.update_kb_docs(base, ["guide.md", "missing.md"]))
    assert body["data"]["failed_files"].keys() == {"missing.md"}
    assert files_of(alice, base)["guide.md"]["in_db"] is True
    assert alice.search_kb_docs(base, "walrus").json()

    # delete_content true: gone
    ok(alice.delete_kb_docs(base, ["guide.md"], delete_content=True))
    assert "guide.md" not in files_of(alice, base)
    assert alice.search_kb_docs(base, "walrus").json() == []
    refused(alice.download_doc(base, "guide.md"), 404)


def test_an_upload_without_content_length_is_refused(alice: ApiRequest) -> None:
    name = new_name()
    ok(alice.create_knowledge_base(name))
    boundary = "chatchatboundary42"

    def body() -> Iterator[bytes]:
        yield (
            f"--{boundary}\r\n"
            'content-disposition: form-data; name="knowledge_base_name"\r\n\r\n'
            f"{name}\r\n"
            f"--{boundary}\r\n"
            'content-disposition: form-data; name="files"; filename="a.txt"\r\n'
            "content-type: text/plain\r\n\r\n"
        ).encode()
        yield b"sent in chunks"
        yield f"\r\n--{boundary}--\r\n".encode()

    response = alice.http.post(
        "/knowledge_base/upload_docs",
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        content=body(),
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 411, response.text
    answer = response.json()
    assert set(answer) == {"code", "msg", "data"}
    assert answer["code"] == 411
    assert answer["msg"]
    assert files_of(alice, name) == {}


def test_upload_without_indexing(alice: ApiRequest, base: str) -> None:
    body = ok(alice.upload_kb_docs([("later.txt", b"Narwhals")], base, to_vector_store=False))
    assert body["data"]["failed_files"] == {}
    time.sleep(0.5)
    assert files_of(alice, base)["later.txt"]["in_db"] is False
    assert alice.search_kb_docs(base, "narwhals").json() == []
    ok(alice.update_kb_docs(base, ["later.txt"]))
    wait_indexed(alice, base, "later.txt")
    assert alice.search_kb_docs(base, "narwhals").json()


def test_recreate_vector_store_streams_progress(alice: ApiRequest, base: str) -> None:
    response, events = alice.recreate_vector_store(base)
    assert response.status_code == 200
    assert [e["code"] for e in events] == [200, 200]
    assert {e["doc"] for e in events} == {"guide.md", "notes.txt"}
    assert [e["finished"] for e in events] == [1, 2]
    assert all(e["total"] == 2 and e["msg"].startswith(f"({e['finished']} / 2)") for e in events)
    wait_indexed(alice, base, "guide.md", "notes.txt")
    assert alice.search_kb_docs(base, "walrus").json()


def test_recreate_vector_store_on_a_missing_base(alice: ApiRequest) -> None:
    name = new_name()
    response, events = alice.recreate_vector_store(name, allow_empty_kb=False)
    refused(response, 404)
    response, events = alice.recreate_vector_store(name)  # allow_empty_kb: made, empty
    assert response.status_code == 200
    assert events == []
    assert name in [kb["kb_name"] for kb in ok(alice.list_knowledge_bases())["data"]]
    ok(alice.delete_knowledge_base(name))


# --- owners ------------------------------------------------------------------------------


def test_another_owners_base_is_not_found(alice: ApiRequest, bob: ApiRequest, base: str) -> None:
    assert base not in [kb["kb_name"] for kb in ok(bob.list_knowledge_bases())["data"]]
    body = refused(bob.list_kb_docs(base), 404)
    assert body["data"] == []
    assert bob.search_kb_docs(base, "walrus").json() == []
    assert bob.search_kb_docs(base, file_name="guide.md").json() == []
    refused(bob.download_doc(base, "guide.md"), 404)
    refused(bob.upload_kb_docs([("x.txt", b"bob was here")], base), 404)
    refused(bob.delete_kb_docs(base, ["guide.md"], delete_content=True), 404)
    refused(bob.update_kb_docs(base, ["guide.md"]), 404)
    refused(bob.update_kb_info(base, "mine now"), 404)
    refused(bob.delete_knowledge_base(base), 404)
    response, _ = bob.recreate_vector_store(base, allow_empty_kb=False)
    refused(response, 404)

    # bob may use the same name: it is his own base
    ok(bob.create_knowledge_base(base))
    assert ok(bob.list_kb_docs(base))["data"] == []
    ok(bob.delete_knowledge_base(base))

    # alice's base is untouched
    assert sorted(files_of(alice, base)) == ["guide.md", "notes.txt"]
    assert alice.search_kb_docs(base, "walrus").json()
