"""``POST /v1/responses`` with the official ``openai`` client against a real server in
front of the mock upstream: text and instructions, streamed (the SDK's own event
accumulator) and not; ``previous_response_id`` continuing a stored Parley conversation
(and refusing a fork); function tools and their outputs; reasoning; ``store: false``;
hosted tools refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
MODEL = "mock/mock-model"


@pytest.fixture
def client(parley: ParleyServer, upstream: MockOpenAI) -> Iterator[openai.OpenAI]:
    upstream.reset()
    with openai.OpenAI(base_url=f"{parley.url}/v1", api_key="sk-x", max_retries=0) as api:
        yield api


def sent(upstream: MockOpenAI) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = upstream.requests[-1]["messages"]
    return messages


def test_a_response_then_one_that_continues_it(
    client: openai.OpenAI, upstream: MockOpenAI, parley: ParleyServer
) -> None:
    upstream.queue_text("Hello", " there.")
    first = client.responses.create(model=MODEL, input="Say hi.", instructions="Be brief.")
    assert first.object == "response"
    assert first.status == "completed"
    assert first.output_text == "Hello there."
    assert first.id.startswith("resp_msg_")
    assert first.usage is not None
    assert first.usage.output_tokens == 2
    assert sent(upstream)[0] == {"role": "system", "content": "Be brief."}
    assert sent(upstream)[-1]["content"] == "Say hi."

    upstream.queue_text("Hello again.")
    second = client.responses.create(model=MODEL, input="Once more?", previous_response_id=first.id)
    assert second.output_text == "Hello again."
    assert second.previous_response_id == first.id
    history = [(m["role"], m["content"]) for m in sent(upstream) if m["role"] != "system"]
    assert history == [("user", "Say hi."), ("assistant", "Hello there."), ("user", "Once more?")]

    conversation = first.id.partition(".")[2]
    kept = httpx.get(f"{parley.url}/v1/conversations/{conversation}").json()
    assert [m["content"] for m in kept["messages"]][-2:] == ["Once more?", "Hello again."]

    kept_first = client.responses.retrieve(first.id)
    assert (kept_first.id, kept_first.output_text) == (first.id, "Hello there.")
    assert kept_first.previous_response_id is None
    kept_second = client.responses.retrieve(second.id)
    assert kept_second.output_text == "Hello again."
    assert kept_second.previous_response_id == first.id
    assert kept_second.usage is not None
    assert kept_second.usage.output_tokens == 1
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id.replace("resp_msg_", "resp_msg_0"))

    with pytest.raises(openai.ConflictError) as fork:
        client.responses.create(model=MODEL, input="Other way?", previous_response_id=first.id)
    assert fork.value.code == "not_latest_response"


def test_a_stream_through_the_sdks_accumulator(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    upstream.queue_text("42.", reasoning=["Six ", "times seven."])
    with client.responses.stream(
        model=MODEL, input="Six times seven?", reasoning={"effort": "low"}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds
    assert "response.reasoning_summary_text.delta" in kinds
    assert kinds[-1] == "response.completed"
    assert final.output_text == "42."
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].summary[0].text == "Six times seven."  # type: ignore[union-attr]
    assert upstream.requests[-1]["reasoning_effort"] == "low"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_function_call_then_its_output(
    client: openai.OpenAI, upstream: MockOpenAI, streamed: bool
) -> None:
    upstream.queue_tool_calls([("call_7", "get_weather", '{"city": "Paris"}')])
    asked: dict[str, Any] = {"model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER]}
    if streamed:
        with client.responses.stream(**asked) as stream:
            response = stream.get_final_response()
    else:
        response = client.responses.create(**asked)
    [call] = response.output
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == (
        "call_7",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert upstream.requests[-1]["tools"][0]["function"]["name"] == "get_weather"

    upstream.queue_text("Sunny.")
    answer = client.responses.create(
        model=MODEL,
        previous_response_id=response.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": "call_7", "output": "sunny"}],
    )
    assert answer.output_text == "Sunny."
    last = sent(upstream)
    assert last[-2]["tool_calls"][0]["id"] == "call_7"
    assert last[-1] == {"role": "tool", "tool_call_id": "call_7", "content": "sunny"}


def test_store_false_keeps_nothing_to_continue(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    upstream.queue_text("Fine.")
    response = client.responses.create(model=MODEL, input="Hi.", store=False)
    assert "." not in response.id
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="Again.", previous_response_id=response.id)


def test_hosted_tools_are_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Search.", tools=[{"type": "web_search"}])
    assert "hosted tool 'web_search' is not supported" in caught.value.message
