"""A knowledge base made over HTTP on a running server, returned once it is indexed."""

from __future__ import annotations

import time
from typing import Any

import httpx


def indexed_base(
    url: str,
    name: str,
    files: dict[str, bytes],
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """The base ``name`` created on the server at ``url`` with ``files`` (file name ->
    content) uploaded, once every document is ready (AssertionError otherwise)."""
    created = httpx.post(f"{url}/v1/knowledge_bases", json={"name": name}, headers=headers)
    assert created.status_code == 200, created.text
    upload = [("files", (filename, data, "text/plain")) for filename, data in files.items()]
    uploaded = httpx.post(
        f"{url}/v1/knowledge_bases/{name}/documents", files=upload, headers=headers
    )
    assert uploaded.status_code == 202, uploaded.text
    deadline = time.monotonic() + timeout
    statuses: list[str] = []
    while time.monotonic() < deadline:
        listed = httpx.get(f"{url}/v1/knowledge_bases/{name}/documents", headers=headers)
        statuses = [d["status"] for d in listed.json()["data"]]
        if statuses and all(s == "ready" for s in statuses):
            return dict(httpx.get(f"{url}/v1/knowledge_bases/{name}", headers=headers).json())
        assert "failed" not in statuses, listed.text
        time.sleep(0.1)
    raise AssertionError(f"{name} was not indexed in {timeout} s: {statuses}")
