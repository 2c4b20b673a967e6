"""Retries that do not multiply under a client's own: the official ``openai`` SDK retries
by itself (it sends ``x-stainless-retry-count``), so Parley tries each model once for it
and says ``x-should-retry``; a client without those headers keeps Parley's retries.

A real Parley server in front of a loopback mock upstream of this module's own, with
Parley's retries on (three, 10 ms apart: four tries per model) and the first-token
deadline at 2 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name a colour."}]
RETRIES = [0.01, 0.01, 0.01]
"""Parley's own retries on one model: four tries in all."""


@pytest.fixture(scope="module")
def mock() -> Iterator[MockOpenAI]:
    with MockOpenAI() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def _fresh(mock: MockOpenAI) -> Iterator[None]:
    mock.reset()
    mock.fallback = None
    yield
    mock.fallback = None


def _config(mock: MockOpenAI, client_retries: str) -> dict[str, Any]:
    return server_config(
        mock,
        agent={
            "retry_backoff_seconds": RETRIES,
            "first_token_base_seconds": 2.0,
            "client_retries": client_retries,
        },
        models={
            "fast": {"provider": "mock", "model": "mock-model"},
            "backed": {"provider": "mock", "model": "mock-model", "fallbacks": ["mock/mock-large"]},
        },
        # a reply goes on when its client leaves: the SDK's timed-out try keeps running
        server={"on_disconnect": "continue"},
    )


@pytest.fixture(scope="module")
def servers(
    mock: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ParleyServer]]:
    """The default (``agent.client_retries: defer``) and the old way (``ignore``)."""
    defer = ParleyServer(tmp_path_factory.mktemp("defer"), _config(mock, "defer"))
    ignore = ParleyServer(tmp_path_factory.mktemp("ignore"), _config(mock, "ignore"))
    with defer, ignore:
        yield {"defer": defer, "ignore": ignore}


@pytest.fixture
def server(servers: dict[str, ParleyServer]) -> ParleyServer:
    return servers["defer"]


def sdk(server: ParleyServer, *, max_retries: int = 2, timeout: float = 30) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.url}/v1", api_key="x", max_retries=max_retries, timeout=timeout
    )


def always(status: int, headers: dict[str, str] | None = None) -> Reply:
    body = orjson.dumps({"error": {"message": f"mock {status}", "type": "mock", "code": None}})
    return Reply(status=status, body=body, headers=headers or {})


@pytest.mark.parametrize(("mode", "calls"), [("defer", 3), ("ignore", 12)])
def test_an_sdk_call_reaches_the_upstream_once_per_sdk_try(
    servers: dict[str, ParleyServer], mock: MockOpenAI, mode: str, calls: int
) -> None:
    """An upstream answering 503 to everything: the SDK's three tries (max_retries=2)
    are three upstream calls, where before (``ignore``) each made four of Parley's."""
    mock.fallback = always(503)
    with sdk(servers[mode]) as client, pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="fast", messages=ASK)
    assert caught.value.status_code == 503
    assert caught.value.response.headers["x-should-retry"] == "true"
    assert len(mock.requests) == calls


def test_the_sdk_retry_succeeds(server: ParleyServer, mock: MockOpenAI) -> None:
    mock.queue_error(503, "busy")
    mock.queue_text("Blue.")
    with sdk(server) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="fast",
            messages=ASK,
        )
    assert raw.retries_taken == 1  # the SDK's retry answered, not one of Parley's
    assert raw.parse().choices[0].message.content == "Blue."
    assert len(mock.requests) == 2


def test_the_sdk_retry_of_a_stream_succeeds(server: ParleyServer, mock: MockOpenAI) -> None:
    """A stream failing before its first chunk is an HTTP error the SDK retries."""
    mock.queue_error(502, "bad gateway")
    mock.queue_text("Bl", "ue.")
    with sdk(server) as client:
        chunks = list(
            client.chat.completions.create(
                model="fast",
                messages=ASK,
                stream=True,
            )
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Blue."
    assert len(mock.requests) == 2


def test_fallback_models_are_still_tried(server: ParleyServer, mock: MockOpenAI) -> None:
    """The alias's fallback is another upstream: one SDK try reaches it."""
    mock.queue_error(503, "busy")
    mock.queue_text("Green.")
    with sdk(server) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="backed",
            messages=ASK,
        )
    assert raw.retries_taken == 0
    assert raw.parse().choices[0].message.content == "Green."
    assert [r["model"] for r in mock.requests] == ["mock-model", "mock-large"]


def test_a_client_without_the_headers_keeps_parleys_retries(
    server: ParleyServer, mock: MockOpenAI
) -> None:
    mock.queue_error(503, "busy")
    mock.queue_text("Red.")
    with httpx.Client(base_url=f"{server.url}/v1", timeout=30) as client:
        response = client.post("/chat/completions", json={"model": "fast", "messages": ASK})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Red."
    assert len(mock.requests) == 2


def test_an_sdk_retry_after_its_timeout(server: ParleyServer, mock: MockOpenAI) -> None:
    """The upstream's first reply starts after the SDK gave up on its first try (1 s)
    and after Parley's first-token deadline (2 s): the SDK's second try is answered, and
    the first try's reply, which goes on without its client, is not retried by Parley
    behind the SDK's back."""
    marker = f"timeout-{time.monotonic_ns()}"
    mock.queue(Reply(frames=text_frames(["Too late."]), first_delay=3.0))
    mock.queue_text("In time.")
    with sdk(server, timeout=1.0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="fast",
            messages=[{"role": "user", "content": marker}],
        )
    assert raw.retries_taken == 1
    assert raw.parse().choices[0].message.content == "In time."
    statuses = _replies_to(server.db_path, marker, count=2)
    assert sorted(statuses) == ["complete", "failed"]  # the first try met its deadline
    assert len(mock.requests) == 2


def _replies_to(db_path: Path, marker: str, *, count: int) -> list[str]:
    """The statuses of the replies to the user messages holding ``marker``, once
    ``count`` of them have ended."""
    deadline = time.monotonic() + 20
    while True:
        rows = db_rows(
            db_path,
            "SELECT reply.status FROM messages AS reply JOIN messages AS ask"
            " ON reply.parent_id = ask.id WHERE ask.role = 'user' AND ask.parts LIKE ?",
            f"%{marker}%",
        )
        statuses = [row["status"] for row in rows]
        if len(statuses) >= count and "streaming" not in statuses:
            return statuses
        assert time.monotonic() < deadline, statuses
        time.sleep(0.05)


def test_x_should_retry(server: ParleyServer, mock: MockOpenAI) -> None:
    with sdk(server, max_retries=0) as client:
        # retryable, with the upstream's Retry-After passed on
        mock.queue_error(503, "busy", headers={"retry-after": "2"})
        with pytest.raises(openai.InternalServerError) as unavailable:
            client.chat.completions.create(model="fast", messages=ASK)
        headers = unavailable.value.response.headers
        assert (headers["x-should-retry"], headers["retry-after"]) == ("true", "2")

        # the same before a stream's first chunk (a real HTTP error)
        mock.queue_error(429, "slow down")
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(
                model="fast",
                messages=ASK,
                stream=True,
            )
        assert limited.value.response.headers["x-should-retry"] == "true"

        # the upstream refused the request itself: sending it again will not help
        mock.queue_error(400, "bad request")
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="fast", messages=ASK)
        assert refused.value.response.headers["x-should-retry"] == "false"
    assert len(mock.requests) == 3

    # a 502 the SDK would retry by itself, for an upstream key that is refused
    mock.reset()
    mock.fallback = always(401)
    with sdk(server) as client, pytest.raises(openai.InternalServerError) as rejected:
        client.chat.completions.create(model="fast", messages=ASK)
    assert rejected.value.status_code == 502
    assert rejected.value.response.headers["x-should-retry"] == "false"
    assert len(mock.requests) == 1  # no SDK retry (before: 3)


def test_an_idempotency_key_is_a_client_that_retries(
    server: ParleyServer, mock: MockOpenAI
) -> None:
    mock.queue_error(503, "busy")
    mock.queue_text("Never sent.")
    with httpx.Client(base_url=f"{server.url}/v1", timeout=30) as client:
        response = client.post(
            "/chat/completions",
            json={"model": "fast", "messages": ASK},
            headers={"Idempotency-Key": f"key-{time.monotonic_ns()}"},
        )
    assert response.status_code == 503, response.text
    assert response.headers["x-should-retry"] == "true"
    assert len(mock.requests) == 1


def test_after_a_server_tool_ran_parley_retries_the_step_itself(
    server: ParleyServer, mock: MockOpenAI
) -> None:
    """An SDK retry would run the turn again, its tools too: a later step is retried by
    Parley (four tries), and the error tells the SDK not to."""
    mock.queue_tool_calls([("call_1", "current_time", "{}")])
    mock.fallback = always(503)
    with sdk(server) as client, pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="fast",
            messages=ASK,
            tools=["current_time"],  # type: ignore[list-item]
        )
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(mock.requests) == 1 + 1 + len(RETRIES)
