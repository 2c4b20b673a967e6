"""Requests shaped to cost the server more than their size suggests (issue 17).

Found by measuring what one key holder's requests do to everyone else's (the stall hunt):
tool results folded into an assistant message with tens of thousands of calls froze the
event loop for 29 s, and a body nested 1,000 levels deep was a 500 whose audit row then
stopped the audit log for everybody. Each is tried against a real server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from tests.conftest import server_config
from tests.support.probe import HealthProbe
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    data = tmp_path_factory.mktemp("shapes")
    # in a process of its own: its stalls (HealthProbe) must be its own, not the test
    # process's interpreter lock, held while a test builds a 40,000-call body
    with ParleyServer(data, server_config(upstream), process=True) as parley:
        yield parley


def _post(server: ParleyServer, path: str, body: bytes, method: str = "POST") -> httpx.Response:
    return httpx.request(
        method,
        f"{server.url}{path}",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )


def _nested(levels: int) -> bytes:
    """A JSON object ``levels`` deep."""
    return b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)


def _chat_with_parameters(levels: int) -> bytes:
    """A chat body whose one tool's ``parameters`` are ``levels`` deep: the body nests
    four levels more (body, tools, the tool, function)."""
    tool = b'{"type":"function","function":{"name":"t","parameters":%s}}' % _nested(levels)
    return b'{"model":"fast","messages":[{"role":"user","content":"hi"}],"tools":[%s]}' % tool


def test_a_chat_body_nested_past_the_limit_is_refused_before_anything_else(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    # the stall hunt's body: 1,000 levels (orjson writes 254; before: a 500)
    for levels in (1000, 61):
        error = api_error(_post(server, "/v1/chat/completions", _chat_with_parameters(levels)), 400)
        assert error["code"] == "json_too_deep"
        assert f"nested {levels + 4} levels deep" in error["message"]
        assert "at most 64" in error["message"]
    assert upstream.requests == []


def test_a_chat_body_as_deep_as_the_limit_is_answered(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_text("fine")
    response = _post(server, "/v1/chat/completions", _chat_with_parameters(60))  # 64 deep
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "fine"
    assert upstream.requests[-1]["tools"][0]["function"]["parameters"] == orjson.loads(_nested(60))


def test_every_other_json_body_is_held_to_the_limit(server: ParleyServer) -> None:
    deep = _nested(100)
    for method, path, body in [
        ("POST", "/v1/assistants", b'{"name":"deep","description":%s}' % deep),
        ("POST", "/v1/memories", b'{"content":"x","metadata":%s}' % deep),
        (
            "POST",
            "/knowledge_base/search_docs",
            b'{"knowledge_base_name":"k","metadata":%s}' % deep,
        ),
        ("POST", "/v1/knowledge_bases", b"[" * 70 + b"]" * 70),
    ]:
        error = api_error(_post(server, path, body, method), 400)
        assert error["code"] == "json_too_deep", (path, error)
    # strings are not structure: brackets and escaped quotes in them count for nothing
    text = '\\"[[[{{{' * 50
    body = b'{"name":"shallow","description":"%s"}' % text.encode()
    response = _post(server, "/v1/assistants", body)
    assert response.status_code in (200, 201), response.text


def test_tool_results_for_many_calls_do_not_stall_the_server(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    """The stall hunt's body: 40,000 calls in one message, 4,000 results (29 s of a
    frozen event loop before) is refused; 1,024 calls (the most one message may carry)
    with 8,000 results answering them is folded in well under a second."""
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(40_000)
    ]

    def body(calls: list[dict[str, Any]], results: int) -> bytes:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": calls},
        ]
        messages += [
            {"role": "tool", "tool_call_id": f"c{i % len(calls)}", "content": "r"}
            for i in range(results)
        ]
        return orjson.dumps({"model": "fast", "messages": messages})

    with HealthProbe(server) as probe:
        error = api_error(_post(server, "/v1/chat/completions", body(calls, 4_000)), 400)
        assert error["param"] == "messages.1.tool_calls"
        upstream.queue_text("done")
        started = time.monotonic()
        response = _post(server, "/v1/chat/completions", body(calls[:1024], 8_000))
        took = time.monotonic() - started
    assert response.status_code == 200, response.text
    assert took < 10
    assert probe.worst < 1.0, f"/health waited {probe.worst:.1f} s"


def test_the_size_limits_are_checked_before_the_body_is_validated(server: ParleyServer) -> None:
    """Validating 40,000 tool calls only to refuse them held the event loop 0.3 s: the
    counts are read from the parsed JSON first (so a message past the limit is named
    even when an earlier one would not validate)."""
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(1025)
    ]
    body = {
        "model": "fast",
        "messages": [
            {"role": "robot", "content": "hi"},
            {"role": "assistant", "tool_calls": calls},
        ],
    }
    error = api_error(_post(server, "/v1/chat/completions", orjson.dumps(body)), 400)
    assert error["param"] == "messages.1.tool_calls"
    body["messages"] = [{"role": "robot", "content": [{"type": "text", "text": "x"}] * 20_001}]
    error = api_error(_post(server, "/v1/chat/completions", orjson.dumps(body)), 400)
    assert error["param"] == "messages"
    assert "20001 > 20000" in error["message"]
