"""Gemini as a native provider (``kind: gemini``): a real Parley server in front of the
mock Gemini upstream, asked with the official ``openai`` client. The mock is first read
by the official ``google-genai`` SDK, so that what it speaks is Gemini's wire format.
Text (streamed and not) with a system instruction, thinking levels (Gemini 3) and
budgets (2.5) with thought summaries back as reasoning, function calls with their
thought signature carried back, results as function responses, the model list, and an
upstream error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from google import genai
from tests.support.mock_gemini import GeminiReply, MockGemini, call, text
from tests.support.server import ParleyServer

from parley.messages import Message, ReasoningPart, TextPart, ToolCallPart, ToolResult, ToolSpec
from parley.providers.gemini import UNSIGNED, request_body
from parley.providers.protocol import ModelRequest

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def gemini() -> Iterator[MockGemini]:
    with MockGemini() as mock:
        yield mock


@pytest.fixture(scope="module")
def server(gemini: MockGemini, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParleyServer]:
    config = {
        "providers": [
            {"name": "gemini", "kind": "gemini", "base_url": gemini.base_url, "api_key": "gk-1"}
        ],
        "default_model": "gemini/gemini-2.5-flash",
        "agent": {"retry_backoff_seconds": []},
        "knowledge": {"embedder": "none"},
    }
    with ParleyServer(tmp_path_factory.mktemp("gemini"), config) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer, gemini: MockGemini) -> Iterator[openai.OpenAI]:
    gemini.reset()
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as api:
        yield api


def test_the_mock_speaks_gemini_to_the_official_sdk(gemini: MockGemini) -> None:
    gemini.reset()
    sdk = genai.Client(
        api_key="gk-1", http_options=genai.types.HttpOptions(base_url=gemini.base_url)
    )
    gemini.queue(text("Hello", " there."))
    streamed = "".join(
        c.text or ""
        for c in sdk.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi")
    )
    assert streamed == "Hello there."
    gemini.queue(call("get_weather", {"city": "Paris"}))
    answer = sdk.models.generate_content(model="gemini-2.5-flash", contents="Weather?")
    [function] = answer.function_calls or []
    assert (function.name, function.args) == ("get_weather", {"city": "Paris"})
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.prompt_token_count == 12
    assert gemini.requests[0]["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]}]


@pytest.mark.parametrize("streamed", [False, True])
def test_text_with_a_system_instruction(
    client: openai.OpenAI, gemini: MockGemini, streamed: bool
) -> None:
    gemini.queue(text("Hello", " there."))
    messages: Any = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
    ]
    if streamed:
        chunks = client.chat.completions.create(
            model="gemini/gemini-2.5-flash", messages=messages, stream=True, max_tokens=50
        )
        reply = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answer = client.chat.completions.create(
            model="gemini/gemini-2.5-flash", messages=messages, max_tokens=50
        )
        reply = answer.choices[0].message.content or ""
        assert answer.usage is not None
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (12, 8)
    assert reply == "Hello there."
    sent = gemini.requests[-1]
    assert gemini.paths[-1] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert gemini.headers[-1]["x-goog-api-key"] == "gk-1"
    assert sent["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "Say hello."}]}]
    assert sent["generationConfig"]["maxOutputTokens"] == 50


@pytest.mark.parametrize(
    ("model", "effort", "thinking"),
    [
        ("gemini-3-pro-preview", "high", {"thinkingLevel": "high", "includeThoughts": True}),
        ("gemini-3-pro-preview", "minimal", {"thinkingLevel": "low", "includeThoughts": True}),
        ("gemini-2.5-flash", "low", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("gemini-2.5-flash", "none", {"thinkingBudget": 0, "includeThoughts": False}),
    ],
)
def test_thinking_levels_and_thoughts(
    client: openai.OpenAI, gemini: MockGemini, model: str, effort: str, thinking: dict[str, Any]
) -> None:
    gemini.queue(text("42.", thoughts=("Six times seven.",)))
    answer = client.chat.completions.create(
        model=f"gemini/{model}",
        messages=[{"role": "user", "content": "Six times seven?"}],
        reasoning_effort=effort,  # type: ignore[arg-type]
    )
    assert gemini.requests[-1]["generationConfig"]["thinkingConfig"] == thinking
    message = answer.choices[0].message
    assert message.content == "42."
    assert (message.model_extra or {})["reasoning_content"] == "Six times seven."


def test_a_function_call_and_its_result(client: openai.OpenAI, gemini: MockGemini) -> None:
    gemini.queue(call("get_weather", {"city": "Paris"}, signature="c2lnbmF0dXJl"))
    first = client.chat.completions.create(
        model="gemini/gemini-2.5-flash",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
        tool_choice="required",
    )
    assert first.choices[0].finish_reason == "tool_calls"
    [made] = first.choices[0].message.tool_calls or []
    assert made.function.name == "get_weather"  # type: ignore[union-attr]
    assert made.function.arguments == '{"city":"Paris"}'  # type: ignore[union-attr]
    sent = gemini.requests[-1]
    assert sent["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"
    assert sent["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}

    gemini.queue(text("Sunny."))
    second = client.chat.completions.create(
        model="gemini/gemini-2.5-flash",
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": made.id, "content": "sunny"},
        ],
        tools=[WEATHER],
    )
    assert second.choices[0].message.content == "Sunny."
    contents = gemini.requests[-1]["contents"]
    assert contents[1]["role"] == "model"
    assert contents[1]["parts"][0]["functionCall"] == {
        "name": "get_weather",
        "args": {"city": "Paris"},
    }
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}}],
    }


def test_the_signature_goes_back_on_its_call_within_a_turn(
    server: ParleyServer, client: openai.OpenAI, gemini: MockGemini
) -> None:
    """A stored conversation keeps the call's signature: the next step of the agent sends
    it back. (A client's own history carries no signature: OpenAI's wire has none.)"""
    conversation = httpx.post(f"{server.url}/v1/conversations", json={}).json()["id"]
    gemini.queue(call("get_weather", {"city": "Paris"}, signature="c2lnbmF0dXJl"))
    first = client.chat.completions.create(
        model="gemini/gemini-2.5-flash",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
        extra_body={"conversation_id": conversation},
    )
    call_id = (first.choices[0].message.tool_calls or [])[0].id
    gemini.queue(text("Sunny."))
    client.chat.completions.create(
        model="gemini/gemini-2.5-flash",
        messages=[{"role": "tool", "tool_call_id": call_id, "content": "sunny"}],
        tools=[WEATHER],
        extra_body={"conversation_id": conversation},
    )
    parts = gemini.requests[-1]["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == "c2lnbmF0dXJl"


def test_models_are_listed(client: openai.OpenAI) -> None:
    names = {model.id for model in client.models.list()}
    assert {"gemini/gemini-2.5-flash", "gemini/gemini-3-pro-preview"} <= names


def test_an_upstream_error_is_reported(client: openai.OpenAI, gemini: MockGemini) -> None:
    gemini.queue(
        GeminiReply(
            status=400,
            error={"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"},
        )
    )
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="gemini/gemini-2.5-flash", messages=[{"role": "user", "content": "Hi"}]
        )
    assert "API key not valid." in caught.value.message


def test_a_refused_prompt_ends_as_content_filtered(
    client: openai.OpenAI, gemini: MockGemini
) -> None:
    gemini.queue(GeminiReply(blocked="SAFETY"))
    answer = client.chat.completions.create(
        model="gemini/gemini-2.5-flash", messages=[{"role": "user", "content": "Hi"}]
    )
    assert answer.choices[0].finish_reason == "content_filter"
    assert len(gemini.requests) == 1  # not retried


def steps_message() -> Message:
    """Two sequential steps of one agent turn: call a, its result, then call b."""
    first = ToolCallPart("c1", "a", "{}", ToolResult("ra"))
    second = ToolCallPart("c2", "b", "{}", ToolResult("rb"))
    return Message(
        "assistant",
        (ReasoningPart("", signature="s1"), first, ReasoningPart("", signature="s2"), second),
    )


def test_sequential_steps_stay_apart_with_their_signatures() -> None:
    request = ModelRequest(
        "gemini-2.5-flash", (Message("user", (TextPart("go"),)), steps_message())
    )
    contents = request_body(request)["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    assert contents[1]["parts"] == [
        {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": "s1"}
    ]
    assert contents[2]["parts"][0]["functionResponse"]["name"] == "a"
    assert contents[3]["parts"][0]["thoughtSignature"] == "s2"


def test_gemini_3_gets_a_stand_in_signature_for_a_clients_history() -> None:
    call = ToolCallPart("c1", "a", "{}", ToolResult("ra"))
    history = (Message("user", (TextPart("go"),)), Message("assistant", (call,)))
    three = request_body(ModelRequest("gemini-3-pro-preview", history))["contents"]
    assert three[1]["parts"][0]["thoughtSignature"] == UNSIGNED
    two = request_body(ModelRequest("gemini-2.5-flash", history))["contents"]
    assert "thoughtSignature" not in two[1]["parts"][0]


def test_tool_schemas_go_as_json_schema_and_pro_keeps_some_thinking() -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {}}
    request = ModelRequest(
        "gemini-2.5-pro",
        (Message("user", (TextPart("go"),)),),
        tools=(ToolSpec("a", "A tool.", schema),),
        options={"reasoning_effort": "none"},
    )
    body = request_body(request)
    assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == schema
    assert body["generationConfig"]["thinkingConfig"] == {
        "thinkingBudget": 128,
        "includeThoughts": False,
    }
