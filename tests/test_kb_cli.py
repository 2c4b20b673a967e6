"""``parley kb`` against a real server: ingest a folder (recursive, hidden and unsupported
files skipped), wait for indexing, summary and exit codes; list, search and delete."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.testing.mock_openai import MockOpenAI
from tests.conftest import server_config
from tests.support.server import ParleyServer, free_port


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "none"})
    with ParleyServer(tmp_path_factory.mktemp("kb-cli"), config) as running:
        yield running


@pytest.fixture(scope="module")
def key(server: ParleyServer) -> str:
    return server.create_key("carol")


@pytest.fixture
def api(server: ParleyServer, key: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{server.url}/v1",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as client:
        yield client
        for base in client.get("/knowledge_bases", params={"limit": 100}).json()["data"]:
            client.delete(f"/knowledge_bases/{base['id']}")


def kb(server: ParleyServer, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``parley kb ...`` in a subprocess, the server and key from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update({"PARLEY_URL": server.url, "PARLEY_API_KEY": key, "COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "parley", "kb", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "readme.md").write_text("# Readme\n\nThe frobnicator needs oil.\n")
    (root / "sub" / "notes.txt").write_text("Remember the quaggle meeting.\n")
    (root / "sub" / "deeper" / "table.csv").write_text("name,role\nzibbet,admin\n")
    (root / "data.json").write_text('{"planet": "vorpania"}')
    (root / ".hidden.txt").write_text("not uploaded")
    (root / ".git" / "config.txt").write_text("not uploaded either")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (root / "script.py").write_text("print('skipped')")
    return root


def _documents(api: httpx.Client, name: str) -> dict[str, Any]:
    return {d["filename"]: d for d in api.get(f"/knowledge_bases/{name}/documents").json()["data"]}


def test_ingest_a_folder(server: ParleyServer, key: str, api: httpx.Client, folder: Path) -> None:
    result = kb(server, key, "ingest", str(folder), "--kb", "manuals")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "created knowledge base manuals" in result.stdout
    assert "uploading 4 file(s)" in result.stdout
    assert "4 ready" in result.stdout
    assert "0 failed or cancelled, 0 not uploaded" in result.stdout
    for name in ("readme.md", "notes.txt", "table.csv", "data.json"):
        assert name in result.stdout

    documents = _documents(api, "manuals")
    assert set(documents) == {"readme.md", "notes.txt", "table.csv", "data.json"}
    assert all(d["status"] == "ready" for d in documents.values())

    # a second run adds to the existing base; --glob narrows the files
    again = kb(server, key, "ingest", str(folder), "--kb", "manuals", "--glob", "*.txt")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "created" not in again.stdout
    assert "uploading 1 file(s)" in again.stdout
    assert api.get("/knowledge_bases/manuals").json()["documents"] == 5

    listed = kb(server, key, "list")
    assert listed.returncode == 0, listed.stderr
    assert "manuals" in listed.stdout

    found = kb(server, key, "search", "quaggle meeting", "--kb", "manuals", "--top-k", "3")
    assert found.returncode == 0, found.stderr
    assert found.stdout.lstrip().startswith("1. notes.txt")
    assert "Remember the quaggle meeting." in found.stdout

    deleted = kb(server, key, "delete", "manuals", "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert api.get("/knowledge_bases/manuals").status_code == 404
    assert kb(server, key, "delete", "manuals", "--yes").returncode == 2


def test_a_failed_document_exits_1(
    server: ParleyServer, key: str, api: httpx.Client, tmp_path: Path
) -> None:
    (tmp_path / "good.md").write_text("# Good\n\nfine")
    (tmp_path / "bad.json").write_text('{"broken": ')
    (tmp_path / "empty.txt").write_text("")
    result = kb(server, key, "ingest", str(tmp_path), "--kb", "mixed")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 ready" in result.stdout
    assert "1 failed or cancelled, 1 not uploaded" in result.stdout
    assert "bad.json" in result.stdout
    assert "empty.txt" in result.stdout
    documents = _documents(api, "mixed")
    assert documents["good.md"]["status"] == "ready"
    assert documents["bad.json"]["status"] == "failed"


def test_a_single_file_without_waiting(
    server: ParleyServer, key: str, api: httpx.Client, tmp_path: Path
) -> None:
    file = tmp_path / "one.txt"
    file.write_text("single")
    result = kb(server, key, "ingest", str(file), "--kb", "single", "--no-wait")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 document(s) queued" in result.stdout
    assert set(_documents(api, "single")) == {"one.txt"}


def test_usage_errors_exit_2(server: ParleyServer, key: str, tmp_path: Path) -> None:
    missing = kb(server, key, "ingest", str(tmp_path / "nope"), "--kb", "x")
    assert missing.returncode == 2
    assert "no such file or folder" in missing.stdout

    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    nothing = kb(server, key, "ingest", str(tmp_path), "--kb", "x")
    assert nothing.returncode == 2
    assert "no supported files" in nothing.stdout

    (tmp_path / "a.txt").write_text("a")
    no_base = kb(server, key, "ingest", str(tmp_path), "--kb", "absent", "--no-create")
    assert no_base.returncode == 2
    assert "no knowledge base named 'absent'" in no_base.stdout

    bad_key = kb(server, "sk-parley-wrong", "list")
    assert bad_key.returncode == 2

    down = kb(server, key, "list", "--server", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 2
    assert "cannot reach the Parley server" in down.stdout


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/"])
def test_the_server_may_be_given_with_v1_too(
    server: ParleyServer, key: str, api: httpx.Client, suffix: str
) -> None:
    api.post("/knowledge_bases", json={"name": "either-form"})

    listed = kb(server, key, "list", "--server", server.url + suffix)

    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "either-form" in listed.stdout
