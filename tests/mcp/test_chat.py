"""MCP tools in chat, end to end: a real Parley server with MCP servers in its config (real
SDK servers over stdio and streamable HTTP, one that cannot start, one that never
answers), the mock upstream scripting the model's tool calls, and the official ``openai``
client. Misbehaving servers must cost an error message, never the reply."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from parley.testing.mock_openai import MockOpenAI
from tests.conftest import server_config
from tests.mcp.test_client import ROOT, SERVER_SCRIPT, HttpServer
from tests.support.server import ParleyServer
from tests.support.waiting import wait_until

HANG_AT_START = "import sys, time\nsys.stdin.readline()\ntime.sleep(120)\n"
MODEL = "mock/mock-model"


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    with HttpServer() as server:
        yield server


def mcp_settings(http_server: HttpServer) -> dict[str, Any]:
    stdio = {"command": sys.executable, "args": [SERVER_SCRIPT], "env": {"PYTHONPATH": ROOT}}
    return {
        "list_wait_seconds": 3,
        "servers": {
            "local": {**stdio, "timeout": 4},
            "web": {"url": http_server.url, "timeout": 4},
            "broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]},
            "stuck": {"command": sys.executable, "args": ["-c", HANG_AT_START], "timeout": 2},
            "off": {**stdio, "enabled": False},
        },
    }


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, http_server: HttpServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        mcp=mcp_settings(http_server),
        tools={"approval": {"mcp__local__echo": "ask"}, "max_active": 60},
    )
    with ParleyServer(tmp_path_factory.mktemp("parley-mcp"), config) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-anything", max_retries=0)


def offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def parley_of(reply: Any) -> dict[str, Any]:
    extra: dict[str, Any] = (reply.model_extra or {}).get("parley", {})
    return extra


def ask(client: openai.OpenAI, **extra: Any) -> ChatCompletion:
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "use your tools"}],
        extra_body=extra or None,
    )


def approve(client: openai.OpenAI, conversation_id: str, call_id: str) -> ChatCompletion:
    """Approve a paused call; the reply carries on."""
    return client.post(
        f"/conversations/{conversation_id}/approvals",
        body={"decisions": [{"tool_call_id": call_id, "decision": "approve"}]},
        cast_to=ChatCompletion,
    )


def call(
    client: openai.OpenAI, upstream: MockOpenAI, name: str, arguments: dict[str, Any]
) -> tuple[str, ChatCompletion]:
    """The model calls one MCP tool, then answers "done": (the tool's result as the
    model saw it, the reply)."""
    upstream.queue_tool_calls([("call_1", name, json.dumps(arguments))])
    upstream.queue_text("done")
    reply = ask(client)
    assert reply.choices[0].message.content == "done"
    return tool_results(upstream.requests[-1])["call_1"], reply


def test_every_working_server_is_offered_and_the_broken_ones_are_notes(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("hello")
    reply = ask(client)
    assert reply.choices[0].message.content == "hello"
    tools = offered(upstream.requests[0])
    assert {"mcp__local__echo", "mcp__local__add", "mcp__web__echo", "mcp__web__weather"} <= tools
    assert not any(
        name.startswith(("mcp__broken__", "mcp__stuck__", "mcp__off__")) for name in tools
    )
    schema = next(
        t["function"]["parameters"]
        for t in upstream.requests[0]["tools"]
        if t["function"]["name"] == "mcp__web__add"
    )
    assert set(schema["properties"]) == {"a", "b"}
    notes = " ".join(parley_of(reply).get("notes", []))
    assert "'broken'" in notes
    assert "'stuck'" in notes
    assert "'off'" not in notes  # disabled on purpose: nothing to report


def test_tools_run_over_stdio_and_http(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    result, _ = call(client, upstream, "mcp__local__add", {"a": 2, "b": 40})
    assert result == "42"
    result, _ = call(client, upstream, "mcp__web__weather", {"city": "Oslo"})
    assert json.loads(result) == {"city": "Oslo", "celsius": 21.5}
    result, _ = call(client, upstream, "mcp__web__picture", {})
    assert result.startswith("[image: image/png,")


def test_a_tool_error_is_an_error_result_and_the_reply_goes_on(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    result, _ = call(client, upstream, "mcp__web__fail", {"reason": "testing"})
    assert "broken on purpose: testing" in result


def test_a_hanging_call_times_out_and_the_server_still_answers_after(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    result, _ = call(client, upstream, "mcp__local__hang", {"seconds": 60})
    assert "did not answer within 4 s" in result
    result, _ = call(client, upstream, "mcp__local__echo_twice", {"text": "again"})
    assert "Unknown tool" in result  # not a tool of the server: the model is told
    result, _ = call(client, upstream, "mcp__web__echo", {"text": "still here"})
    assert result == "still here"


def test_a_server_that_exits_after_a_call_is_restarted_for_the_next(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    first, _ = call(client, upstream, "mcp__local__pid", {})
    result, _ = call(client, upstream, "mcp__local__exit_soon", {})
    assert result == "bye"
    wait_until(lambda: _reaped(int(first)))  # the process is gone now
    with pytest.raises(ProcessLookupError):
        os.kill(int(first), 0)
    second, _ = call(client, upstream, "mcp__local__pid", {})
    assert second != first
    os.kill(int(second), 0)  # a fresh process answered


def test_a_server_that_dies_mid_call_costs_that_call_only(
    client: openai.OpenAI, upstream: MockOpenAI, tmp_path: Path
) -> None:
    marker = tmp_path / "crashed"
    result, _ = call(client, upstream, "mcp__local__crash", {"marker": str(marker)})
    assert "'local'" in result
    assert "exited" in result or "closed" in result
    assert len(marker.read_text().splitlines()) == 1  # run once: never retried after it ran
    result, _ = call(client, upstream, "mcp__local__add", {"a": 1, "b": 1})
    assert result == "2"  # a fresh process for the next call


def test_garbage_on_stdout_during_a_call_does_not_cost_the_answer(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    result, _ = call(client, upstream, "mcp__local__garble", {"text": "intact"})
    assert result == "intact"
    result, _ = call(client, upstream, "mcp__local__add", {"a": 2, "b": 2})
    assert result == "4"  # and the session goes on


def test_megabytes_are_cut_before_the_model_sees_them(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    result, _ = call(client, upstream, "mcp__web__big", {"chars": 3_000_000})
    assert len(result) < 110_000
    assert "x" * 1000 in result
    assert "truncated" in result or "saved" in result


def test_use_mcp_false_and_chatchat_without_it_offer_no_mcp_tools(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("plain")
    ask(client, use_mcp=False)
    assert not any(name.startswith("mcp__") for name in offered(upstream.requests[-1]))
    upstream.queue_text("chatchat")
    response = httpx.post(
        f"{server.url}/chat/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert not any(name.startswith("mcp__") for name in offered(upstream.requests[-1]))
    upstream.queue_text("chatchat with mcp")
    response = httpx.post(
        f"{server.url}/chat/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "use_mcp": True},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert "mcp__web__echo" in offered(upstream.requests[-1])


def test_tools_named_in_the_request(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    upstream.queue_text("one")
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=["mcp__local__add"],  # type: ignore[list-item]
        extra_body={"use_mcp": False},
    )
    assert {n for n in offered(upstream.requests[-1]) if n.startswith("mcp__")} == {
        "mcp__local__add"
    }
    upstream.queue_text("all of web")
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=["mcp__web__*"],  # type: ignore[list-item]
        extra_body={"use_mcp": False},
    )
    mine = {n for n in offered(upstream.requests[-1]) if n.startswith("mcp__")}
    assert "mcp__web__echo" in mine
    assert all(n.startswith("mcp__web__") for n in mine)


def test_an_unknown_server_in_tools_is_a_400(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as failure:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            tools=["mcp__nowhere__echo"],  # type: ignore[list-item]
        )
    assert "nowhere" in str(failure.value)
    assert upstream.requests == []


def test_a_missing_tool_of_a_named_server_is_a_note(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("ok")
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        tools=["mcp__web__nonexistent"],  # type: ignore[list-item]
        extra_body={"use_mcp": False},
    )
    assert "has no tool 'mcp__web__nonexistent'" in " ".join(parley_of(reply)["notes"])


def test_an_assistant_brings_its_servers(
    server: ParleyServer, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    created = httpx.post(
        f"{server.url}/v1/assistants",
        json={"name": "webby", "mcp_servers": ["web"]},
        timeout=30,
    )
    assert created.status_code == 200, created.text
    assert created.json()["mcp_servers"] == ["web"]
    refused = httpx.post(
        f"{server.url}/v1/assistants", json={"name": "nope", "mcp_servers": ["ghost"]}, timeout=30
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "unknown_mcp_server"
    upstream.queue_text("with web")
    ask(client, use_mcp=False, assistant="webby")
    mine = {n for n in offered(upstream.requests[-1]) if n.startswith("mcp__")}
    assert "mcp__web__add" in mine
    assert all(n.startswith("mcp__web__") for n in mine)


def test_an_mcp_call_that_needs_approval_runs_once_approved(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_e", "mcp__local__echo", json.dumps({"text": "approved"}))])
    paused = ask(client)
    extra = parley_of(paused)
    assert extra["pending_approvals"][0]["tool"] == "mcp__local__echo"
    upstream.queue_text("echoed")
    resumed = approve(client, extra["conversation_id"], "call_e")
    assert resumed.choices[0].message.content == "echoed"
    assert tool_results(upstream.requests[-1])["call_e"] == "approved"


def test_health_shows_each_server(server: ParleyServer, client: openai.OpenAI) -> None:
    listed = httpx.get(f"{server.url}/v1/mcp/servers", timeout=30)
    assert listed.status_code == 200, listed.text
    health = {entry["name"]: entry for entry in listed.json()["data"]}
    assert health["web"]["connected"] is True
    assert health["web"]["tool_count"] >= 5
    assert health["web"]["last_error"] is None
    assert health["broken"]["connected"] is False
    assert health["broken"]["last_error"]
    assert health["off"]["enabled"] is False


IGNORES_EOF = (
    "import runpy, sys, time\n"
    "sys.argv = [sys.argv[1]]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "time.sleep(120)  # stdin closed: an orphan would live on; only a signal stops it\n"
)


def test_stopping_parley_stops_its_stdio_servers(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    sturdy = {
        "command": sys.executable,
        "args": ["-c", IGNORES_EOF, SERVER_SCRIPT],
        "env": {"PYTHONPATH": ROOT},
        "timeout": 5,
    }
    config = server_config(upstream, mcp={"servers": {"sturdy": sturdy}})
    with ParleyServer(tmp_path_factory.mktemp("parley-stop"), config) as parley:
        client = openai.OpenAI(base_url=f"{parley.url}/v1", api_key="x", max_retries=0)
        result, _ = call(client, upstream, "mcp__sturdy__pid", {})
        pid = int(result)
        os.kill(pid, 0)
    deadline = time.monotonic() + 10
    while not _gone(pid):
        assert time.monotonic() < deadline, "the stdio server outlived Parley"
        time.sleep(0.1)


def test_an_approved_call_whose_server_went_away_gets_the_reason(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with HttpServer() as web:
        settings = {"servers": {"flaky": {"url": web.url, "timeout": 3}}}
        config = server_config(upstream, mcp=settings, tools={"approval": {"mcp__flaky__*": "ask"}})
        parley = ParleyServer(tmp_path_factory.mktemp("parley-gone"), config)
        with parley:
            client = openai.OpenAI(base_url=f"{parley.url}/v1", api_key="x", max_retries=0)
            upstream.queue_tool_calls([("call_f", "mcp__flaky__echo", '{"text": "hi"}')])
            paused = ask(client)
            conversation = parley_of(paused)["conversation_id"]
            assert parley_of(paused)["pending_approvals"][0]["tool"] == "mcp__flaky__echo"
            web.__exit__(None, None, None)  # the server goes away while the call waits
            upstream.queue_text("sorry")
            resumed = approve(client, conversation, "call_f")
            assert resumed.choices[0].message.content == "sorry"
            result = tool_results(upstream.requests[-1])["call_f"]
            assert "'flaky'" in result
            assert "Unknown tool" not in result


def test_tasks_use_the_mcp_tools_they_name(server: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_tool_calls([("call_t", "mcp__local__add", '{"a": 20, "b": 22}')])
    upstream.queue_text("42 it is")
    response = httpx.post(
        f"{server.url}/v1/tasks",
        json={"task": "add 20 and 22", "model": MODEL, "tools": ["mcp__local__add"]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["result"] == "42 it is"
    assert {n for n in offered(upstream.requests[-2]) if n.startswith("mcp__")} == {
        "mcp__local__add"
    }
    assert tool_results(upstream.requests[-1])["call_t"] == "42"


def _reaped(pid: int) -> bool:
    """Whether ``pid`` is no process at all (exited, and waited for)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
