"""Interceptors in a running server, met the way users meet them: the official client,
a third-party package found through its entry point, the audit log and the admin view
over HTTP, and the logging interceptor's lines in the server's log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

SECRET_PROMPT = "my-private-question-42"


@pytest.fixture(scope="module")
def keyed(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory, example_package: Path
) -> Iterator[tuple[ParleyServer, dict[str, str]]]:
    config = server_config(
        upstream,
        interceptors={
            "logging": {"enabled": True},
            "metadata": {"enabled": True, "fields": {"company": "ACME"}},
            "chain": [{"use": "footer", "options": {"text": "Checked by ACME"}}],
        },
        pricing={"mock-model": {"input": 1.0, "output": 2.0}},
    )
    server = ParleyServer(
        tmp_path_factory.mktemp("interceptors"),
        config,
        env={"PYTHONPATH": str(example_package)},
    )
    keys = {
        owner: server.create_key(owner, *options)
        for owner, options in (("alice", ()), ("bob", ()), ("ops", ("--admin",)))
    }
    with server:
        yield server, keys


def client(server: ParleyServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def get(server: ParleyServer, key: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(
        f"{server.url}{path}", params=params, headers={"Authorization": f"Bearer {key}"}
    )


def test_the_chain_shapes_the_request_and_the_stream(
    keyed: tuple[ParleyServer, dict[str, str]], upstream: MockOpenAI
) -> None:
    server, keys = keyed
    upstream.queue_text("The answer", " is 42.")
    stream = client(server, keys["alice"]).chat.completions.create(
        model="fast", messages=[{"role": "user", "content": SECRET_PROMPT}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    # the example package's footer, streamed like the rest of the answer
    assert text == "The answer is 42.\n\n-- Checked by ACME"
    # metadata injection: who asked, through which door, and the configured field
    sent = upstream.requests[0]["messages"]
    assert sent[0]["role"] == "system"
    assert "caller: alice" in sent[0]["content"]
    assert "source: chat.completions" in sent[0]["content"]
    assert "company: ACME" in sent[0]["content"]
    assert sent[1] == {"role": "user", "content": SECRET_PROMPT}


def test_the_audit_log_has_a_row_per_model_and_tool_call(
    keyed: tuple[ParleyServer, dict[str, str]], upstream: MockOpenAI
) -> None:
    server, keys = keyed
    upstream.queue_tool_calls([("call_1", "current_time", "{}")])
    upstream.queue_text("noon")
    reply = client(server, keys["bob"]).chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "time?"}],
        tools=["current_time"],  # type: ignore[list-item]
    )
    conversation_id = (reply.model_extra or {})["parley"]["conversation_id"]
    rows = get(server, keys["bob"], "/v1/audit", conversation_id=conversation_id).json()["data"]
    assert [(r["kind"], r["name"], r["outcome"]) for r in rows] == [
        ("model", "fast", "stop"),
        ("tool", "current_time", "ok"),
        ("model", "fast", "tool_calls"),
    ]
    model = rows[0]
    assert (model["owner"], model["source"], model["purpose"]) == (
        "bob",
        "chat.completions",
        "chat",
    )
    assert model["key_id"].startswith("key_")
    assert model["input_tokens"] > 0
    assert model["output_tokens"] > 0
    assert model["cost_usd"] == pytest.approx(
        (model["input_tokens"] * 1.0 + model["output_tokens"] * 2.0) / 1e6
    )
    assert re.fullmatch(r"[0-9a-f]{64}", model["request_hash"])
    assert model["request_hash"] != rows[2]["request_hash"]  # the second step sent more
    assert model["latency_ms"] > 0
    assert rows[1]["call_id"] == "call_1"


def test_audit_rows_are_private_to_their_owner_but_not_to_admins(
    keyed: tuple[ParleyServer, dict[str, str]], upstream: MockOpenAI
) -> None:
    server, keys = keyed
    upstream.queue_text("hi alice")
    client(server, keys["alice"]).chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "hi"}]
    )
    bob = get(server, keys["bob"], "/v1/audit").json()["data"]
    assert bob
    assert {r["owner"] for r in bob} == {"bob"}
    refused = get(server, keys["bob"], "/v1/audit", owner="alice")
    assert refused.status_code == 403
    everyone = get(server, keys["ops"], "/v1/audit", kind="model").json()["data"]
    assert {"alice", "bob"} <= {r["owner"] for r in everyone}
    only_alice = get(server, keys["ops"], "/v1/audit", owner="alice").json()["data"]
    assert {r["owner"] for r in only_alice} == {"alice"}
    first = get(server, keys["ops"], "/v1/audit", limit=1).json()
    assert first["has_more"] is True
    second = get(server, keys["ops"], "/v1/audit", limit=1, before_id=first["next_before_id"])
    assert second.json()["data"][0]["id"] < first["data"][0]["id"]


def test_the_admin_endpoint_shows_the_active_chain(
    keyed: tuple[ParleyServer, dict[str, str]],
) -> None:
    server, keys = keyed
    assert get(server, keys["alice"], "/v1/admin/interceptors").status_code == 403
    chain = get(server, keys["ops"], "/v1/admin/interceptors").json()["data"]
    assert [(i["name"], i["order"], i["source"]) for i in chain] == [
        ("logging", 100, "built-in"),
        ("audit", 110, "built-in"),
        ("metadata", 200, "built-in"),
        ("footer", 450, "entry point footer (parley-footer 0.1.0)"),
    ]
    assert chain[3]["details"] == {"text": "Checked by ACME"}
    assert chain[3]["hooks"] == ["on_stream_event"]


def test_the_logging_interceptor_logs_calls_but_not_prompts(
    keyed: tuple[ParleyServer, dict[str, str]], upstream: MockOpenAI
) -> None:
    server, keys = keyed
    upstream.queue_tool_calls([("call_log", "current_time", "{}")])
    upstream.queue_text("noted")
    client(server, keys["alice"]).chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": SECRET_PROMPT}],
        tools=["current_time"],  # type: ignore[list-item]
    )
    log = server.log()
    assert re.search(
        r"model call chat -> fast \(mock\) by alice: messages=1 tools=1 attempt=0", log
    )
    assert re.search(r"model call chat -> fast finished: tool_calls in \d+ ms", log)
    assert re.search(r"model call chat -> fast finished: stop in \d+ ms", log)
    assert "tool current_time call_log: ok" in log
    assert re.search(r"turn msg_\w+ ended: end_turn, 1 tool calls", log)
    assert SECRET_PROMPT not in log
    assert "sk-parley-" not in log
