"""OpenAI clients and upstreams get exactly what they ask for (issue 18).

Every optional field of OpenAI's ``CreateChatCompletionRequest`` (read from the vendored
specification, so a new field fails ``test_every_request_field_has_a_case``) is sent
once with the official SDK; the test checks what reaches a loopback OpenAI-compatible
upstream, or the 400 naming it. Responses and stream chunks are validated against the
specification's own schemas.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.mock_anthropic import MockAnthropic
from tests.support.openai_schema import check, request_fields
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, chunk, sse, usage

HELLO = [{"role": "user", "content": "Say hello"}]
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up",
    "parameters": {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    },
    "strict": True,
}
TOOLS = [{"type": "function", "function": LOOKUP}]

FORWARDED: dict[str, Any] = {
    "frequency_penalty": 0.5,
    "presence_penalty": -0.5,
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "top_logprobs": 2,
    "max_completion_tokens": 44,
    "max_tokens": 33,
    "metadata": {"team": "search"},
    "modalities": ["text"],
    "parallel_tool_calls": False,
    "prediction": {"type": "content", "content": "Hello there"},
    "prompt_cache_key": "greeting-v1",
    "prompt_cache_retention": "24h",
    "reasoning_effort": "xhigh",
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": {"type": "object"}, "strict": True},
    },
    "safety_identifier": "user-7f3a",
    "seed": 7,
    "service_tier": "flex",
    "stop": ["END", "STOP"],
    "store": True,
    "temperature": 0.3,
    "top_p": 0.9,
    "user": "user-1234",
    "verbosity": "low",
    "web_search_options": {"search_context_size": "low"},
    "tools": TOOLS,
}
"""Sent on to an OpenAI-compatible upstream exactly as given."""

TRANSLATED = {
    "stop",  # a single string: a list of one
    "tool_choice",  # a bare name (Chatchat's): the OpenAI object
    "functions",  # legacy: tools
    "function_call",  # legacy: tool_choice
    "stream",  # Parley's own stream; the upstream is streamed when someone watches
    "stream_options",  # Parley's own stream; the upstream is always asked for usage
    "n",  # 1 is honoured as it is; more is refused
    "audio",  # refused: Parley relays text
    "messages",
    "model",
}
"""Fields with a case of their own below."""


def test_every_request_field_has_a_case() -> None:
    assert request_fields() == set(FORWARDED) | TRANSLATED


@pytest.mark.parametrize("field", sorted(FORWARDED))
def test_a_field_reaches_the_upstream_unchanged(
    field: str, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Hello")
    raw = client.chat.completions.with_raw_response.create(
        model="fast", messages=HELLO, extra_body={field: FORWARDED[field]}
    )
    assert raw.http_response.status_code == 200
    check("CreateChatCompletionResponse", raw.http_response.json())
    assert upstream.requests[-1][field] == FORWARDED[field]
    assert "x-parley-ignored-params" not in raw.headers


def test_no_token_cap_is_invented(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    """A reasoning model refuses ``max_tokens`` (OpenAI's 400 unsupported_parameter):
    a request without a cap sends none, and max_completion_tokens stays itself."""
    upstream.refused_fields.add("max_tokens")
    upstream.queue_text("Hello")
    assert client.chat.completions.create(model="fast", messages=HELLO).choices
    upstream.queue_text("Hello")
    client.chat.completions.create(model="fast", messages=HELLO, max_completion_tokens=500)
    assert "max_tokens" not in upstream.requests[0]
    assert "max_completion_tokens" not in upstream.requests[0]
    assert upstream.requests[1]["max_completion_tokens"] == 500
    with pytest.raises(openai.BadRequestError):  # and the client's own choice is kept
        client.chat.completions.create(model="fast", messages=HELLO, max_tokens=10)
    assert upstream.requests[-1]["max_tokens"] == 10


def test_a_single_stop_string_and_a_bare_tool_name(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_text("Hello")
    client.chat.completions.create(
        model="fast", messages=HELLO, stop="END", tools=TOOLS, tool_choice="required"
    )
    upstream.queue_text("Hello")
    client.chat.completions.create(
        model="fast", messages=HELLO, tools=TOOLS, extra_body={"tool_choice": "lookup"}
    )
    assert upstream.requests[0]["stop"] == ["END"]
    assert upstream.requests[0]["tool_choice"] == "required"
    assert upstream.requests[1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "lookup"},
    }
    assert upstream.requests[1]["tools"] == TOOLS  # strict: true included


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 2}, "n"),
        ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"tools": TOOLS, "functions": [LOOKUP]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(
    body: dict[str, Any], param: str, client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fast", messages=HELLO, extra_body=body)
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == param, error
    check("ErrorResponse", caught.value.response.json())
    assert upstream.requests == []


def test_n_of_one_is_answered(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    upstream.queue_text("Hello")
    reply = client.chat.completions.create(model="fast", messages=HELLO, n=1)
    assert [c.message.content for c in reply.choices] == ["Hello"]


def test_legacy_functions_become_tools_and_come_back_as_function_call(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.queue_tool_calls([("call_1", "lookup", '{"q": "parley"}')])
    raw = client.chat.completions.with_raw_response.create(
        model="fast",
        messages=HELLO,
        extra_body={"functions": [LOOKUP], "function_call": {"name": "lookup"}},
    )
    body = raw.http_response.json()
    check("CreateChatCompletionResponse", body)
    sent = upstream.requests[-1]
    assert sent["tools"] == TOOLS
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert "functions" not in sent
    assert "function_call" not in sent
    choice = body["choices"][0]
    assert choice["finish_reason"] == "function_call"
    assert choice["message"]["function_call"] == {"name": "lookup", "arguments": '{"q": "parley"}'}
    assert "tool_calls" not in choice["message"]

    # the client answers with a function message; the upstream sees a tool call and result
    upstream.queue_text("Parley is a server.")
    call = choice["message"]["function_call"]
    reply = client.chat.completions.create(
        model="fast",
        messages=[
            *HELLO,
            {"role": "assistant", "content": None, "function_call": call},
            {"role": "function", "name": "lookup", "content": "a chat server"},
        ],
        extra_body={"functions": [LOOKUP]},
    )
    assert reply.choices[0].message.content == "Parley is a server."
    assistant, result = upstream.requests[-1]["messages"][1:]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q": "parley"}',
    }
    assert result == {
        "role": "tool",
        "tool_call_id": assistant["tool_calls"][0]["id"],
        "content": "a chat server",
    }


def test_legacy_function_call_streams(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_tool_calls([("call_1", "lookup", '{"q": "parley"}')], split=5)
    chunks = stream_chunks(parley, {"functions": [LOOKUP]})
    calls = [c["choices"][0]["delta"].get("function_call") for c in chunks if c["choices"]]
    parts = [c for c in calls if c]
    assert parts[0]["name"] == "lookup"
    assert "".join(p["arguments"] for p in parts) == '{"q": "parley"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "function_call"


def logprob(token: str) -> dict[str, Any]:
    entry = {"token": token, "logprob": -0.25, "bytes": list(token.encode())}
    return {**entry, "top_logprobs": [entry]}


def logprob_frames(tokens: list[str]) -> list[bytes]:
    frames = [sse(chunk({"role": "assistant", "content": ""}))]
    for token in tokens:
        frame = chunk({"content": token})
        frame["choices"][0]["logprobs"] = {"content": [logprob(token)], "refusal": None}
        frames.append(sse(frame))
    return [*frames, sse(chunk({}, "stop")), sse(usage(5, len(tokens))), b"data: [DONE]\n\n"]


def test_logprobs_are_relayed(client: openai.OpenAI, upstream: MockOpenAI) -> None:
    upstream.queue_raw(logprob_frames(["Hel", "lo"]))
    raw = client.chat.completions.with_raw_response.create(
        model="fast", messages=HELLO, logprobs=True, top_logprobs=1
    )
    check("CreateChatCompletionResponse", raw.http_response.json())
    content = raw.parse().choices[0].logprobs
    assert content is not None
    assert content.content is not None
    assert [t.token for t in content.content] == ["Hel", "lo"]
    assert content.content[0].top_logprobs[0].logprob == -0.25

    upstream.queue_raw(logprob_frames(["Hel", "lo"]))
    stream = client.chat.completions.create(
        model="fast", messages=HELLO, logprobs=True, stream=True
    )
    tokens = [
        entry.token
        for c in stream
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content
        for entry in c.choices[0].logprobs.content
    ]
    assert tokens == ["Hel", "lo"]


def stream_chunks(parley: ParleyServer, extra: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"model": "fast", "messages": HELLO, "stream": True, **extra}
    with httpx.stream("POST", f"{parley.url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    return [json.loads(f) for f in frames[:-1]]


def test_every_chunk_validates(parley: ParleyServer, upstream: MockOpenAI) -> None:
    upstream.queue_text("One", " two", reasoning=["hm"])
    upstream.queue_tool_calls([("call_1", "lookup", '{"q": "x"}')])
    upstream.queue_raw(logprob_frames(["a", "b"]))
    bodies: list[dict[str, Any]] = [
        {"stream_options": {"include_usage": True}},
        {"tools": TOOLS},
        {"logprobs": True},
    ]
    for extra in bodies:
        chunks = stream_chunks(parley, extra)
        assert len(chunks) >= 3
        for each in chunks:
            check("CreateChatCompletionStreamResponse", each)
            assert "system_fingerprint" not in each  # a string or absent, never null


def test_models_list_and_retrieve(client: openai.OpenAI, parley: ParleyServer) -> None:
    listed = httpx.get(f"{parley.url}/v1/models").json()
    check("ListModelsResponse", listed)
    assert client.models.retrieve("fast").id == "fast"
    one = httpx.get(f"{parley.url}/v1/models/mock/mock-model")
    assert one.status_code == 200
    check("Model", one.json())
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("dead/no-such-model")
    check("ErrorResponse", caught.value.response.json())


# --- a provider with fewer fields: Anthropic's Messages API -----------------------


@pytest.fixture(scope="module")
def claude() -> Iterator[MockAnthropic]:
    with MockAnthropic(models=["claude-mock"]) as mock:
        yield mock


@pytest.fixture(scope="module")
def mixed(
    claude: MockAnthropic, upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    """Anthropic behind the alias "claude", with an OpenAI-compatible fallback that has
    everything."""
    config = server_config(
        upstream,
        models={
            "fast": {"provider": "mock", "model": "mock-model"},
            "claude": {"provider": "anthropic", "model": "claude-mock", "fallbacks": ["fast"]},
        },
    )
    config["providers"].append(
        {"name": "anthropic", "kind": "anthropic", "base_url": claude.base_url, "api_key": "k"}
    )
    with ParleyServer(tmp_path_factory.mktemp("mixed"), config) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"seed": 3}, "seed"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": TOOLS}, "tools.function.strict"),
    ],
)
def test_a_provider_without_a_field_refuses_it_by_name(
    extra: dict[str, Any], param: str, mixed: openai.OpenAI, claude: MockAnthropic
) -> None:
    before = len(claude.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        mixed.chat.completions.create(model="claude", messages=HELLO, extra_body=extra)
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == (param, "unsupported_parameter")
    assert "claude" in error["message"]
    assert len(claude.requests) == before


def test_equivalents_are_translated_and_advisory_fields_named(
    mixed: openai.OpenAI, claude: MockAnthropic
) -> None:
    claude.queue_text("Hello")
    raw = mixed.chat.completions.with_raw_response.create(
        model="claude",
        messages=HELLO,
        user="user-1234",
        reasoning_effort="low",
        parallel_tool_calls=False,
        tools=[{"type": "function", "function": {**LOOKUP, "strict": False}}],
        extra_body={"metadata": {"team": "search"}, "prompt_cache_key": "k"},
    )
    check("CreateChatCompletionResponse", raw.http_response.json())
    assert raw.headers["x-parley-ignored-params"] == "metadata, prompt_cache_key"
    sent = claude.requests[-1].json
    assert sent["metadata"] == {"user_id": "user-1234"}
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_values_that_ask_nothing_are_not_refused(
    mixed: openai.OpenAI, claude: MockAnthropic
) -> None:
    """Clients send OpenAI's defaults explicitly (LangChain sends ``logprobs: false``):
    they ask nothing of a provider without the field."""
    claude.queue_text("Hello")
    reply = mixed.chat.completions.create(
        model="claude",
        messages=HELLO,
        logprobs=False,
        presence_penalty=0,
        frequency_penalty=0,
        parallel_tool_calls=True,
        extra_body={"modalities": ["text"]},
    )
    assert reply.choices[0].message.content == "Hello"
    sent = claude.requests[-1].json
    assert "logprobs" not in sent
    assert "disable_parallel_tool_use" not in json.dumps(sent)
