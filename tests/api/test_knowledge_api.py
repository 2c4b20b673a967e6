"""``/v1/knowledge_bases`` over a real server: bases, uploads of every format, indexing,
search, downloads, cancel / reindex / delete, and owner isolation.

The server runs with ``knowledge.embedder: none``, so search is lexical and retrieval
is deterministic: each document carries a made-up word only it holds.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from docx import Document as DocxDocument
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI

MAX_UPLOAD = 200_000
FINISHED = ("ready", "failed", "cancelled")


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    knowledge = {"embedder": "none", "max_upload_bytes": MAX_UPLOAD, "max_files_per_upload": 10}
    config = server_config(upstream, knowledge=knowledge)
    with ParleyServer(tmp_path_factory.mktemp("knowledge"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


def _delete_all(client: httpx.Client) -> None:
    for base in client.get("/knowledge_bases", params={"limit": 100}).json()["data"]:
        client.delete(f"/knowledge_bases/{base['id']}")


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client
        _delete_all(client)


@pytest.fixture
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["bob"]) as client:
        yield client
        _delete_all(client)


def _create(client: httpx.Client, name: str, **fields: Any) -> dict[str, Any]:
    response = client.post("/knowledge_bases", json={"name": name, **fields})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _upload(
    client: httpx.Client, kb: str, files: dict[str, bytes], *, override: bool = False
) -> httpx.Response:
    parts = [("files", (name, data, _content_type(name))) for name, data in files.items()]
    data = {"override": "true"} if override else None
    return client.post(f"/knowledge_bases/{kb}/documents", files=parts, data=data)


def _content_type(name: str) -> str:
    suffix = name.rsplit(".", 1)[-1]
    return {
        "txt": "text/plain",
        "md": "text/markdown",
        "html": "text/html",
        "csv": "text/csv",
        "json": "application/json",
        "pdf": "application/pdf",
        "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    }.get(suffix, "application/octet-stream")


def _queued(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 202, response.text
    documents: list[dict[str, Any]] = response.json()["data"]
    return documents


def _wait(client: httpx.Client, kb: str, ids: list[str], timeout: float = 60) -> dict[str, Any]:
    """Every document's last state once all are ready, failed or cancelled."""
    deadline = time.monotonic() + timeout
    while True:
        state = {i: client.get(f"/knowledge_bases/{kb}/documents/{i}").json() for i in ids}
        if all(d["status"] in FINISHED for d in state.values()):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.1)


def _search(client: httpx.Client, kb: str, query: str, top_k: int = 6) -> list[dict[str, Any]]:
    response = client.post(f"/knowledge_bases/{kb}/search", json={"query": query, "top_k": top_k})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["data"]
    return results


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` (ASCII), with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def minimal_docx(heading: str, text: str) -> bytes:
    document = DocxDocument()
    document.add_heading(heading, level=1)
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


FORMATS: dict[str, tuple[bytes, str]] = {
    "notes.txt": (b"Plain notes.\n\nThe zorblax engine hums at night.\n", "zorblax"),
    "guide.md": (
        b"# Guide\n\n## Install\n\nRun the quextrin installer first.\n",
        "quextrin",
    ),
    "page.html": (
        b"<html><head><title>Page</title><script>var wumbly = 1;</script></head>"
        b"<body><h1>Intro</h1><p>The flimdorp widget is blue.</p></body></html>",
        "flimdorp",
    ),
    "table.csv": (b"city,fruit\nParis,glorptangerine\nRome,apple\n", "glorptangerine"),
    "data.json": (b'{"mascot": {"name": "snorkelwump", "age": 3}}', "snorkelwump"),
    "paper.pdf": (minimal_pdf("The brindlevax protocol is documented here."), "brindlevax"),
    "report.docx": (minimal_docx("Findings", "The trumbalo result holds."), "trumbalo"),
}


# --- bases -------------------------------------------------------------------------------


def test_create_read_update_delete(alice: httpx.Client) -> None:
    created = _create(alice, "papers", description="Research", chunk_size=800, chunk_overlap=50)
    assert created["id"].startswith("kb_")
    assert created == {
        "id": created["id"],
        "object": "knowledge_base",
        "name": "papers",
        "description": "Research",
        "embedding_model": None,
        "dimensions": None,
        "reindex_needed": False,
        "chunk_size": 800,
        "chunk_overlap": 50,
        "documents": 0,
        "chunks": 0,
        "created_at": created["created_at"],
        "updated_at": created["updated_at"],
    }
    assert alice.get(f"/knowledge_bases/{created['id']}").json() == created
    assert alice.get("/knowledge_bases/papers").json() == created  # by name too

    error = api_error(alice.post("/knowledge_bases", json={"name": "papers"}), 409)
    assert error["code"] == "knowledge_base_exists"

    patched = alice.patch(
        "/knowledge_bases/papers", json={"name": "articles", "description": "Reading"}
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["name"], patched.json()["description"]) == ("articles", "Reading")
    assert (
        api_error(alice.get("/knowledge_bases/papers"), 404)["code"] == "knowledge_base_not_found"
    )
    _create(alice, "papers")
    assert (
        api_error(alice.patch("/knowledge_bases/papers", json={"name": "articles"}), 409)["param"]
        == "name"
    )

    deleted = alice.delete("/knowledge_bases/articles")
    assert deleted.json() == {
        "id": created["id"],
        "object": "knowledge_base.deleted",
        "deleted": True,
    }
    assert (
        api_error(alice.get(f"/knowledge_bases/{created['id']}"), 404)["code"]
        == "knowledge_base_not_found"
    )
    api_error(alice.delete(f"/knowledge_bases/{created['id']}"), 404)


def test_list_is_paged_newest_first(alice: httpx.Client) -> None:
    ids = [_create(alice, f"base-{n}")["id"] for n in range(3)]
    first = alice.get("/knowledge_bases", params={"limit": 2}).json()
    assert [b["id"] for b in first["data"]] == [ids[2], ids[1]]
    assert first["has_more"] is True
    rest = alice.get("/knowledge_bases", params={"limit": 2, "after": first["last_id"]}).json()
    assert [b["id"] for b in rest["data"]] == [ids[0]]
    assert rest["has_more"] is False
    api_error(alice.get("/knowledge_bases", params={"limit": 0}), 400)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "kb_mine"}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": "a", "chunk_size": 50}, "chunk_size"),
        ({"name": "a", "chunk_size": 20_001}, "chunk_size"),
        ({"name": "a", "chunk_size": 200, "chunk_overlap": 100}, "chunk_overlap"),
        ({"name": "a", "embedder": "x"}, "embedder"),
    ],
)
def test_invalid_bodies_are_400(alice: httpx.Client, body: dict[str, Any], param: str) -> None:
    error = api_error(alice.post("/knowledge_bases", json=body), 400)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


# --- uploads, indexing, search -----------------------------------------------------------


def test_every_format_is_indexed_and_found(alice: httpx.Client) -> None:
    base = _create(alice, "formats")
    documents = _queued(_upload(alice, "formats", {n: d for n, (d, _) in FORMATS.items()}))
    assert [d["filename"] for d in documents] == list(FORMATS)
    first = documents[0]
    assert first["object"] == "knowledge_base.document"
    assert first["knowledge_base_id"] == base["id"]
    assert first["size"] == len(FORMATS["notes.txt"][0])
    assert len(first["sha256"]) == 64
    assert first["status"] in ("queued", "indexing", "ready")

    state = _wait(alice, "formats", [d["id"] for d in documents])
    for document in state.values():
        assert document["status"] == "ready", document
        assert document["chunks_done"] >= 1
        assert document["chunks_total"] == document["chunks_done"]
        assert document["progress"] == 1.0
    by_name = {d["filename"]: d for d in state.values()}
    assert by_name["paper.pdf"]["pages"] == 1

    for filename, (_, word) in FORMATS.items():
        results = _search(alice, "formats", word)
        assert results, filename
        top = results[0]
        assert top["filename"] == filename
        assert top["document_id"] == by_name[filename]["id"]
        assert word in top["text"]
        assert top["rank"] == 1
        assert set(top) >= {"score", "chunk_id", "title", "page", "section"}
    assert _search(alice, "formats", "brindlevax")[0]["page"] == 1
    assert (_search(alice, "formats", "quextrin")[0]["section"] or "").startswith("Guide")
    assert _search(alice, "formats", "wumbly") == []  # scripts are not text

    listed = alice.get(f"/knowledge_bases/{base['id']}").json()
    assert listed["documents"] == len(FORMATS)
    assert listed["chunks"] == sum(d["chunks_done"] for d in state.values())
    page = alice.get("/knowledge_bases/formats/documents", params={"limit": 4}).json()
    assert [d["filename"] for d in page["data"]] == list(FORMATS)[:4]  # oldest first
    assert page["has_more"] is True
    assert page["counts"] == {"ready": len(FORMATS)}
    rest = alice.get("/knowledge_bases/formats/documents", params={"after": page["last_id"]}).json()
    assert [d["filename"] for d in rest["data"]] == list(FORMATS)[4:]


def test_search_across_bases(alice: httpx.Client) -> None:
    _create(alice, "one")
    two = _create(alice, "two")
    _wait(alice, "one", [d["id"] for d in _queued(_upload(alice, "one", {"a.txt": b"qa plumbus"}))])
    _wait(alice, "two", [d["id"] for d in _queued(_upload(alice, "two", {"b.txt": b"qb plumbus"}))])
    response = alice.post(
        "/knowledge_bases/search",
        json={"query": "plumbus", "knowledge_bases": ["one", two["id"]], "top_k": 5},
    )
    assert response.status_code == 200, response.text
    results = response.json()["data"]
    assert {r["filename"] for r in results} == {"a.txt", "b.txt"}
    assert [r["rank"] for r in results] == [1, 2]
    assert {r["knowledge_base"] for r in results} == {"one", "two"}

    error = api_error(
        alice.post("/knowledge_bases/search", json={"query": "x", "knowledge_bases": ["nope"]}), 404
    )
    assert error["code"] == "knowledge_base_not_found"
    assert api_error(
        alice.post("/knowledge_bases/search", json={"query": "x", "knowledge_bases": []}), 400
    )
    api_error(alice.post("/knowledge_bases/one/search", json={"query": ""}), 400)
    api_error(alice.post("/knowledge_bases/one/search", json={"query": "x", "top_k": 51}), 400)
    api_error(alice.post("/knowledge_bases/one/search", json={"query": "x", "mode": "fast"}), 400)


def test_document_content_is_an_attachment_unless_plain_text(alice: httpx.Client) -> None:
    _create(alice, "downloads")
    files = {"notes.txt": b"just text", "page.html": b"<script>alert(1)</script>"}
    documents = {d["filename"]: d for d in _queued(_upload(alice, "downloads", files))}

    text = alice.get(f"/knowledge_bases/downloads/documents/{documents['notes.txt']['id']}/content")
    assert text.status_code == 200
    assert text.content == b"just text"
    assert text.headers["content-type"].startswith("text/plain")
    assert text.headers["content-disposition"] == "inline; filename*=UTF-8''notes.txt"
    assert text.headers["x-content-type-options"] == "nosniff"
    assert text.headers["content-security-policy"].startswith("sandbox;")

    html = alice.get(f"/knowledge_bases/downloads/documents/{documents['page.html']['id']}/content")
    assert html.content == files["page.html"]
    assert html.headers["content-type"] == "application/octet-stream"
    assert html.headers["content-disposition"].startswith("attachment;")
    assert html.headers["x-content-type-options"] == "nosniff"


def test_too_large_and_empty_files_are_refused_one_by_one(alice: httpx.Client) -> None:
    _create(alice, "limits")
    big = b"word " * (MAX_UPLOAD // 5 + 1)
    response = _upload(alice, "limits", {"big.txt": big, "ok.txt": b"fine", "empty.txt": b""})
    assert [d["filename"] for d in _queued(response)] == ["ok.txt"]
    failed = {f["filename"]: f for f in response.json()["failed_files"]}
    assert failed["big.txt"]["code"] == "file_too_large"
    assert failed["empty.txt"]["code"] == "empty_file"
    assert "error" in failed["big.txt"]

    error = api_error(_upload(alice, "limits", {"big.txt": big}), 413)
    assert error["code"] == "file_too_large"
    assert (
        api_error(_upload(alice, "limits", {"a.txt": b"", "b.txt": big}), 400)["param"] == "files"
    )
    assert (
        api_error(alice.post("/knowledge_bases/limits/documents", data={"x": "1"}), 400)["code"]
        == "missing_files"
    )
    many = {f"{n}.txt": b"x" for n in range(11)}
    assert api_error(_upload(alice, "limits", many), 400)["code"] == "too_many_files"
    counts = alice.get("/knowledge_bases/limits/documents").json()["counts"]
    assert sum(counts.values()) == 1  # nothing of the refused files was kept


def _chunked_multipart(fields: dict[str, tuple[str, bytes]]) -> tuple[dict[str, str], Any]:
    """Headers and a generator body for a multipart upload sent chunked (no
    Content-Length)."""
    boundary = "parleyboundary7d1a"
    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}

    def body() -> Iterator[bytes]:
        for field, (filename, data) in fields.items():
            yield (
                f"--{boundary}\r\n"
                f'content-disposition: form-data; name="{field}"; filename="{filename}"\r\n'
                "content-type: text/plain\r\n\r\n"
            ).encode()
            yield data
            yield b"\r\n"
        yield f"--{boundary}--\r\n".encode()

    return headers, body()


def test_an_upload_without_content_length_is_refused(alice: httpx.Client) -> None:
    _create(alice, "chunked")
    headers, body = _chunked_multipart({"files": ("a.txt", b"chunked upload")})
    response = alice.post("/knowledge_bases/chunked/documents", headers=headers, content=body)
    assert "content-length" not in response.request.headers
    error = api_error(response, 411)
    assert error["code"] == "length_required"
    assert alice.get("/knowledge_bases/chunked/documents").json()["data"] == []


def test_unreadable_documents_end_failed(alice: httpx.Client) -> None:
    _create(alice, "broken")
    files = {"tool.exe": b"MZ\x90\x00\x03\x00\x00\x00", "bad.json": b'{"a": [1, 2'}
    documents = _queued(_upload(alice, "broken", files))
    state = _wait(alice, "broken", [d["id"] for d in documents])
    for document in state.values():
        assert document["status"] == "failed", document
        assert document["error"]
        assert document["progress"] is None
    assert alice.get("/knowledge_bases/broken/documents").json()["counts"] == {"failed": 2}


def test_override_replaces_documents_of_the_same_name(alice: httpx.Client) -> None:
    _create(alice, "versions")
    old = _queued(_upload(alice, "versions", {"doc.txt": b"version grumblefax"}))[0]
    other = _queued(_upload(alice, "versions", {"other.txt": b"stays grumblefax"}))[0]
    _wait(alice, "versions", [old["id"], other["id"]])
    new = _queued(_upload(alice, "versions", {"doc.txt": b"version snizzlequirk"}, override=True))
    _wait(alice, "versions", [new[0]["id"]])
    listed = alice.get("/knowledge_bases/versions/documents").json()["data"]
    assert {d["id"] for d in listed} == {other["id"], new[0]["id"]}
    assert [r["filename"] for r in _search(alice, "versions", "grumblefax")] == ["other.txt"]
    assert _search(alice, "versions", "snizzlequirk")[0]["document_id"] == new[0]["id"]


def test_cancel_a_queued_document(alice: httpx.Client) -> None:
    _create(alice, "busy", chunk_size=200, chunk_overlap=0)
    filler = b"".join(b"Sentence number %d about nothing much.\n\n" % n for n in range(3000))
    files = {f"filler-{n}.txt": filler for n in range(8)}
    files["last.txt"] = b"The last document mentions yoinkplex."
    documents = _queued(_upload(alice, "busy", files))
    last = documents[-1]
    cancelled = alice.post(f"/knowledge_bases/busy/documents/{last['id']}/cancel")
    if cancelled.status_code == 200:
        assert cancelled.json()["status"] == "cancelled"
        final = _wait(alice, "busy", [d["id"] for d in documents], timeout=120)
        assert final[last["id"]]["status"] == "cancelled"  # the worker skipped it
        assert _search(alice, "busy", "yoinkplex") == []
        again = api_error(alice.post(f"/knowledge_bases/busy/documents/{last['id']}/cancel"), 409)
        assert again["code"] == "not_cancellable"
        reindexed = alice.post(f"/knowledge_bases/busy/documents/{last['id']}/reindex")
        assert reindexed.status_code == 202, reindexed.text
        assert reindexed.json()["status"] == "queued"
    else:  # the worker was faster than the request: it is already indexed
        assert api_error(cancelled, 409)["code"] == "not_cancellable"
    final = _wait(alice, "busy", [last["id"]], timeout=120)
    assert final[last["id"]]["status"] == "ready"
    assert _search(alice, "busy", "yoinkplex")[0]["document_id"] == last["id"]


def test_reindex(alice: httpx.Client) -> None:
    _create(alice, "again")
    documents = _queued(_upload(alice, "again", {"a.txt": b"alpha", "b.txt": b"beta"}))
    ids = [d["id"] for d in documents]
    _wait(alice, "again", ids)
    one = alice.post(f"/knowledge_bases/again/documents/{ids[0]}/reindex")
    assert one.status_code == 202, one.text
    _wait(alice, "again", ids)
    everything = alice.post("/knowledge_bases/again/reindex")
    assert everything.json() == {"queued": 2}
    state = _wait(alice, "again", ids)
    assert all(d["status"] == "ready" for d in state.values())
    assert _search(alice, "again", "beta")[0]["document_id"] == ids[1]


def test_delete_a_document(alice: httpx.Client) -> None:
    _create(alice, "pruned")
    documents = _queued(_upload(alice, "pruned", {"a.txt": b"kept", "b.txt": b"gone zizzwock"}))
    _wait(alice, "pruned", [d["id"] for d in documents])
    gone = documents[1]["id"]
    assert _search(alice, "pruned", "zizzwock")
    deleted = alice.delete(f"/knowledge_bases/pruned/documents/{gone}")
    assert deleted.json() == {
        "id": gone,
        "object": "knowledge_base.document.deleted",
        "deleted": True,
    }
    assert _search(alice, "pruned", "zizzwock") == []
    for response in (
        alice.get(f"/knowledge_bases/pruned/documents/{gone}"),
        alice.get(f"/knowledge_bases/pruned/documents/{gone}/content"),
        alice.delete(f"/knowledge_bases/pruned/documents/{gone}"),
        alice.post(f"/knowledge_bases/pruned/documents/{gone}/cancel"),
    ):
        assert api_error(response, 404)["code"] == "document_not_found"
    assert [
        d["filename"] for d in alice.get("/knowledge_bases/pruned/documents").json()["data"]
    ] == ["a.txt"]


def test_deleting_a_base_removes_its_files(alice: httpx.Client, server: ParleyServer) -> None:
    base = _create(alice, "temporary")
    documents = _queued(_upload(alice, "temporary", {"a.txt": b"one", "b.md": b"# two"}))
    _wait(alice, "temporary", [d["id"] for d in documents])
    folder: Path = server.data_dir / "knowledge" / base["id"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(d["id"] for d in documents)
    assert alice.delete("/knowledge_bases/temporary").status_code == 200
    # gone from every query at once, its name free again; rows and files go in the
    # background
    api_error(alice.get(f"/knowledge_bases/temporary/documents/{documents[0]['id']}"), 404)
    api_error(alice.get(f"/knowledge_bases/{base['id']}"), 404)
    reused = _create(alice, "temporary")
    assert reused["id"] != base["id"]
    deadline = time.monotonic() + 20
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not folder.exists()
    assert alice.delete("/knowledge_bases/temporary").status_code == 200


# --- owners ------------------------------------------------------------------------------


def test_another_owner_sees_nothing(alice: httpx.Client, bob: httpx.Client) -> None:
    base = _create(alice, "private")
    document = _queued(_upload(alice, "private", {"secret.txt": b"the vault code blorb"}))[0]
    _wait(alice, "private", [document["id"]])
    doc = f"/documents/{document['id']}"
    for reference in ("private", base["id"]):
        for response in (
            bob.get(f"/knowledge_bases/{reference}"),
            bob.patch(f"/knowledge_bases/{reference}", json={"description": "mine"}),
            bob.delete(f"/knowledge_bases/{reference}"),
            bob.get(f"/knowledge_bases/{reference}/documents"),
            bob.get(f"/knowledge_bases/{reference}{doc}"),
            bob.get(f"/knowledge_bases/{reference}{doc}/content"),
            bob.delete(f"/knowledge_bases/{reference}{doc}"),
            bob.post(f"/knowledge_bases/{reference}{doc}/cancel"),
            bob.post(f"/knowledge_bases/{reference}{doc}/reindex"),
            bob.post(f"/knowledge_bases/{reference}/reindex"),
            bob.post(f"/knowledge_bases/{reference}/search", json={"query": "blorb"}),
            bob.post(
                "/knowledge_bases/search", json={"query": "blorb", "knowledge_bases": [reference]}
            ),
            _upload(bob, reference, {"x.txt": b"intruder"}),
        ):
            assert api_error(response, 404)["code"] == "knowledge_base_not_found"
    assert bob.get("/knowledge_bases").json()["data"] == []

    # bob's own base of the same name holds none of alice's documents
    _create(bob, "private")
    assert bob.get("/knowledge_bases/private/documents").json()["data"] == []
    assert _search(bob, "private", "blorb") == []
    assert alice.get(f"/knowledge_bases/private{doc}").json()["status"] == "ready"
    assert _search(alice, "private", "blorb")[0]["document_id"] == document["id"]


def test_disabled_knowledge_answers_404(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = server_config(upstream, knowledge={"enabled": False})
    server = ParleyServer(tmp_path_factory.mktemp("no-knowledge"), config)
    with server, httpx.Client(base_url=f"{server.url}/v1", timeout=10) as client:
        for response in (
            client.get("/knowledge_bases"),
            client.post("/knowledge_bases", json={"name": "x"}),
            client.get("/knowledge_bases/x/documents"),
            client.post("/knowledge_bases/search", json={"query": "q", "knowledge_bases": ["x"]}),
        ):
            assert api_error(response, 404)["code"] == "knowledge_disabled"
