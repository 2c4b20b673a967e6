"""Cases found in review: browser-origin requests, client retries, unanswered client
tools, parallel calls sharing an index, provider timeouts, disconnects before output."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, chunk, sse, text_frames

HELLO = [{"role": "user", "content": "hello"}]


def _conversation_id(reply: object) -> str:
    return str((getattr(reply, "model_extra", None) or {})["parley"]["conversation_id"])


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "attacker.example"},
        {"origin": "https://attacker.example"},
        {"host": "rebind.attacker.example:8000"},
    ],
)
def test_keyless_loopback_refuses_other_sites(
    parley: ParleyServer, upstream: MockOpenAI, headers: dict[str, str]
) -> None:
    response = httpx.post(
        f"{parley.url}/v1/chat/completions", json={"messages": HELLO}, headers=headers
    )
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"
    listing = httpx.get(f"{parley.url}/v1/conversations", headers=headers)
    assert listing.status_code == 403
    assert upstream.requests == []


def test_local_origins_and_form_posts(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("ok")
    local = httpx.post(
        f"{parley.url}/v1/chat/completions",
        json={"messages": HELLO},
        headers={"origin": "http://localhost:3000", "host": "localhost:8000"},
    )
    assert local.status_code == 200
    form = httpx.post(
        f"{parley.url}/v1/chat/completions",
        content=b'{"messages": []}',
        headers={"content-type": "text/plain"},
    )
    assert form.status_code == 415
    assert form.json()["error"]["param"] == "content-type"


def test_sdk_retries_do_not_duplicate_the_user_message(
    parley: ParleyServer, upstream: MockOpenAI
) -> None:
    client = openai.OpenAI(base_url=f"{parley.url}/v1", api_key="k")  # default retries
    upstream.queue_text("first answer")
    conversation_id = _conversation_id(client.chat.completions.create(model="fast", messages=HELLO))
    upstream.queue_error(503, "busy", headers={"retry-after": "0"})
    upstream.queue_text("second answer")
    reply = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "again"}],
        extra_body={"conversation_id": conversation_id},
    )
    assert reply.choices[0].message.content == "second answer"
    branch = httpx.get(f"{parley.url}/v1/conversations/{conversation_id}").json()["messages"]
    assert [(m["role"], m["content"]) for m in branch] == [
        ("user", "hello"),
        ("assistant", "first answer"),
        ("user", "again"),
        ("assistant", "second answer"),
    ]
    assert [m["content"] for m in upstream.requests[-1]["messages"]] == [
        "hello",
        "first answer",
        "again",
    ]


def test_unanswered_client_tool_calls_do_not_break_the_conversation(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_9", "lookup", "{}")])
    first = client.chat.completions.create(
        model="fast",
        messages=HELLO,
        tools=[{"type": "function", "function": {"name": "lookup"}}],
    )
    upstream.queue_text("fine")
    client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "never mind"}],
        extra_body={"conversation_id": _conversation_id(first)},
    )
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2]["tool_call_id"] == "call_9"
    assert "result was lost" in sent[2]["content"]


def test_parallel_calls_that_share_an_index(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    """Ollama sends index 0 for every parallel call, and finish_reason "stop"."""
    frames = [
        sse(chunk({"role": "assistant", "content": ""})),
        sse(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c1", "function": {"name": "w", "arguments": '{"a":1}'}}
                    ]
                }
            )
        ),
        sse(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c2", "function": {"name": "w", "arguments": '{"a":2}'}}
                    ]
                }
            )
        ),
        sse(chunk({}, "stop")),
        b"data: [DONE]\n\n",
    ]
    tools = [{"type": "function", "function": {"name": "w"}}]
    upstream.queue_raw(list(frames))
    reply = client.chat.completions.create(model="fast", messages=HELLO, tools=tools)
    calls = reply.choices[0].message.tool_calls or []
    assert [(c.id, c.function.arguments) for c in calls] == [("c1", '{"a":1}'), ("c2", '{"a":2}')]
    assert reply.choices[0].finish_reason == "tool_calls"
    upstream.queue_raw(list(frames))
    streamed: dict[int, str] = {}
    for part in client.chat.completions.create(
        model="fast", messages=HELLO, tools=tools, stream=True
    ):
        for delta in (part.choices[0].delta.tool_calls or []) if part.choices else []:
            streamed[delta.index] = streamed.get(delta.index, "") + (delta.id or "")
    assert streamed == {0: "c1", 1: "c2"}


@pytest.fixture(scope="module")
def impatient(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, server={"on_disconnect": "cancel", "keepalive_seconds": 1.0})
    config["providers"][0]["timeout_seconds"] = 1.0
    with ParleyServer(tmp_path_factory.mktemp("impatient"), config) as server:
        yield server


def test_provider_read_timeout_is_honoured(impatient: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue(Reply(frames=text_frames(["late"]), first_delay=4.0))
    client = openai.OpenAI(base_url=f"{impatient.url}/v1", api_key="k", max_retries=0)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="fast", messages=HELLO)
    assert caught.value.status_code == 504
    assert time.monotonic() - started < 3.5


def _last_assistant_status(server: ParleyServer) -> str:
    rows = db_rows(
        server,
        "SELECT status FROM messages WHERE role='assistant' ORDER BY created_at DESC",
    )
    return str(rows[0]["status"])


def _wait(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True])
def test_cancel_mode_notices_a_disconnect_before_any_output(
    impatient: ParleyServer, upstream: MockOpenAI, stream: bool
) -> None:
    closed = upstream.connections_closed
    upstream.queue(Reply(frames=text_frames(["slow"] * 5), first_delay=0.8, delay=0.2))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{impatient.url}/v1/chat/completions",
            json={"messages": HELLO, "stream": stream},
            timeout=0.3,
        )
    _wait(lambda: _last_assistant_status(impatient) == "interrupted")
    _wait(lambda: upstream.connections_closed > closed)


def test_upstream_credential_errors_do_not_echo_the_upstream_text(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_error(401, "Incorrect API key provided: sk-proj-****abcd")
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="fast", messages=HELLO)
    assert caught.value.status_code == 502
    assert "abcd" not in caught.value.response.text
    assert "api_key" in caught.value.message


def test_reasoning_effort_and_other_options_reach_openai_upstreams(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("ok")
    client.chat.completions.create(
        model="fast", messages=HELLO, reasoning_effort="low", metadata={"k": "v"}
    )
    sent = upstream.requests[-1]
    assert sent["reasoning_effort"] == "low"
    assert sent["metadata"] == {"k": "v"}  # OpenAI's field: sent on
    assert "max_tokens" not in json.dumps(sent)  # none was asked for, none is invented
