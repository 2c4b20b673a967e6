"""Every operation authenticates before anything else (issue 17, item 8).

Schema fuzzing found five operations that validated a body (and compiled its regular
expressions) for a caller without a key. Here every operation of the served OpenAPI
schema is called without a key, and with a garbage one, with a body that is wrong in
every way: each must answer 401, before it looks at the body.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

PUBLIC = {
    "/",
    "/health",
    "/ready",
    "/docs",
    "/redoc",
    "/openapi.json",
    "/docs/oauth2-redirect",
    "/v1/session",  # how a browser gives its key: tests/api/test_browser_sessions.py
}
BAD_BODY = {"name": ["not", "a", "name"], "regex_rules": [{"pattern": "(a|aa)+$("}], "x": {}}


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("auth-first"), server_config(upstream)) as s:
        s.create_key("alice")  # from now on every request needs a key
        yield s


def _operations(server: ParleyServer) -> list[tuple[str, str]]:
    schema: dict[str, Any] = httpx.get(f"{server.url}/openapi.json").json()
    found = [
        (method.upper(), re.sub(r"\{[^}]+\}", "x", path))
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "patch", "put", "delete") and path not in PUBLIC
    ]
    assert len(found) > 50, found  # the whole API, not a part of it
    return found


@pytest.mark.parametrize("key", [None, "sk-parley-garbage"])
def test_every_operation_refuses_an_unknown_caller_before_reading_the_body(
    server: ParleyServer, key: str | None
) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    answers = {}
    for method, path in _operations(server):
        response = httpx.request(
            method, f"{server.url}{path}", json=BAD_BODY, headers=headers, timeout=10
        )
        answers[f"{method} {path}"] = response.status_code
    wrong = {operation: status for operation, status in answers.items() if status != 401}
    assert not wrong, wrong


@pytest.mark.parametrize("key", [None, "sk-parley-garbage"])
@pytest.mark.parametrize("body", [b"\x00", b"\xff"])
def test_a_body_that_is_not_json_is_refused_for_an_unknown_caller_too(
    server: ParleyServer, key: str | None, body: bytes
) -> None:
    """FastAPI parses a JSON body before any dependency runs: fuzzing found keyless
    requests with such bodies answered 400 ("JSON decode error", "There was an error
    parsing the body" for bytes that are not UTF-8) instead of 401."""
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    answers = {}
    for method, path in _operations(server):
        if method in ("GET", "DELETE"):
            continue
        response = httpx.request(
            method, f"{server.url}{path}", content=body, headers=headers, timeout=10
        )
        answers[f"{method} {path}"] = response.status_code
    wrong = {operation: status for operation, status in answers.items() if status != 401}
    assert not wrong, wrong


@pytest.mark.parametrize(
    "query",
    [
        {"before_id": "9223372036854775808"},  # one past SQLite's integers: was a 500
        {"since": "inf"},
        {"until": "1e400"},
        {"since": "nan"},
    ],
)
def test_integer_and_time_parameters_are_bounded(
    server: ParleyServer, query: dict[str, str]
) -> None:
    key = server.create_key("auditor")
    response = httpx.get(
        f"{server.url}/v1/audit", params=query, headers={"authorization": f"Bearer {key}"}
    )

    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"]
