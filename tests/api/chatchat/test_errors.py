"""Errors on Langchain-Chatchat's routes carry Chatchat's ``code`` and ``msg`` beside the
OpenAI error object, so that Chatchat's client finds them (``check_error_msg`` in
``webui_pages/utils.py``); ``/v1`` errors are the OpenAI error object alone, as before.

Unit tests for ``is_chatchat_path`` and ``ErrorResponse``; then a real server, each
failure provoked the way a client meets it: an unknown path, a wrong method, a bad
body, no key or a wrong one, a missing knowledge base, a body too large for admission
control, and the official OpenAI client on ``/chat/chat/completions``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from starlette.types import Message
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.api.errors import error_response, is_chatchat_path
from parley.errors import NotFound, Overloaded
from parley.testing.mock_openai import MockOpenAI

MAX_BODY = 64 * 1024


def check_error_msg(data: Any, key: str = "errorMsg") -> str:
    """Chatchat's ``check_error_msg``: the message of a dict holding ``key``, or whose
    ``code`` is not 200 (its ``msg``); "" when it sees no error."""
    if isinstance(data, dict):
        if key in data:
            return str(data[key])
        if "code" in data and data["code"] != 200:
            return str(data["msg"])
    return ""


def assert_chatchat_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """A failure with ``status`` that Chatchat's client sees, and the OpenAI SDKs too."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == status
    assert check_error_msg(body) == body["error"]["message"] != ""
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body


# --- units -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/chat/chat/completions",
        "/chat/feedback",
        "/chat/kb_chat",
        "/chat",
        "/knowledge_base/list_files",
        "/knowledge_base/nowhere/at/all",
        "/tools",
        "/tools/call",
        "/other/completion",
        "/server/configs",
    ],
)
def test_chatchat_paths(path: str) -> None:
    assert is_chatchat_path(path)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/v1/knowledge_bases",
        "/",
        "/health",
        "/toolsets",
        "/chatroom",
        "/servers",
        "/knowledge_bases/x",
        "/c/conv_1",
        "/assets/chat/app.js",
    ],
)
def test_other_paths(path: str) -> None:
    assert not is_chatchat_path(path)


def _send(path: str) -> tuple[int, dict[str, str], bytes]:
    """What ``error_response`` sends for a request to ``path``: status, headers, body."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    response = error_response(Overloaded("busy", retry_after=3), retry=False)
    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    asyncio.run(response(scope, receive, send))
    start, body = sent
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, body["body"]


def test_an_error_sent_on_a_chatchat_path_carries_code_and_msg() -> None:
    status, headers, body = _send("/knowledge_base/list_files")
    data = orjson.loads(body)
    assert status == 503
    assert data["code"] == 503
    assert data["msg"] == data["error"]["message"] == "busy"
    assert int(headers["content-length"]) == len(body)
    assert headers["retry-after"] == "3"
    assert headers["x-should-retry"] == "false"


def test_an_error_sent_elsewhere_is_the_openai_object_alone() -> None:
    status, headers, body = _send("/v1/models")
    assert status == 503
    data = orjson.loads(body)
    assert set(data) == {"error"}
    assert data["error"]["message"] == "busy"
    assert int(headers["content-length"]) == len(body)


def test_the_body_before_it_is_sent_is_the_openai_object() -> None:
    """What reads ``body`` without sending (idempotency replays) sees Parley's shape."""
    response = error_response(NotFound("gone", code="not_found"))
    assert set(orjson.loads(response.body)) == {"error"}


# --- a real server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream, knowledge={"embedder": "none"}, server={"max_body_bytes": MAX_BODY}
    )
    with ParleyServer(tmp_path_factory.mktemp("chatchat-errors"), config) as running:
        yield running


@pytest.fixture(scope="module")
def key(server: ParleyServer) -> str:
    return server.create_key("alice")


@pytest.fixture
def http(server: ParleyServer, key: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.url, headers={"authorization": f"Bearer {key}"}, timeout=30
    ) as client:
        yield client


@pytest.mark.parametrize("path", ["/chat/nowhere", "/knowledge_base/nowhere", "/tools/x/y"])
def test_an_unknown_chatchat_path_is_a_404_chatchat_sees(http: httpx.Client, path: str) -> None:
    body = assert_chatchat_error(http.get(path), 404)
    assert body["error"]["code"] == "not_found"


def test_a_wrong_method_is_a_405_chatchat_sees(http: httpx.Client) -> None:
    assert_chatchat_error(http.get("/chat/feedback"), 405)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/knowledge_base/create_knowledge_base", b"{}"),
        ("/knowledge_base/create_knowledge_base", b"{not json"),
        ("/chat/feedback", b'{"message_id": "msg_x", "score": 1000}'),
    ],
)
def test_a_bad_body_is_a_400_chatchat_sees(http: httpx.Client, path: str, body: bytes) -> None:
    response = http.post(path, content=body, headers={"content-type": "application/json"})
    assert_chatchat_error(response, 400)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/chat/feedback"),
        ("GET", "/knowledge_base/list_knowledge_bases"),
        ("GET", "/tools"),
        ("POST", "/chat/chat/completions"),
    ],
)
@pytest.mark.parametrize("presented", [None, "sk-parley-wrong"])
def test_a_missing_or_wrong_key_is_a_401_chatchat_sees(
    server: ParleyServer, method: str, path: str, presented: str | None
) -> None:
    headers = {"authorization": f"Bearer {presented}"} if presented else {}
    response = httpx.request(
        method, f"{server.url}{path}", json={"messages": []}, headers=headers, timeout=30
    )
    assert_chatchat_error(response, 401)


def test_a_missing_knowledge_base_is_an_error_chatchat_sees(http: httpx.Client) -> None:
    response = http.get("/knowledge_base/list_files", params={"knowledge_base_name": "nope"})
    assert response.status_code == 200  # as in Chatchat: the failure is in the body
    assert "nope" in check_error_msg(response.json())
    assert response.json()["code"] == 404


def test_admission_controls_refusal_is_one_chatchat_sees(http: httpx.Client) -> None:
    big = orjson.dumps({"messages": [{"role": "user", "content": "x" * (2 * MAX_BODY)}]})
    response = http.post(
        "/chat/chat/completions", content=big, headers={"content-type": "application/json"}
    )
    assert_chatchat_error(response, 413)


def test_the_openai_client_still_reads_the_error_on_chatchats_chat(
    server: ParleyServer, key: str, upstream: MockOpenAI
) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/chat", api_key=key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "x"}], temperature=9
        )
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["type"] == "invalid_request_error"
    assert raised.value.body["param"] == "temperature"
    assert raised.value.response.json()["code"] == 400
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/nowhere", 404),
        ("GET", "/v1/chat/completions", 405),
        ("POST", "/v1/chat/completions", 400),
        ("GET", "/v1/conversations/conv_missing", 404),
    ],
)
def test_v1_errors_are_the_openai_object_alone(
    http: httpx.Client, method: str, path: str, status: int
) -> None:
    response = http.request(method, path, content=b"{not json")
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"}


def test_v1_auth_failures_are_the_openai_object_alone(server: ParleyServer) -> None:
    response = httpx.get(f"{server.url}/v1/models", timeout=30)
    assert response.status_code == 401
    assert set(response.json()) == {"error"}
