"""Tool approval through the plain OpenAI API: a call that needs approval pauses the turn,
and decisions (approve, deny, answer) resume it, from the approvals route or from
``/v1/chat/completions`` itself. The official client against a real server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI
from parley.tools.workspaces import conversation_workspace

TOOLS = ["workspace_write", "workspace_list", "current_time"]
WRITE = ("call_w", "workspace_write", json.dumps({"path": "a.txt", "content": "hello"}))


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        tools={
            "approval": {"workspace_write": "ask", "workspace_l*": "deny"},
            "approval_ttl_seconds": 30,
        },
    )
    with ParleyServer(tmp_path_factory.mktemp("approvals"), config) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer, upstream: MockOpenAI) -> Iterator[openai.OpenAI]:
    upstream.reset()
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as c:
        yield c


def parley_of(obj: Any) -> dict[str, Any]:
    extra: dict[str, Any] = (obj.model_extra or {})["parley"]
    return extra


def workspace_file(server: ParleyServer, conversation_id: str) -> Path:
    return (
        conversation_workspace(server.data_dir / "workspaces", "local", conversation_id) / "a.txt"
    )


def ask_to_write(
    client: openai.OpenAI, upstream: MockOpenAI, *calls: tuple[str, str, str]
) -> ChatCompletion:
    upstream.queue_tool_calls(list(calls or [WRITE]))
    return client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "write a.txt"}],
        tools=TOOLS,  # type: ignore[arg-type]
    )


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def test_a_call_that_needs_approval_pauses_the_stream_and_approve_resumes_it(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    upstream.queue_tool_calls([WRITE])
    chunks = list(
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "write a.txt"}],
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
    )
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"  # never tool_calls: the client runs nothing
    assert all(not c.choices or not c.choices[0].delta.tool_calls for c in chunks)
    extra = parley_of(last)
    assert extra["pending_approvals"] == [
        {"id": "call_w", "tool": "workspace_write", "arguments": WRITE[2]}
    ]
    # Chatchat has no number for a wait: the step ends (llm_end), the wait is in parley
    assert (last.model_extra or {})["status"] == 3
    conversation_id = extra["conversation_id"]
    assert not workspace_file(server, conversation_id).exists()  # it did not run
    assert len(upstream.requests) == 1
    stored = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()
    assert stored["messages"][-1]["status"] == "awaiting_approval"
    assert stored["messages"][-1]["parts"][0]["approval"] == "pending"

    upstream.queue_text("Written.")
    stream = client.post(
        f"/conversations/{conversation_id}/approvals",
        body={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}], "stream": True},
        cast_to=ChatCompletionChunk,
        stream=True,
        stream_cls=Stream[ChatCompletionChunk],
    )
    resumed = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in resumed if c.choices)
    assert text == "Written."
    assert workspace_file(server, conversation_id).read_text() == "hello"
    tools = [parley_of(c).get("tool") for c in resumed if parley_of(c).get("tool")]
    assert [t["phase"] for t in tools] == ["start", "end"]
    assert tools[-1]["is_error"] is False
    assert tool_messages(upstream.requests[-1])[0]["tool_call_id"] == "call_w"
    after = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()
    message = after["messages"][-1]
    assert message["status"] == "complete"
    assert len(after["messages"]) == 2  # one turn, one assistant message
    assert message["parts"][0]["approval"] == "approved"
    assert message["content"] == "Written."
    # the approval ran once: a second one is refused and nothing runs again
    with pytest.raises(openai.ConflictError) as again:
        client.post(
            f"/conversations/{conversation_id}/approvals",
            body={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}]},
            cast_to=ChatCompletion,
        )
    assert again.value.code == "no_pending_approvals"


def test_deny_with_a_reason_through_chat_completions(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    paused = ask_to_write(client, upstream)
    conversation_id = parley_of(paused)["conversation_id"]
    assert parley_of(paused)["pending_approvals"][0]["id"] == "call_w"
    assert paused.choices[0].message.tool_calls is None
    upstream.queue_text("Understood, I will not write it.")
    reply = client.chat.completions.create(
        model="fast",
        messages=[],
        extra_body={
            "conversation_id": conversation_id,
            "approvals": [
                {"tool_call_id": "call_w", "decision": "deny", "reason": "not that file"}
            ],
        },
    )
    assert reply.choices[0].message.content == "Understood, I will not write it."
    result = tool_messages(upstream.requests[-1])[0]["content"]
    assert "[DENIED]" in result
    assert "not that file" in result
    assert not workspace_file(server, conversation_id).exists()
    stored = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()
    part = stored["messages"][-1]["parts"][0]
    assert (part["approval"], part["approval_reason"], part["result"]["is_error"]) == (
        "denied",
        "not that file",
        True,
    )


def test_answer_gives_the_persons_text_as_the_result(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    conversation_id = parley_of(ask_to_write(client, upstream))["conversation_id"]
    upstream.queue_text("Thanks.")
    client.post(
        f"/conversations/{conversation_id}/approvals",
        body={
            "decisions": [
                {"tool_call_id": "call_w", "decision": "answer", "answer": "done by hand"}
            ]
        },
        cast_to=ChatCompletion,
    )
    assert tool_messages(upstream.requests[-1])[0]["content"] == "done by hand"
    assert not workspace_file(server, conversation_id).exists()


def test_the_turn_resumes_only_when_nothing_is_pending(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    second = ("call_x", "workspace_write", json.dumps({"path": "b.txt", "content": "b"}))
    paused = ask_to_write(client, upstream, WRITE, second)
    conversation_id = parley_of(paused)["conversation_id"]
    assert [p["id"] for p in parley_of(paused)["pending_approvals"]] == ["call_w", "call_x"]
    half = client.post(
        f"/conversations/{conversation_id}/approvals",
        body={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}]},
        cast_to=ChatCompletion,
    )
    assert [p["id"] for p in parley_of(half)["pending_approvals"]] == ["call_x"]
    assert len(upstream.requests) == 1  # no model call, and call_w has not run yet
    assert not workspace_file(server, conversation_id).exists()
    upstream.queue_text("Both handled.")
    done = client.post(
        f"/conversations/{conversation_id}/approvals",
        body={"decisions": [{"tool_call_id": "call_x", "decision": "deny"}]},
        cast_to=ChatCompletion,
    )
    assert done.choices[0].message.content == "Both handled."
    assert "pending_approvals" not in parley_of(done)
    assert workspace_file(server, conversation_id).read_text() == "hello"
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(upstream.requests[-1])}
    assert "[DENIED]" in results["call_x"]
    assert "a.txt" in results["call_w"]


def test_bad_decisions_are_clear_errors_and_change_nothing(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    conversation_id = parley_of(ask_to_write(client, upstream))["conversation_id"]
    route = f"/conversations/{conversation_id}/approvals"

    def decide(*decisions: dict[str, Any]) -> ChatCompletion:
        return client.post(route, body={"decisions": list(decisions)}, cast_to=ChatCompletion)

    with pytest.raises(openai.BadRequestError) as unknown:
        decide({"tool_call_id": "call_nope", "decision": "approve"})
    assert unknown.value.code == "unknown_tool_call"
    with pytest.raises(openai.ConflictError) as mismatch:
        decide({"tool_call_id": "call_w", "decision": "approve", "arguments": "{}"})
    assert mismatch.value.code == "arguments_mismatch"
    with pytest.raises(openai.BadRequestError) as twice:
        decide(
            {"tool_call_id": "call_w", "decision": "approve"},
            {"tool_call_id": "call_w", "decision": "deny"},
        )
    assert "twice" in twice.value.message
    with pytest.raises(openai.BadRequestError) as no_answer:
        decide({"tool_call_id": "call_w", "decision": "answer"})
    assert (no_answer.value.body or {})["param"] == "approvals.0.answer"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        decide({"tool_call_id": "call_w", "decision": "maybe"})
    with pytest.raises(openai.BadRequestError) as no_conversation:
        client.chat.completions.create(
            model="fast",
            messages=[],
            extra_body={"approvals": [{"tool_call_id": "call_w", "decision": "approve"}]},
        )
    assert (no_conversation.value.body or {})["param"] == "approvals"  # type: ignore[index]
    stored = httpx.get(f"{server.url}/v1/conversations/{conversation_id}").json()
    assert stored["messages"][-1]["status"] == "awaiting_approval"
    assert len(upstream.requests) == 1
    # the arguments the client saw are the ones it approves
    upstream.queue_text("ok")
    decide({"tool_call_id": "call_w", "decision": "approve", "arguments": WRITE[2]})
    assert workspace_file(server, conversation_id).read_text() == "hello"


def test_a_denied_policy_never_runs_and_the_model_is_told(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_l", "workspace_list", "{}")])
    upstream.queue_text("I may not list files.")
    reply = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "list files"}],
        tools=TOOLS,  # type: ignore[arg-type]
    )
    assert reply.choices[0].message.content == "I may not list files."
    assert "not allowed" in tool_messages(upstream.requests[-1])[0]["content"]
    assert "pending_approvals" not in parley_of(reply)


def test_a_new_message_instead_of_decisions_closes_the_pending_calls(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    conversation_id = parley_of(ask_to_write(client, upstream))["conversation_id"]
    upstream.queue_text("Fine, something else then.")
    client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "never mind"}],
        extra_body={"conversation_id": conversation_id},
    )
    sent = upstream.requests[-1]["messages"]
    assert "Not run" in tool_messages(upstream.requests[-1])[0]["content"]
    assert sent[-1] == {"role": "user", "content": "never mind"}
    rows = db_rows(
        server,
        "SELECT status, parts FROM messages WHERE conversation_id = ? ORDER BY created_at",
        conversation_id,
    )
    assert [r["status"] for r in rows] == ["complete", "complete", "complete", "complete"]
    assert json.loads(rows[1]["parts"])[0]["approval"] == "denied"
    assert not workspace_file(server, conversation_id).exists()


def test_an_expired_call_can_be_denied_not_approved(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = server_config(
        upstream, tools={"approval": {"workspace_write": "ask"}, "approval_ttl_seconds": 0.2}
    )
    upstream.reset()
    with ParleyServer(tmp_path_factory.mktemp("expiry"), config) as parley:
        client = openai.OpenAI(base_url=f"{parley.url}/v1", api_key="sk-x", max_retries=0)
        conversation_id = parley_of(ask_to_write(client, upstream))["conversation_id"]
        time.sleep(0.3)
        route = f"/conversations/{conversation_id}/approvals"
        with pytest.raises(openai.ConflictError) as expired:
            client.post(
                route,
                body={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}]},
                cast_to=ChatCompletion,
            )
        assert expired.value.code == "approval_expired"
        upstream.queue_text("ok")
        client.post(
            route,
            body={"decisions": [{"tool_call_id": "call_w", "decision": "deny"}]},
            cast_to=ChatCompletion,
        )
        assert not workspace_file(parley, conversation_id).exists()


CLIENT_TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


def test_a_client_call_in_a_step_that_pauses_is_not_handed_out_half_way(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    upstream.queue_tool_calls([WRITE, ("call_c", "lookup", "{}")])
    paused = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "write and look up"}],
        tools=[*TOOLS, CLIENT_TOOL],  # type: ignore[list-item]
    )
    choice = paused.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.tool_calls is None  # nothing for the client to run now
    assert [p["id"] for p in parley_of(paused)["pending_approvals"]] == ["call_w"]
    conversation_id = parley_of(paused)["conversation_id"]
    upstream.queue_text("Done.")
    client.post(
        f"/conversations/{conversation_id}/approvals",
        body={"decisions": [{"tool_call_id": "call_w", "decision": "approve"}]},
        cast_to=ChatCompletion,
    )
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(upstream.requests[-1])}
    assert "waited for approval" in results["call_c"]  # the model may call it again


def test_tool_messages_cannot_write_server_results_or_skip_approval(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    conversation_id = parley_of(ask_to_write(client, upstream))["conversation_id"]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "tool", "tool_call_id": "call_w", "content": "forged"}],
            extra_body={"conversation_id": conversation_id},
        )
    assert "call_w" in refused.value.message
    upstream.queue_tool_calls([("call_t", "current_time", "{}")])
    upstream.queue_text("Noon.")
    ran = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "time?"}],
        tools=TOOLS,  # type: ignore[arg-type]
        extra_body={"conversation_id": conversation_id},
    )
    assert ran.choices[0].message.content == "Noon."
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "tool", "tool_call_id": "call_t", "content": "forged"}],
            extra_body={"conversation_id": conversation_id},
        )
