"""/v1/chat/completions through the official openai client, against a real server and upstream."""

from __future__ import annotations

import json

import openai
import pytest
from tests.conftest import db_rows
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, chunk, split_every, sse, text_frames

HELLO = [{"role": "user", "content": "Say hello"}]


def test_non_streaming_reply(client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer):
    upstream.queue_text("Hello", ", ", "world")
    reply = client.chat.completions.create(model="fast", messages=HELLO)

    assert reply.object == "chat.completion"
    assert reply.model == "fast"
    assert reply.choices[0].message.content == "Hello, world"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 3)
    extension = reply.model_extra or {}
    assert extension["parley"]["conversation_id"].startswith("conv_")
    assert extension["message_id"] == extension["parley"]["message_id"]
    assert extension["message_type"] == 1
    sent = upstream.requests[-1]
    assert sent["model"] == "mock-model"
    assert sent["messages"] == HELLO
    assert sent["stream"] is False  # a non-streaming client gets one whole upstream reply
    assert upstream.headers[-1]["authorization"] == "Bearer sk-upstream-secret"

    rows = db_rows(
        parley,
        "SELECT role, status, parts, usage, finish_reason, model FROM messages "
        "WHERE conversation_id = ? ORDER BY created_at",
        extension["parley"]["conversation_id"],
    )
    assert [(r["role"], r["status"]) for r in rows] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert json.loads(rows[1]["parts"]) == [{"kind": "text", "text": "Hello, world"}]
    assert json.loads(rows[1]["usage"])["output_tokens"] == 3
    assert rows[1]["finish_reason"] == "stop"
    assert rows[1]["model"] == "fast"


def test_streaming_with_usage(client: openai.OpenAI, upstream: MockOpenAI):
    upstream.queue_text("One", " two", " three", reasoning=["think", "ing"])
    stream = client.chat.completions.create(
        model="fast", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    assert upstream.requests[-1]["stream"] is True
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "One two three"
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert reasoning == "thinking"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert finishes.count("stop") == 1
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 14
    assert all(c.usage is None for c in chunks[:-1])
    conversation_ids = {(c.model_extra or {})["parley"]["conversation_id"] for c in chunks}
    assert len(conversation_ids) == 1
    statuses = [(c.model_extra or {}).get("status") for c in chunks if c.choices]
    assert statuses[0] == 1
    assert statuses[-1] == 3
    assert set(statuses[1:-1]) == {2}


def test_streaming_without_usage_has_no_usage_chunk(client: openai.OpenAI, upstream: MockOpenAI):
    upstream.queue_text("x")
    chunks = list(client.chat.completions.create(model="fast", messages=HELLO, stream=True))
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.anyio
async def test_async_client_streams(parley: ParleyServer, upstream: MockOpenAI):
    async with openai.AsyncOpenAI(base_url=f"{parley.url}/v1", api_key="k") as aclient:
        upstream.queue_text("a", "b", "c")
        stream = await aclient.chat.completions.create(model="fast", messages=HELLO, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "abc"
        upstream.queue_text("d")
        reply = await aclient.chat.completions.create(model="fast", messages=HELLO)
        assert reply.choices[0].message.content == "d"


@pytest.mark.parametrize("size", [1, 3, 7])
def test_multibyte_text_split_at_any_byte(client: openai.OpenAI, upstream: MockOpenAI, size: int):
    text = ["héllo ", "世界 ", "🎉\r\n", "ok"]
    whole = b"".join(text_frames(text)).replace(b"\n\n", b"\r\n\r\n", 2)
    upstream.queue_raw(list(split_every(whole, size)))
    stream = client.chat.completions.create(model="fast", messages=HELLO, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "".join(text)


def test_upstream_comments_and_unknown_fields_are_ignored(
    client: openai.OpenAI, upstream: MockOpenAI
):
    frames = [
        b": keep-alive\n\n",
        b"event: message\nid: 7\nretry: 10\n" + sse(chunk({"content": "fine"}, weird=1)),
        sse(chunk({}, "stop")),
    ]
    upstream.queue_raw(frames)  # no [DONE]: a finish reason is enough
    reply = client.chat.completions.create(model="fast", messages=HELLO)
    assert reply.choices[0].message.content == "fine"


def test_max_tokens_zero_or_null_sends_none(client: openai.OpenAI, upstream: MockOpenAI):
    """No cap is invented: 0 or null (Chatchat's "the default") leaves the upstream's
    own default, and a cap the client sets goes under the name it used."""
    upstream.queue_text("a")
    client.chat.completions.create(model="fast", messages=HELLO, max_tokens=0)
    upstream.queue_text("b")
    client.chat.completions.create(model="fast", messages=HELLO, extra_body={"max_tokens": None})
    upstream.queue_text("c")
    client.chat.completions.create(model="fast", messages=HELLO, max_tokens=33)
    upstream.queue_text("d")
    client.chat.completions.create(model="fast", messages=HELLO, max_completion_tokens=44)
    sent = [
        {k: r[k] for k in ("max_tokens", "max_completion_tokens") if k in r}
        for r in upstream.requests
    ]
    assert sent == [{}, {}, {"max_tokens": 33}, {"max_completion_tokens": 44}]


def test_sampling_options_are_forwarded_and_unknown_fields_accepted(
    client: openai.OpenAI, upstream: MockOpenAI
):
    upstream.queue_text("ok")
    client.chat.completions.create(
        model="fast",
        messages=HELLO,
        temperature=0.3,
        top_p=0.9,
        seed=5,
        stop=["END"],
        presence_penalty=0.5,
        user="u1",
        extra_body={"some_future_field": {"x": 1}},
    )
    sent = upstream.requests[-1]
    assert sent["temperature"] == 0.3
    assert sent["top_p"] == 0.9
    assert sent["seed"] == 5
    assert sent["stop"] == ["END"]
    assert sent["presence_penalty"] == 0.5
    assert sent["user"] == "u1"
    assert "some_future_field" not in sent


def test_model_resolution(client: openai.OpenAI, upstream: MockOpenAI):
    for name, expected in [
        ("fast", "mock-model"),
        ("mock/mock-large", "mock-large"),
        ("passed-through", "passed-through"),
    ]:
        upstream.queue_text("ok")
        reply = client.chat.completions.create(model=name, messages=HELLO)
        assert reply.model == name
        assert upstream.requests[-1]["model"] == expected


def test_unknown_model_is_404(client: openai.OpenAI, upstream: MockOpenAI):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="dead/other", messages=HELLO)
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="http://evil.example/v1", messages=HELLO)
    assert bad.value.body["param"] == "model"  # type: ignore[index]
    assert upstream.requests == []


def test_models_endpoint_lists_aliases_and_upstream(client: openai.OpenAI):
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "fast"
    assert "mock/mock-model" in ids
    assert "mock/mock-large" in ids
    assert "dead/dead-model" in ids
