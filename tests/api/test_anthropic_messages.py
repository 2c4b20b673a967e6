"""``POST /v1/messages`` with the official Anthropic SDK against a real server in front of
the mock upstream: text, streamed and not; tool use and tool results; thinking; the
conversation kept by Parley behind the door; Anthropic's error bodies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def client(parley: ParleyServer, upstream: MockOpenAI) -> Iterator[anthropic.Anthropic]:
    upstream.reset()
    with anthropic.Anthropic(base_url=parley.url, api_key="sk-x", max_retries=0) as api:
        yield api


def last_request(upstream: MockOpenAI) -> dict[str, Any]:
    return upstream.requests[-1]


def test_a_message_with_a_system_prompt(client: anthropic.Anthropic, upstream: MockOpenAI) -> None:
    upstream.queue_text("Hello", " there.")
    message = client.messages.create(
        model="mock/mock-model",
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello."}],
        stop_sequences=["END"],
        extra_body={"temperature": 0.2},  # the SDK no longer takes it as an argument
    )
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello there."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 2
    sent = last_request(upstream)
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["messages"][-1]["content"] == "Say hello."
    assert sent["temperature"] == 0.2
    assert sent["stop"] == ["END"]
    assert sent["max_tokens"] == 100


def test_a_stream_of_text(client: anthropic.Anthropic, upstream: MockOpenAI) -> None:
    upstream.queue_text("One, ", "two, ", "three.")
    with client.messages.stream(
        model="mock/mock-model",
        max_tokens=100,
        messages=[{"role": "user", "content": "Count to three."}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "One, two, three."
    assert final.content[0].text == "One, two, three."  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3


@pytest.mark.parametrize("streamed", [False, True])
def test_tool_use_then_its_result(
    client: anthropic.Anthropic, upstream: MockOpenAI, streamed: bool
) -> None:
    upstream.queue_tool_calls([("call_1", "get_weather", '{"city": "Paris"}')])
    asked: dict[str, Any] = {
        "model": "mock/mock-model",
        "max_tokens": 200,
        "tools": [WEATHER],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    if streamed:
        with client.messages.stream(**asked) as stream:
            message = stream.get_final_message()
    else:
        message = client.messages.create(**asked)
    [use] = message.content
    assert use.type == "tool_use"
    assert (use.id, use.name, use.input) == ("call_1", "get_weather", {"city": "Paris"})
    assert message.stop_reason == "tool_use"
    sent = last_request(upstream)
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assert sent["tool_choice"] == "required"

    upstream.queue_text("It is sunny in Paris.")
    answer = client.messages.create(
        model="mock/mock-model",
        max_tokens=200,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [use.model_dump()]},  # type: ignore[list-item]
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}],
            },
        ],
    )
    assert answer.content[0].text == "It is sunny in Paris."  # type: ignore[union-attr]
    sent = last_request(upstream)
    call = sent["messages"][-2]["tool_calls"][0]
    assert (call["id"], call["function"]["name"]) == ("call_1", "get_weather")
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def test_thinking_comes_back_as_thinking_blocks(
    client: anthropic.Anthropic, upstream: MockOpenAI
) -> None:
    upstream.queue_text("42.", reasoning=["Six ", "times seven."])
    with client.messages.stream(
        model="mock/mock-model",
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "Six times seven?"}],
    ) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Six times seven."  # type: ignore[union-attr]
    assert final.content[1].text == "42."  # type: ignore[union-attr]
    assert last_request(upstream)["reasoning_effort"] == "low"


def test_the_conversation_is_kept_by_parley(
    parley: ParleyServer, client: anthropic.Anthropic, upstream: MockOpenAI
) -> None:
    conversation = httpx.post(f"{parley.url}/v1/conversations", json={}).json()["id"]
    upstream.queue_text("Noted.")
    client.messages.create(
        model="mock/mock-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "Remember the word kumquat."}],
        extra_body={"conversation_id": conversation},
    )
    kept = httpx.get(f"{parley.url}/v1/conversations/{conversation}").json()
    texts = [m["content"] for m in kept["messages"]]
    assert texts == ["Remember the word kumquat.", "Noted."]


def test_errors_are_anthropics(client: anthropic.Anthropic, parley: ParleyServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="mock/mock-model",
            max_tokens=0,
            messages=[{"role": "user", "content": "hi"}],
        )
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens is required: a positive integer",
        },
    }
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(
            model="mock/mock-model",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"conversation_id": "no-such-conversation"},
        )
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    refused = httpx.post(
        f"{parley.url}/v1/messages",
        json={"model": "mock/mock-model", "max_tokens": 10, "top_k": 5, "messages": []},
    )
    assert refused.status_code == 400
    assert refused.json()["type"] == "error"


def test_tokens_are_counted_without_asking_the_upstream(
    client: anthropic.Anthropic, upstream: MockOpenAI
) -> None:
    short = client.messages.count_tokens(
        model="mock/mock-model", messages=[{"role": "user", "content": "Hi."}]
    )
    long = client.messages.count_tokens(
        model="mock/mock-model",
        system="Be brief.",
        messages=[{"role": "user", "content": "Tell me about the sea. " * 50}],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert 0 < short.input_tokens < 20
    assert long.input_tokens > short.input_tokens + 200
    assert upstream.requests == []


def test_a_tool_result_with_an_image(client: anthropic.Anthropic, upstream: MockOpenAI) -> None:
    """A chat tool message holds text only: the result's image follows in a user message."""
    pixel = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJ"
        "RU5ErkJggg=="
    )
    upstream.queue_text("A white pixel.")
    client.messages.create(
        model="mock/mock-model",
        max_tokens=50,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "Look at the screenshot."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "call_s", "name": "get_weather", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_s",
                        "content": [
                            {"type": "text", "text": "the screenshot"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": pixel,
                                },
                            },
                        ],
                    }
                ],
            },
        ],
    )
    sent = last_request(upstream)["messages"]
    assert sent[-2] == {"role": "tool", "tool_call_id": "call_s", "content": "the screenshot"}
    image = sent[-1]["content"][0]
    assert sent[-1]["role"] == "user"
    assert image["image_url"]["url"] == f"data:image/png;base64,{pixel}"


def test_a_quiet_stream_gets_anthropic_pings_and_no_event_ids(
    upstream: MockOpenAI, tmp_path: Path
) -> None:
    """Chat completions' event ids (and their keep-alive line) are for that API's
    clients: this route's stream is Anthropic's, with its own ping events."""
    config = server_config(upstream, server={"keepalive_seconds": 0.05})
    with ParleyServer(tmp_path, config) as quiet:
        upstream.queue(Reply(frames=text_frames(["slow", " one"]), delay=0.3))
        body = {
            "model": "fast",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with httpx.stream("POST", f"{quiet.url}/v1/messages", json=body) as response:
            raw = response.read()
    assert b"event: ping" in raw
    assert b"\nid:" not in raw
    assert not raw.startswith(b"id:")
    assert b"event: message_stop" in raw
