"""Files users (or models) supplied never run as a page of Parley's origin: a knowledge
document's ``/content`` and ``/v1/files/{id}`` are sent sandboxed and never sniffed,
inline only for raster images, PDF and plain text, as attachments otherwise, with the
file name as ``filename*`` (UTF-8)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

SANDBOX = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
UPLOADS: dict[str, tuple[bytes, str]] = {
    "notes.txt": (b"just text", "text/plain"),
    "page.html": (b"<script>alert(document.cookie)</script>", "text/html"),
    "drawing.svg": (b"<svg onload='alert(1)'/>", "image/svg+xml"),
    "app.js": (b"alert(1)", "text/javascript"),
    "readme.md": (b"# Title", "text/markdown"),
    "picture.png": (PNG, "image/png"),
    "photo.jpg": (b"\xff\xd8\xff\xe0 jpeg", "image/jpeg"),
    "paper.pdf": (b"%PDF-1.4 not really", "application/pdf"),
    "fake.png": (b"<html><script>alert(1)</script></html>", "text/html"),
    "Ünïcode résumé.txt": ("naïve".encode(), "text/plain"),
}
EXPECTED: dict[str, tuple[str, str]] = {
    "notes.txt": ("inline", "text/plain; charset=utf-8"),
    "page.html": ("attachment", "application/octet-stream"),
    "drawing.svg": ("attachment", "application/octet-stream"),
    "app.js": ("attachment", "application/octet-stream"),
    "readme.md": ("attachment", "text/markdown; charset=utf-8"),
    "picture.png": ("inline", "image/png"),
    "photo.jpg": ("inline", "image/jpeg"),
    "paper.pdf": ("inline", "application/pdf"),
    "fake.png": ("attachment", "application/octet-stream"),  # its declared type rules
    "Ünïcode résumé.txt": ("inline", "text/plain; charset=utf-8"),
}
"""Disposition and served type of each upload."""


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "none", "max_files_per_upload": 20})
    with ParleyServer(tmp_path_factory.mktemp("downloads"), config) as parley:
        yield parley


@pytest.fixture(scope="module")
def documents(server: ParleyServer) -> dict[str, dict[str, Any]]:
    with httpx.Client(base_url=f"{server.url}/v1", timeout=30) as client:
        assert client.post("/knowledge_bases", json={"name": "dl"}).status_code == 200
        files = [("files", (name, data, kind)) for name, (data, kind) in UPLOADS.items()]
        response = client.post("/knowledge_bases/dl/documents", files=files)
    assert response.status_code == 202, response.text
    assert response.json()["failed_files"] == []
    return {d["filename"]: d for d in response.json()["data"]}


@pytest.mark.parametrize("name", sorted(UPLOADS))
def test_a_document_is_sandboxed_and_inline_only_when_safe(
    server: ParleyServer, documents: dict[str, dict[str, Any]], name: str
) -> None:
    document_id = documents[name]["id"]
    response = httpx.get(
        f"{server.url}/v1/knowledge_bases/dl/documents/{document_id}/content", timeout=30
    )

    assert response.status_code == 200, response.text
    assert response.content == UPLOADS[name][0]
    disposition, media_type = EXPECTED[name]
    assert response.headers["content-type"] == media_type
    assert response.headers["content-disposition"] == f"{disposition}; filename*=UTF-8''" + quote(
        name, safe=""
    )
    assert response.headers["x-content-type-options"] == "nosniff"
    if media_type == "application/pdf":  # Chromium's viewer does not open a sandboxed PDF
        assert "content-security-policy" not in response.headers
    else:
        assert response.headers["content-security-policy"] == SANDBOX


def test_a_replys_image_is_sandboxed_and_inline(server: ParleyServer, upstream: MockOpenAI) -> None:
    data = base64.b64encode(PNG).decode()
    upstream.queue_text(f"![chart](data:image/png;base64,{data})")
    reply = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": "draw"}]},
        timeout=30,
    ).json()
    url = reply["choices"][0]["message"]["content"].split("](")[1].rstrip(")")
    assert url.startswith("/v1/files/img_")

    response = httpx.get(f"{server.url}{url}")

    assert response.status_code == 200
    assert response.content == PNG
    assert response.headers["content-type"] == "image/png"
    file_name = url.rsplit("/", 1)[1] + ".png"
    assert response.headers["content-disposition"] == f"inline; filename*=UTF-8''{file_name}"
    assert response.headers["content-security-policy"] == SANDBOX
    assert response.headers["x-content-type-options"] == "nosniff"
