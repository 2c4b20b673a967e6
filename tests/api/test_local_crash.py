"""A crash of the local model costs one request, never the server.

A real Parley server runs the local provider with the scripted backend (its worker
aborts, segfaults or hangs on request; no native code) beside a mock OpenAI upstream,
and the official ``openai`` client talks to it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    data = tmp_path_factory.mktemp("local-crash")
    model = data / "scripted.gguf"
    model.write_bytes(b"scripted")
    config = {
        "providers": [
            {
                "name": "local",
                "kind": "local",
                "model_path": str(model),
                "backend": "tests.support.local_backends:load",
                "cancel_grace_seconds": 1,
            },
            {"name": "mock", "kind": "openai", "base_url": upstream.base_url, "api_key": "k"},
        ],
        "chat": {"checkpoint_seconds": 0.2},
        "agent": {"retry_backoff_seconds": [], "between_chunks_seconds": 2},
    }
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with ParleyServer(data, config, env={"PYTHONPATH": pythonpath}) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


def _local(client: openai.OpenAI, text: str) -> str:
    reply = client.chat.completions.create(
        model="local/smollm2-135m-instruct",
        messages=[{"role": "user", "content": text}],
        max_tokens=3,
    )
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize("how", ["abort", "segv"])
def test_a_crash_is_one_503_and_every_other_request_carries_on(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI, how: str
) -> None:
    assert _local(client, "count") == "word0 word1 word2 "
    # a slow stream from another provider is in flight while the local model crashes
    upstream.queue_text(*[f"piece{i} " for i in range(20)], delay=0.05)
    streamed: list[str] = []

    def stream_from_the_other_provider() -> None:
        for chunk in client.chat.completions.create(
            model="mock/mock-model", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            streamed.extend(c.delta.content or "" for c in chunk.choices)

    other = threading.Thread(target=stream_from_the_other_provider)
    other.start()

    with pytest.raises(openai.InternalServerError) as caught:
        _local(client, how)

    other.join(timeout=30)
    assert caught.value.status_code == 503
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "local_model_crashed"
    assert "worker process killed by SIG" in error["message"]
    assert "".join(streamed) == "".join(f"piece{i} " for i in range(20))
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    assert _local(client, "count") == "word0 word1 word2 "  # a new worker answers
    assert server.process is not None
    assert server.process.poll() is None


def test_a_crash_mid_stream_ends_the_stream_with_an_error_and_keeps_the_text(
    server: ParleyServer, client: openai.OpenAI
) -> None:
    stream = client.chat.completions.create(
        model="local/smollm2-135m-instruct",
        messages=[{"role": "user", "content": "abort"}],
        stream=True,
    )
    chunks: list[ChatCompletionChunk] = []
    with pytest.raises(openai.APIError) as caught:
        chunks.extend(stream)

    text = "".join(c.delta.content or "" for chunk in chunks for c in chunk.choices)
    assert text == "partial "
    conversation_id = (chunks[0].model_extra or {})["parley"]["conversation_id"]
    assert "local model" in caught.value.message
    stored = client.get(f"/conversations/{conversation_id}", cast_to=object)
    assert isinstance(stored, dict)
    reply = stored["messages"][-1]
    assert (reply["role"], reply["status"], reply["content"]) == (
        "assistant",
        "incomplete",
        "partial ",
    )
    assert _local(client, "count") == "word0 word1 word2 "


def test_a_hung_worker_is_killed_at_the_deadline_and_replaced(
    server: ParleyServer, client: openai.OpenAI
) -> None:
    stream = client.chat.completions.create(
        model="local/smollm2-135m-instruct",
        messages=[{"role": "user", "content": "hang"}],
        stream=True,
    )
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "sent nothing for 2 s between chunks" in caught.value.message

    # the worker ignored the cancel: it is killed after its 1 s grace, and a new one
    # answers the next request
    assert _local(client, "count") == "word0 word1 word2 "
    assert "did not stop within 1 s of a cancel: killed" in server.log()
