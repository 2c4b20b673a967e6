"""Smaller leaks, closed (issue 17, item 7): secrets in the access log, a redirect that
echoed the Host header before authentication, and a traceback for a client that leaves
mid-body."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.api.logs import mask_query
from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("leaks"), server_config(upstream)) as parley:
        yield parley


@pytest.fixture(scope="module")
def key(server: ParleyServer) -> str:
    return server.create_key("alice")


def test_a_key_in_the_query_string_never_reaches_the_access_log(
    server: ParleyServer, key: str
) -> None:
    secret = "sk-parley-NotForTheLog123"
    response = httpx.get(f"{server.url}/v1/models", params={"api_key": secret, "limit": 5})

    assert response.status_code == 401
    log = server.log_with("/v1/models?api_key=***&limit=5")
    assert "/v1/models?api_key=***&limit=5" in log
    assert secret not in log


def test_a_trailing_slash_is_not_redirected_to_the_callers_host(server: ParleyServer) -> None:
    response = httpx.get(
        f"{server.url}/v1/models/", headers={"host": "evil.example"}, follow_redirects=False
    )

    assert response.status_code == 404
    assert "location" not in response.headers
    assert "evil.example" not in response.text


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",  # read by the admission middleware
        "/v1/tasks",
        "/v1/conversations/c1/approvals",  # read by the route
        "/v1/conversations/c1/messages/m1/regenerate",
    ],
)
def test_a_client_that_leaves_mid_body_costs_no_traceback(
    server: ParleyServer, key: str, path: str
) -> None:
    before = server.log().count("Traceback")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n".encode()
            + b'Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"name": '
        )
        time.sleep(0.3)
    time.sleep(0.5)

    assert server.log().count("Traceback") == before
    assert httpx.get(f"{server.url}/health").status_code == 200


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/v1/models?api_key=sk-1&limit=2", "/v1/models?api_key=***&limit=2"),
        ("/x?token=a&access_token=b&x-session=c", "/x?token=***&access_token=***&x-session=***"),
        ("/v1/conversations?limit=20&after=conv_1", "/v1/conversations?limit=20&after=conv_1"),
        ("/plain", "/plain"),
    ],
)
def test_secret_looking_query_values_are_masked(path: str, shown: str) -> None:
    assert mask_query(path) == shown
