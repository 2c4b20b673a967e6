"""What a client finds after a reload (``GET /v1/conversations/{id}``): a reply's server
tool calls with their results, and for a reply paused for approval the calls that wait,
with when approving each expires (``tools.approval_ttl_seconds``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI

TTL = 3.0
WRITE = ("call_w", "workspace_write", json.dumps({"path": "a.txt", "content": "hello"}))


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    tools = {"approval": {"workspace_write": "ask"}, "approval_ttl_seconds": TTL}
    config = server_config(upstream, tools=tools)
    with ParleyServer(tmp_path_factory.mktemp("reload"), config) as parley:
        yield parley


def chat(server: ParleyServer, text: str, tools: list[str]) -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": text}], "tools": tools},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def detail(server: ParleyServer, conversation_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/conversations/{conversation_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_replys_server_tool_calls_and_results_are_in_its_parts(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_t", "current_time", "{}")])
    upstream.queue_text("It is now.")
    reply = chat(server, "what time is it?", ["current_time"])

    (user, assistant) = detail(server, reply["parley"]["conversation_id"])["messages"]

    assert user["role"] == "user"
    assert (assistant["status"], assistant["content"]) == ("complete", "It is now.")
    calls = [p for p in assistant["parts"] if p["kind"] == "tool_call"]
    assert [(c["id"], c["name"], c["arguments"], c["approval"]) for c in calls] == [
        ("call_t", "current_time", "{}", "auto")
    ]
    result = calls[0]["result"]
    assert result["is_error"] is False
    assert result["content"]  # what the tool answered
    assert result["seconds"] >= 0
    assert assistant["parts"][-1] == {"kind": "text", "text": "It is now."}
    assert "pending_approvals" not in assistant


def test_a_paused_reply_lists_its_pending_calls_and_their_expiry(
    server: ParleyServer, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([WRITE])
    before = time.time()
    reply = chat(server, "write a.txt", ["workspace_write"])
    conversation_id = reply["parley"]["conversation_id"]

    paused = detail(server, conversation_id)["messages"][-1]

    assert paused["status"] == "awaiting_approval"
    (call,) = [p for p in paused["parts"] if p["kind"] == "tool_call"]
    assert (call["approval"], call["result"]) == ("pending", None)
    (pending,) = paused["pending_approvals"]
    assert pending == {
        "id": "call_w",
        "tool": "workspace_write",
        "arguments": WRITE[2],
        "expires_at": pytest.approx(call["asked_at"] + TTL),
        "expired": False,
    }
    assert before + TTL - 1 < pending["expires_at"] < time.time() + TTL
    assert reply["parley"]["pending_approvals"] == [
        {k: pending[k] for k in ("id", "tool", "arguments")}
    ]

    time.sleep(max(0.0, pending["expires_at"] - time.time()) + 0.2)

    expired = detail(server, conversation_id)["messages"][-1]["pending_approvals"]
    assert expired == [{**pending, "expired": True}]
    approve = httpx.post(
        f"{server.url}/v1/conversations/{conversation_id}/approvals",
        json={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}]},
    )
    assert api_error(approve, 409)["code"] == "approval_expired"  # as the detail said
    upstream.queue_text("Not written.")
    denied = httpx.post(
        f"{server.url}/v1/conversations/{conversation_id}/approvals",
        json={"decisions": [{"tool_call_id": "call_w", "decision": "deny"}]},
        timeout=30,
    )
    assert denied.status_code == 200, denied.text
    settled = detail(server, conversation_id)["messages"][-1]
    assert settled["status"] == "complete"
    assert "pending_approvals" not in settled
