"""Errors: bad requests, upstream failures before and during a stream, and what gets stored."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from tests.conftest import db_rows
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

HELLO = [{"role": "user", "content": "hello"}]


def _assert_error_shape(response: httpx.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"", None),
        (b"[1, 2]", None),
        (b"{not json", None),
        (b'{"messages": null}', "messages"),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', "messages.0.role"),
        (b'{"messages": [{"role": "user", "content": 5}]}', "messages.0.content"),
        (b'{"messages": [{"role": "user", "content": [{"type": "text"}]}]}', None),
        (b'{"messages": [], "temperature": 9}', "temperature"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 1000}', "n"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999}', "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
        (b'{"messages": [{"role": "system", "content": "only system"}]}', "messages"),
        (b"\xff\xfe{}", None),
        (b"[" * 5000 + b"]" * 5000, None),
    ],
)
def test_malformed_bodies_are_400_and_upstream_sees_nothing(
    parley: ParleyServer, upstream: MockOpenAI, body: bytes, param: str | None
):
    response = httpx.post(
        f"{parley.url}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    _assert_error_shape(response, 400, param)
    assert upstream.requests == []


def test_oversize_requests_are_refused_before_the_upstream(
    parley: ParleyServer, upstream: MockOpenAI
):
    url = f"{parley.url}/v1/chat/completions"
    huge = b'{"messages": [{"role": "user", "content": "' + b"x" * (11 * 1024 * 1024) + b'"}]}'
    _assert_error_shape(httpx.post(url, content=huge), 413)
    long_message = {"messages": [{"role": "user", "content": "y" * 2_000_001}]}
    _assert_error_shape(httpx.post(url, json=long_message), 400, "messages.0.content")
    many_tools = {
        "messages": HELLO,
        "tools": [{"type": "function", "function": {"name": f"t{i}"}} for i in range(500)],
    }
    _assert_error_shape(httpx.post(url, json=many_tools), 400, "tools")
    assert upstream.requests == []
    upstream.queue_text("still serving")
    assert httpx.post(url, json={"messages": HELLO}).json()["choices"][0]["message"]["content"] == (
        "still serving"
    )


def test_unknown_route_and_method_use_the_error_shape(parley: ParleyServer):
    _assert_error_shape(httpx.get(f"{parley.url}/v1/nothing-here"), 404)
    _assert_error_shape(httpx.get(f"{parley.url}/v1/chat/completions"), 405)


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_rate_limit_is_429_with_retry_after(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, stream: bool
):
    upstream.queue_error(429, "slow down", headers={"retry-after": "7"})
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="fast", messages=HELLO, stream=stream)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
    assert "slow down" in caught.value.message
    assert "sk-upstream-secret" not in caught.value.response.text


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_failure_before_first_byte_is_a_real_http_error(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, stream: bool
):
    upstream.queue_error(500, "boom")
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="fast", messages=HELLO, stream=stream)
    assert caught.value.status_code == 502
    upstream.queue_error(503, "overloaded")
    with pytest.raises(openai.APIStatusError) as unavailable:
        client.chat.completions.create(model="fast", messages=HELLO, stream=stream)
    assert unavailable.value.status_code == 503
    assert "retry-after" in unavailable.value.response.headers
    # the user message is kept; the assistant message is marked failed
    rows = db_rows(
        parley,
        "SELECT role, status, error FROM messages ORDER BY created_at DESC LIMIT 2",
    )
    assert [(r["role"], r["status"]) for r in rows] == [
        ("assistant", "failed"),
        ("user", "complete"),
    ]
    assert json.loads(rows[0]["error"])["code"] == "upstream_error"


def test_unreachable_upstream_is_502(client: openai.OpenAI):
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="dead-model", messages=HELLO, stream=True)
    assert caught.value.status_code == 502
    assert (caught.value.body or {})["code"] == "upstream_unreachable"  # type: ignore[index]


def test_failure_mid_stream_sends_error_event_and_keeps_partial_text(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
):
    upstream.queue_raw(text_frames(["partial ", "answer ", "never"]), cut_after=3)
    stream = client.chat.completions.create(model="fast", messages=HELLO, stream=True)
    received: list[str] = []

    def read_all() -> None:
        for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)

    with pytest.raises(openai.APIError):
        read_all()
    assert "".join(received) == "partial answer "
    message_id = db_rows(
        parley, "SELECT id FROM messages WHERE role='assistant' ORDER BY created_at DESC"
    )[0]["id"]
    row = db_rows(parley, "SELECT status, parts FROM messages WHERE id=?", message_id)[0]
    assert row["status"] == "incomplete"
    assert json.loads(row["parts"]) == [{"kind": "text", "text": "partial answer "}]


def test_mid_stream_error_frame_has_no_done(parley: ParleyServer, upstream: MockOpenAI):
    upstream.queue_raw(text_frames(["a", "b"]), cut_after=2)
    body = {"messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{parley.url}/v1/chat/completions", json=body) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] != "data: [DONE]"
    error = json.loads(lines[-1][6:])["error"]
    assert error["type"] == "upstream_error"
    assert error["message"]


def test_stream_without_finish_is_an_error(client: openai.OpenAI, upstream: MockOpenAI):
    frames = text_frames(["cut"])[:2]  # role and one delta, then a clean end of body
    upstream.queue(Reply(frames=frames))
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="fast", messages=HELLO, stream=True))


def test_garbage_from_upstream_is_a_clean_error(client: openai.OpenAI, upstream: MockOpenAI):
    upstream.queue_raw([b"data: {this is not json\n\n"])
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="fast", messages=HELLO)
    assert caught.value.status_code == 502


@pytest.mark.parametrize("content", ["", "   \n\t", [{"type": "text", "text": " "}]])
@pytest.mark.parametrize("stream", [False, True])
def test_an_empty_new_message_is_refused_before_anything_is_stored(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer, content: object, stream: bool
) -> None:
    before = db_rows(parley, "SELECT COUNT(*) AS n FROM messages")[0]["n"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="fast",
            messages=[
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": content},  # type: ignore[typeddict-item]
            ],
            stream=stream,
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "empty_message"
    assert error["param"] == "messages.2.content"
    assert upstream.requests == []
    assert db_rows(parley, "SELECT COUNT(*) AS n FROM messages")[0]["n"] == before
