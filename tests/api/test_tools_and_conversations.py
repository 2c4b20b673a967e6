"""Client tools in both modes, conversation continuation, and the conversations API."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from tests.conftest import db_rows
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = ("call_1", "get_weather", '{"city": "Zürich"}')


def _conversation_id(reply: object) -> str:
    extra = getattr(reply, "model_extra", None) or {}
    return str(extra["parley"]["conversation_id"])


def test_client_tool_call_non_streaming_then_result(client: openai.OpenAI, upstream: MockOpenAI):
    upstream.queue_tool_calls([CALL])
    messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Zürich?"}]
    reply = client.chat.completions.create(
        model="fast", messages=messages, tools=[WEATHER], tool_choice="auto"
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == CALL
    sent = upstream.requests[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tool_choice"] == "auto"

    upstream.queue_text("It is sunny.")
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    final = client.chat.completions.create(model="fast", messages=messages, tools=[WEATHER])
    assert final.choices[0].message.content == "It is sunny."
    sent_messages = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent_messages] == ["user", "assistant", "tool"]
    assert sent_messages[1]["tool_calls"][0]["id"] == "call_1"
    assert sent_messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"}


def test_client_tool_calls_streaming(client: openai.OpenAI, upstream: MockOpenAI):
    upstream.queue_tool_calls([CALL, ("call_2", "get_weather", '{"city": "Bern"}')], split=3)
    stream = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "two cities"}],
        tools=[WEATHER],
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            if delta.function:
                entry["name"] += delta.function.name or ""
                entry["arguments"] += delta.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0] == {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Zürich"}'}
    assert calls[1]["arguments"] == '{"city": "Bern"}'


def test_string_tool_choice_is_expanded(client: openai.OpenAI, upstream: MockOpenAI):
    upstream.queue_tool_calls([CALL])
    client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER],
        extra_body={"tool_choice": "get_weather"},
    )
    assert upstream.requests[-1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


def test_unknown_server_tool_name_is_400(client: openai.OpenAI, upstream: MockOpenAI):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"tools": ["no_such_tool"]},
        )
    assert caught.value.body["param"] == "tools.0"  # type: ignore[index]
    assert upstream.requests == []


def test_continue_conversation_by_id(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
):
    upstream.queue_text("Nice to meet you, Ada.")
    first = client.chat.completions.create(
        model="fast",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "I am Ada."},
        ],
    )
    conversation_id = _conversation_id(first)

    upstream.queue_text("Your name is Ada.")
    stream = client.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": "What is my name?"}],
        stream=True,
        extra_body={"conversation_id": conversation_id},
    )
    chunks = list(stream)
    assert _conversation_id(chunks[0]) == conversation_id
    sent = upstream.requests[-1]["messages"]
    assert sent == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    stored = httpx.get(f"{parley.url}/v1/conversations/{conversation_id}").json()
    assert [m["role"] for m in stored["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert stored["messages"][-1]["content"] == "Your name is Ada."
    assert all(m["status"] == "complete" for m in stored["messages"])
    assert stored["title"] == "I am Ada."


def test_continue_with_client_tool_results(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
):
    upstream.queue_tool_calls([CALL])
    first = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER]
    )
    conversation_id = _conversation_id(first)
    upstream.queue_text("Sunny.")
    final = client.chat.completions.create(
        model="fast",
        messages=[{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        tools=[WEATHER],
        extra_body={"conversation_id": conversation_id},
    )
    assert final.choices[0].message.content == "Sunny."
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[2]["content"] == "sunny"
    rows = db_rows(
        parley,
        "SELECT role, parts FROM messages WHERE conversation_id = ? ORDER BY created_at",
        conversation_id,
    )
    call_part = json.loads(rows[1]["parts"])[0]
    assert call_part["kind"] == "tool_call"
    assert call_part["result"] == {"content": "sunny", "is_error": False}

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "tool", "tool_call_id": "call_nope", "content": "x"}],
            extra_body={"conversation_id": conversation_id},
        )
    assert caught.value.body["param"] == "messages.0.tool_call_id"  # type: ignore[index]


def test_orphan_tool_result_is_400(client: openai.OpenAI, upstream: MockOpenAI):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="fast",
            messages=[
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "call_x", "content": "y"},
            ],
        )
    assert upstream.requests == []


def test_unknown_conversation_is_404(client: openai.OpenAI, upstream: MockOpenAI):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"conversation_id": "conv_missing"},
        )
    assert upstream.requests == []


def test_conversations_list_rename_delete(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
):
    ids = []
    for n in range(3):
        upstream.queue_text(f"reply {n}")
        reply = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": f"topic {n}"}]
        )
        ids.append(_conversation_id(reply))
    api = f"{parley.url}/v1/conversations"
    page = httpx.get(api, params={"limit": 2}).json()
    assert [c["id"] for c in page["data"]] == [ids[2], ids[1]]
    assert page["has_more"] is True
    rest = httpx.get(api, params={"limit": 2, "after": page["last_id"]}).json()
    assert rest["data"][0]["id"] == ids[0]

    renamed = httpx.patch(f"{api}/{ids[0]}", json={"title": "Renamed"})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == "Renamed"
    assert httpx.patch(f"{api}/{ids[0]}", json={"title": ""}).status_code == 400

    assert httpx.delete(f"{api}/{ids[0]}").json()["deleted"] is True
    gone = httpx.get(f"{api}/{ids[0]}")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "conversation_not_found"
    assert httpx.delete(f"{api}/{ids[0]}").status_code == 404
    assert not db_rows(parley, "SELECT id FROM messages WHERE conversation_id=?", ids[0])


def test_chatchat_route(parley: ParleyServer, upstream: MockOpenAI):
    """Chatchat clients send max_tokens 0, a client-made conversation id, and read status."""
    upstream.queue_text("你好", "！")
    body = {
        "model": "fast",
        "messages": [{"role": "user", "content": "你好"}],
        "stream": True,
        "max_tokens": 0,
        "conversation_id": "b5e1c3a0d2f94e8c",
        "temperature": 0.7,
        "tool_config": {},
    }
    with httpx.stream("POST", f"{parley.url}/chat/chat/completions", json=body) as response:
        assert response.status_code == 200
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == (
        "你好！"
    )
    assert all(c["message_type"] == 1 and c["message_id"] for c in chunks)
    # the client's id names a conversation of this owner's (tests/api/chatchat/test_ids.py)
    conversation = chunks[0]["parley"]["conversation_id"]
    assert conversation.startswith("conv_c")
    assert "max_tokens" not in upstream.requests[-1]  # Chatchat's 0: the upstream's default
    stored = httpx.get(f"{parley.url}/v1/conversations/{conversation}")
    assert stored.status_code == 200


def test_a_conversation_of_ten_thousand_messages_reads_back_whole(
    client: openai.OpenAI, parley: ParleyServer, upstream: MockOpenAI
):
    """Written by orjson (FastAPI's encoder held the loop for about a second here)."""
    upstream.queue_text("the last word")
    history: list[dict[str, object]] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 500}
        for i in range(9_999)
    ]
    reply = client.chat.completions.create(model="fast", messages=history)
    conversation_id = _conversation_id(reply)
    with httpx.Client(base_url=f"{parley.url}/v1", timeout=60) as http:
        body = http.get(f"/conversations/{conversation_id}").json()
    messages = body["messages"]
    assert len(messages) == 10_000
    assert messages[0]["content"].startswith("message 0 ")
    assert messages[9_998]["content"].startswith("message 9998 ")
    assert messages[-1]["content"] == "the last word"
