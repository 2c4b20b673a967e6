"""Revoking a key ends its running replies within a second (issue 17, item 4).

Before, a revoked key's stream delivered the rest of its chunks and finished, and an
agent turn could run on for twenty minutes. Here a stream is cut while it runs, the
reply is saved as interrupted, the client is told why, and another key's stream on the
same server is untouched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, auth={"revocation_check_seconds": 0.2})
    with ParleyServer(tmp_path_factory.mktemp("revocation"), config) as parley:
        yield parley


class Reader:
    """Reads one stream on a thread: what arrived, when it ended and how."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.text = ""
        self.error: openai.APIError | None = None
        self.ended_at: float | None = None
        self.conversation_id: str | None = None
        self.started = threading.Event()
        stream = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "count"}], stream=True
        )
        self._thread = threading.Thread(target=self._read, args=(stream,))
        self._thread.start()

    def _read(self, stream: Any) -> None:
        try:
            for chunk in stream:
                self.conversation_id = chunk.model_extra["parley"]["conversation_id"]
                self.text += "".join(c.delta.content or "" for c in chunk.choices)
                if self.text:
                    self.started.set()
        except openai.APIError as exc:
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.started.set()

    def join(self) -> None:
        self._thread.join(timeout=60)


def test_a_revoked_keys_stream_ends_within_a_second(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    doomed_key, other_key = server.create_key("mallory"), server.create_key("alice")
    for _ in range(2):
        upstream.queue_text(*[f"tick{i} " for i in range(100)], delay=0.1)  # 10 s each
    doomed = Reader(openai.OpenAI(base_url=f"{server.url}/v1", api_key=doomed_key, max_retries=0))
    other = Reader(openai.OpenAI(base_url=f"{server.url}/v1", api_key=other_key, max_retries=0))
    assert doomed.started.wait(10)
    assert other.started.wait(10)

    revoked = server.cli("keys", "revoke", doomed_key[: len("sk-parley-") + 6])  # its prefix
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr
    revoked_at = time.monotonic()
    doomed.join()
    other.join()

    assert doomed.ended_at is not None
    assert doomed.ended_at - revoked_at < 1.5
    assert doomed.error is not None
    assert "revoked" in doomed.error.message
    assert doomed.text.count("tick") < 100
    assert other.error is None
    assert other.text.count("tick") == 100  # the other key's stream went on to its end
    (row,) = db_rows(
        server,
        "SELECT status FROM messages WHERE conversation_id=? AND role='assistant'",
        doomed.conversation_id,
    )
    assert row["status"] == "interrupted"
    refused = httpx.get(
        f"{server.url}/v1/models", headers={"authorization": f"Bearer {doomed_key}"}
    )
    assert refused.status_code == 401
