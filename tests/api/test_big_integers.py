"""Integers past 64 bits in request bodies are refused, never a 500 (found fuzzing the
schema, issue 17, item 8).

OpenAI's integers are 64-bit, and so are orjson's and SQLite's. ``POST /v1/tasks`` took
any ``max_tokens`` (the chat route holds it to ``chat.max_tokens_limit``): from 2**64 on
the upstream request could not be written (500), and the audit row of the call could not
be hashed, so that batch, and every audit row after it, was retried for ever. An
assistant took any ``sampling.seed`` or ``max_tokens``, and then every chat with it was
a 500.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

from parley.store.audit import request_hash
from parley.testing.mock_openai import MockOpenAI

HUGE = 2**64


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("integers"), server_config(upstream)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ParleyServer) -> Iterator[httpx.Client]:
    with server.client(server.create_key("alice")) as client:
        yield client


@pytest.mark.parametrize("max_tokens", [HUGE, 2**70, 1_000_001])
def test_a_task_holds_max_tokens_to_the_servers_limit(
    client: httpx.Client, upstream: MockOpenAI, max_tokens: int
) -> None:
    response = client.post("/tasks", json={"task": "Say hello.", "max_tokens": max_tokens})

    error = api_error(response, 400)
    assert error["param"] == "max_tokens"
    assert "1000000" in error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize(
    "sampling",
    [{"seed": HUGE}, {"seed": -(2**63) - 1}, {"max_tokens": HUGE}, {"max_tokens": 2**63}],
)
def test_an_assistant_takes_only_64_bit_sampling_integers(
    client: httpx.Client, sampling: dict[str, int]
) -> None:
    response = client.post("/assistants", json={"name": "big", "sampling": sampling})

    error = api_error(response, 400)
    assert error["param"] == f"sampling.{next(iter(sampling))}"


def test_an_assistant_with_the_largest_seed_still_answers(
    client: httpx.Client, upstream: MockOpenAI
) -> None:
    sampling = {"seed": 2**63 - 1, "max_tokens": 100}
    created = client.post("/assistants", json={"name": "edge", "sampling": sampling})
    assert created.status_code == 200, created.text
    upstream.queue_text("Hello.")

    reply = client.post(
        "/chat/completions",
        json={"assistant": "edge", "messages": [{"role": "user", "content": "Hi"}]},
    )

    assert reply.status_code == 200, reply.text
    assert upstream.requests[-1]["seed"] == 2**63 - 1


def test_a_request_with_a_huge_integer_can_still_be_hashed_for_the_audit_log() -> None:
    request = {"model": "m", "max_tokens": HUGE}

    assert request_hash(request) == request_hash(dict(request))
    assert request_hash(request) != request_hash({"model": "m", "max_tokens": HUGE + 1})
