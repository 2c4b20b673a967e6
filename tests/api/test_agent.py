"""The agent loop through the plain OpenAI API: the official client against a real Parley
server in front of the loopback mock upstream."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, chunk, sse, text_frames
from parley.tools.workspaces import conversation_workspace

ASK = [{"role": "user", "content": "What time is it?"}]


@pytest.fixture(scope="module")
def agent_server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        agent={"retry_backoff_seconds": [0.05, 0.05], "max_iterations": 10},
        models={
            "fast": {"provider": "mock", "model": "mock-model", "fallbacks": ["mock/mock-large"]}
        },
        pricing={"mock-model": {"input": 1.0, "output": 2.0}},
    )
    with ParleyServer(tmp_path_factory.mktemp("agent"), config) as server:
        yield server


@pytest.fixture
def agent(agent_server: ParleyServer, upstream: MockOpenAI) -> Iterator[openai.OpenAI]:
    upstream.reset()
    with openai.OpenAI(base_url=f"{agent_server.url}/v1", api_key="sk-x", max_retries=0) as c:
        yield c


def extras(chunk_: Any) -> dict[str, Any]:
    return chunk_.model_extra or {}


def test_server_tool_streams_progress_never_tool_calls(
    agent: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_t1", "current_time", "{}")])
    upstream.queue_text("It is ", "noon.")
    stream = agent.chat.completions.create(
        model="fast",
        messages=ASK,  # type: ignore[arg-type]
        tools=["current_time"],  # type: ignore[list-item]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "It is noon."
    assert all(not (c.choices and c.choices[0].delta.tool_calls) for c in chunks)
    statuses = [extras(c).get("status") for c in chunks]
    assert statuses.index(6) < statuses.index(7)  # Chatchat tool_start, then tool_end
    started = next(c for c in chunks if extras(c).get("status") == 6)
    ended = next(c for c in chunks if extras(c).get("status") == 7)
    assert extras(started)["parley"]["tool"]["name"] == "current_time"
    output = extras(ended)["tool_calls"][0]["tool_output"]
    assert "iso" in json.loads(output)
    assert extras(ended)["tool_calls"][0]["is_error"] is False
    finish = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert finish.choices[0].finish_reason == "stop"
    assert extras(finish)["status"] == 5  # Chatchat agent_finish
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens == 20 + 11  # both model calls add up
    cost = extras(finish)["parley"]["cost"]
    assert cost["response_usd"] == pytest.approx(((20 + 11) * 1.0 + (9 + 2) * 2.0) / 1e6)
    # the second model call saw the call and its result, in OpenAI's order
    second = upstream.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["function"]["name"] == "current_time"
    assert second[2]["tool_call_id"] == second[1]["tool_calls"][0]["id"]
    assert "iso" in second[2]["content"]


def test_server_tool_non_streaming_and_chatchat_tool_config(
    agent: openai.OpenAI, upstream: MockOpenAI, agent_server: ParleyServer
) -> None:
    upstream.queue_tool_calls([("call_t2", "current_time", "{}")])
    upstream.queue_text("Noon.")
    reply = agent.chat.completions.create(
        model="fast",
        messages=ASK,  # type: ignore[arg-type]
        extra_body={"tool_config": {"current_time": {}}},
    )
    message = reply.choices[0].message
    assert message.content == "Noon."
    assert message.tool_calls is None
    assert reply.choices[0].finish_reason == "stop"
    report = extras(reply)["parley"]["tools"]
    assert [(t["name"], t["is_error"]) for t in report] == [("current_time", False)]
    conversation = extras(reply)["parley"]["conversation_id"]
    rows = db_rows(
        agent_server,
        "SELECT role, parts, usage FROM messages WHERE conversation_id = ? ORDER BY rowid",
        conversation,
    )
    assert [r["role"] for r in rows] == ["user", "assistant"]
    parts = json.loads(rows[1]["parts"])
    assert [p["kind"] for p in parts] == ["tool_call", "text"]
    assert parts[0]["result"]["is_error"] is False
    assert json.loads(rows[1]["usage"])["input_tokens"] == 20 + 11


def test_client_and_server_tools_in_one_step(agent: openai.OpenAI, upstream: MockOpenAI) -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    upstream.queue_tool_calls(
        [("call_s", "current_time", "{}"), ("call_c", "get_weather", '{"city": "Oslo"}')]
    )
    reply = agent.chat.completions.create(
        model="fast",
        messages=ASK,  # type: ignore[arg-type]
        tools=["current_time", weather],  # type: ignore[list-item]
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    calls = reply.choices[0].message.tool_calls
    assert calls is not None
    assert [(c.id, c.function.name) for c in calls] == [("call_c", "get_weather")]
    conversation = extras(reply)["parley"]["conversation_id"]
    # the client answers its call; the server's result is still in the history
    upstream.queue_text("Sunny at noon.")
    follow = agent.chat.completions.create(
        model="fast",
        messages=[{"role": "tool", "tool_call_id": "call_c", "content": "sunny"}],
        extra_body={"conversation_id": conversation},
    )
    assert follow.choices[0].message.content == "Sunny at noon."
    sent = upstream.requests[-1]["messages"]
    tools_seen = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert tools_seen["call_c"] == "sunny"
    assert "iso" in tools_seen["call_s"]


def test_retry_after_503_then_fallback_model(
    agent: openai.OpenAI, upstream: MockOpenAI, agent_server: ParleyServer
) -> None:
    # Parley's own retries: a client that does not send the SDK's retry count (with
    # it, Parley leaves same-model retries to the SDK: tests/api/test_client_retries.py)
    own = {"x-stainless-retry-count": openai.Omit()}
    upstream.queue_error(503, "busy", headers={"retry-after": "0"})
    upstream.queue_text("second try")
    reply = agent.chat.completions.create(model="fast", messages=ASK, extra_headers=own)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "second try"
    assert [r["model"] for r in upstream.requests] == ["mock-model"] * 2  # retried, same model
    conversation = extras(reply)["parley"]["conversation_id"]
    rows = db_rows(
        agent_server,
        "SELECT role FROM messages WHERE conversation_id = ?",
        conversation,
    )
    assert sorted(r["role"] for r in rows) == ["assistant", "user"]  # nothing duplicated

    upstream.reset()
    for _ in range(3):  # one try and two retries on the model, then its fallback
        upstream.queue_error(502, "bad gateway")
    upstream.queue_text("from the fallback")
    reply = agent.chat.completions.create(model="fast", messages=ASK, extra_headers=own)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "from the fallback"
    assert [r["model"] for r in upstream.requests] == ["mock-model"] * 3 + ["mock-large"]


def test_a_restart_tells_the_client_to_clear(agent: openai.OpenAI, upstream: MockOpenAI) -> None:
    # reasoning arrives, then the connection drops: nothing of the answer was sent yet
    frames = [sse(chunk({"role": "assistant", "reasoning_content": "Let me think"}))]
    upstream.queue(Reply(frames=[*frames, *frames], cut_after=1))
    upstream.queue_text("Answer.")
    chunks = list(
        agent.chat.completions.create(
            model="fast",
            messages=ASK,  # type: ignore[arg-type]
            stream=True,
        )
    )
    restarts = [extras(c)["parley"]["restart"] for c in chunks if "restart" in extras(c)["parley"]]
    assert len(restarts) == 1
    assert restarts[0]["clear"] is True
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Answer."


def test_runaway_model_stops_with_an_explanation(
    agent: openai.OpenAI, upstream: MockOpenAI, agent_server: ParleyServer
) -> None:
    for index in range(12):
        upstream.queue_tool_calls([(f"call_{index}", "current_time", "{}")])
    reply = agent.chat.completions.create(
        model="fast",
        messages=ASK,  # type: ignore[arg-type]
        tools=["current_time"],  # type: ignore[list-item]
    )
    assert len(upstream.requests) <= 8
    content = reply.choices[0].message.content or ""
    assert "repeating" in content
    assert extras(reply)["parley"]["stopped"]["code"] == "loop_detected"
    errors = [t for t in extras(reply)["parley"]["tools"] if t["is_error"]]
    assert any("Loop detected" in t["tool_output"] for t in errors)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == 20 * len(upstream.requests)  # all steps recorded


def test_task_mode(agent: openai.OpenAI, upstream: MockOpenAI, agent_server: ParleyServer) -> None:
    upstream.queue_tool_calls([("call_task", "current_time", "{}")])
    upstream.queue_text("Done: it is noon.")
    response = httpx.post(
        f"{agent_server.url}/v1/tasks",
        json={"task": "Find out the time.", "tools": ["current_time"], "model": "fast"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    task = response.json()
    assert task["object"] == "task"
    assert task["status"] == "completed"
    assert task["result"] == "Done: it is noon."
    assert [s["name"] for s in task["steps"]] == ["current_time"]
    assert task["usage"]["prompt_tokens"] == 31
    assert task["parley"]["conversation_id"]

    upstream.queue_text("Streaming result.")
    with httpx.stream(
        "POST",
        f"{agent_server.url}/v1/tasks",
        json={"task": "Say something.", "stream": True},
        timeout=30,
    ) as streamed:
        assert streamed.status_code == 200
        lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    bad = httpx.post(f"{agent_server.url}/v1/tasks", json={"task": "x", "tools": ["nope"]})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "tools.0"
    empty = httpx.post(f"{agent_server.url}/v1/tasks", json={"task": "  "})
    assert empty.status_code == 400


def test_sigterm_finishes_or_interrupts_live_streams(upstream: MockOpenAI, tmp_path: Path) -> None:
    upstream.reset()
    config = server_config(upstream, agent={"shutdown_grace_seconds": 1.0})
    server = ParleyServer(tmp_path / "data", config, process=True).start()  # SIGTERM
    try:
        # a slow reply: 40 pieces, 100 ms apart (4 s), longer than the 1 s grace
        upstream.queue(Reply(frames=text_frames([f"w{i} " for i in range(40)]), delay=0.1))
        received: list[str] = []
        finished = threading.Event()

        def read() -> None:
            with httpx.stream(
                "POST",
                f"{server.url}/v1/chat/completions",
                json={"model": "fast", "messages": ASK, "stream": True},
                timeout=30,
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        received.append(line[6:])
            finished.set()

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 10
        while len(received) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.process.send_signal(signal.SIGTERM)
        server.log_with("Shutting down")  # uvicorn's line: the signal has been handled
        try:
            refused = httpx.post(
                f"{server.url}/v1/chat/completions",
                json={"model": "fast", "messages": ASK},
                timeout=5,
            ).status_code
        except httpx.TransportError:
            refused = 0  # the listening socket is already closed: also a refusal
        assert refused in (0, 503)
        assert finished.wait(15)
        reader.join()
        last = json.loads(received[-1])
        assert "error" in last
        assert "shutting down" in last["error"]["message"]
        # uvicorn re-raises the signal once it has shut down cleanly
        assert server.process.wait(15) in (0, -signal.SIGTERM)
        rows = db_rows(server, "SELECT status, parts FROM messages WHERE role = 'assistant'")
        assert [r["status"] for r in rows] == ["interrupted"]
        saved = json.loads(rows[0]["parts"])[0]["text"]
        assert saved.startswith("w0 w1 ")
    finally:
        server.stop()


def test_silent_upstream_hits_the_deadlines(upstream: MockOpenAI, tmp_path: Path) -> None:
    upstream.reset()
    config = server_config(
        upstream,
        agent={
            "retry_backoff_seconds": [],
            "first_token_base_seconds": 0.5,
            "first_token_seconds_per_1k_input": 0,
            "between_chunks_seconds": 0.5,
        },
    )
    with (
        ParleyServer(tmp_path / "data", config) as server,
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as client,
    ):
        closed = upstream.connections_closed
        upstream.queue(Reply(frames=text_frames(["late"]), first_delay=5))
        began = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="fast", messages=ASK, stream=True)  # type: ignore[arg-type]
        assert caught.value.status_code == 504
        assert time.monotonic() - began < 3
        # the upstream request was closed, not left hanging
        deadline = time.monotonic() + 5
        while upstream.connections_closed == closed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert upstream.connections_closed > closed

        # a stall mid-stream: the partial answer is kept and the client gets an error
        frames = text_frames(["one ", "two ", "never"])
        upstream.queue(Reply(frames=frames, stall_after=3, stall_seconds=3))
        stream = client.chat.completions.create(
            model="fast",
            messages=ASK,  # type: ignore[arg-type]
            stream=True,
        )
        received: list[str] = []

        def read() -> None:
            for item in stream:
                if item.choices:
                    received.append(item.choices[0].delta.content or "")

        with pytest.raises(openai.APIError) as stalled:
            read()
        stream.close()
        assert "between chunks" in str(stalled.value)
        rows = db_rows(
            server,
            "SELECT status, parts FROM messages WHERE role = 'assistant' ORDER BY rowid",
        )
        assert rows[-1]["status"] == "incomplete"
        assert json.loads(rows[-1]["parts"])[0]["text"] == "".join(received)


def test_workspace_files_go_with_their_conversation(
    agent: openai.OpenAI, upstream: MockOpenAI, agent_server: ParleyServer
) -> None:
    arguments = json.dumps({"path": "notes/plan.txt", "content": "step one"})
    upstream.queue_tool_calls([("call_w", "workspace_write", arguments)])
    upstream.queue_text("Saved.")
    reply = agent.chat.completions.create(
        model="fast",
        messages=ASK,  # type: ignore[arg-type]
        tools=["workspace_write"],  # type: ignore[list-item]
    )
    conversation = extras(reply)["parley"]["conversation_id"]
    folder = conversation_workspace(agent_server.data_dir / "workspaces", "local", conversation)
    assert (folder / "notes" / "plan.txt").read_text() == "step one"
    assert httpx.delete(f"{agent_server.url}/v1/conversations/{conversation}").status_code == 200
    assert not folder.exists()
