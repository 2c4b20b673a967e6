"""The Anthropic Messages adapter against a real mock upstream over loopback."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from tests.support.mock_anthropic import (
    MockAnthropic,
    error_event,
    message_end,
    message_start,
    text_block,
    thinking_block,
    tool_use_block,
)

from parley.errors import ProviderError
from parley.events import Done, Event, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from parley.messages import (
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResult,
    ToolSpec,
    Usage,
    text_message,
)
from parley.providers.anthropic import AnthropicProvider, request_body, to_anthropic_messages
from parley.providers.protocol import ModelRequest
from parley.settings import ProviderSettings

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mock() -> Iterator[MockAnthropic]:
    with MockAnthropic() as server:
        yield server


def _config(base_url: str, **extra: Any) -> ProviderSettings:
    return ProviderSettings(
        name="claude", kind="anthropic", base_url=base_url, api_key=SecretStr("sk-test"), **extra
    )


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.fixture
def provider(mock: MockAnthropic, client: httpx.AsyncClient) -> AnthropicProvider:
    return AnthropicProvider(_config(mock.base_url), client)


def _request(*messages: Message, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-test", messages=messages or (text_message("user", "hi"),), **fields
    )


async def _run(
    provider: AnthropicProvider, request: ModelRequest | None = None
) -> tuple[list[Event], ProviderError | None]:
    """The events streamed and the ProviderError that ended the stream, if any."""
    events: list[Event] = []
    try:
        async for event in provider.stream(request or _request()):
            events.append(event)
    except ProviderError as exc:
        return events, exc
    return events, None


def _text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- streaming -----------------------------------------------------------------------


async def test_text_streams_with_multibyte_characters_split_across_chunks(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    text = "héllo wörld, 日本語 🎉!"
    mock.queue_text(text, chunk=3, chunk_bytes=1)

    events, error = await _run(provider)

    assert error is None
    assert _text(events) == text
    assert events[-2:] == [UsageEvent(Usage(input_tokens=10, output_tokens=5)), Done("end_turn")]


async def test_mock_really_splits_multibyte_characters(mock: MockAnthropic) -> None:
    mock.queue_text("日本", chunk_bytes=2)
    async with (
        httpx.AsyncClient() as http,
        http.stream("POST", f"{mock.base_url}/v1/messages", json={}) as response,
    ):
        chunks = [chunk async for chunk in response.aiter_bytes()]
    assert any(_splits_a_character(chunk) for chunk in chunks)


def _splits_a_character(chunk: bytes) -> bool:
    try:
        chunk.decode()
    except UnicodeDecodeError:
        return True
    return False


async def test_request_goes_to_messages_endpoint_with_anthropic_headers(
    mock: MockAnthropic, client: httpx.AsyncClient
) -> None:
    provider = AnthropicProvider(
        _config(mock.base_url + "/", headers={"anthropic-beta": "x"}), client
    )
    mock.queue_text("ok")

    await _run(provider)

    (recorded,) = mock.requests
    assert (recorded.method, recorded.path) == ("POST", "/v1/messages")
    assert recorded.headers["x-api-key"] == "sk-test"
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert recorded.headers["content-type"] == "application/json"
    assert recorded.headers["anthropic-beta"] == "x"
    assert recorded.json["stream"] is True


async def test_thinking_and_signature(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.queue_text("answer", thinking="let me think", signature="sig-123", chunk=5)

    events, error = await _run(provider)

    assert error is None
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert "".join(r.text for r in reasoning) == "let me think"
    assert reasoning[-1] == ReasoningDelta("", signature="sig-123")
    assert _text(events) == "answer"
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(isinstance(e, ReasoningDelta) for e in events[1:first_text])


async def test_tool_use_with_arguments_split_across_deltas(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue_tool_use(
        "get_weather", {"city": "Zürich", "days": 3}, id="toolu_1", text="Look:", chunk=4
    )

    events, error = await _run(provider)

    assert error is None
    assert _text(events) == "Look:"
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0] == ToolCallDelta(0, id="toolu_1", name="get_weather")
    assert len(calls) > 3
    assert all(c.index == 0 and c.id is None for c in calls[1:])
    assert "".join(c.arguments for c in calls) == '{"city":"Zürich","days":3}'
    assert events[-1] == Done("tool_use")


async def test_tool_use_blocks_get_a_running_index(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue(
        [
            message_start(),
            *thinking_block(0, "hmm", "sig"),
            *text_block(1, "two calls"),
            *tool_use_block(2, "toolu_a", "a", '{"x":1}'),
            *tool_use_block(3, "toolu_b", "b", '{"y":2}'),
            *message_end("tool_use"),
        ]
    )

    events, _ = await _run(provider)

    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(c.index, c.id, c.name) for c in calls if c.id] == [
        (0, "toolu_a", "a"),
        (1, "toolu_b", "b"),
    ]
    assert "".join(c.arguments for c in calls if c.index == 1) == '{"y":2}'


async def test_usage_counts_cache_reads_as_cached_input(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue(
        [
            message_start(
                input_tokens=7, cache_read_input_tokens=100, cache_creation_input_tokens=20
            ),
            *text_block(0, "x"),
            *message_end(output_tokens=42),
        ]
    )

    events, _ = await _run(provider)

    assert events[-2] == UsageEvent(
        Usage(input_tokens=127, output_tokens=42, cached_input_tokens=100)
    )


@pytest.mark.parametrize(
    ("upstream", "neutral"),
    [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "content_filtered"),
        ("pause_turn", "end_turn"),
        ("something_new", "end_turn"),
    ],
)
async def test_stop_reason_mapping(
    mock: MockAnthropic, provider: AnthropicProvider, upstream: str, neutral: str
) -> None:
    mock.queue_text("x", stop_reason=upstream)

    events, _ = await _run(provider)

    assert events[-1] == Done(neutral)  # type: ignore[arg-type]


# --- failures ------------------------------------------------------------------------


async def test_429_before_the_body_keeps_retry_after(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue_error(429, message="slow down", headers={"retry-after": "7"})

    events, error = await _run(provider)

    assert events == []
    assert error is not None
    assert (error.upstream_status, error.status, error.retry_after) == (429, 429, 7.0)
    assert error.retryable
    assert "slow down" in error.message


async def test_529_overloaded_before_the_body(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue_error(529, message="Overloaded")

    _, error = await _run(provider)

    assert error is not None
    assert (error.upstream_status, error.status, error.retryable) == (529, 503, True)


async def test_400_is_not_retryable(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.queue_error(400, message="max_tokens: too large")

    _, error = await _run(provider)

    assert error is not None
    assert (error.status, error.retryable) == (400, False)
    assert "max_tokens: too large" in error.message


async def test_error_event_mid_stream(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.queue([message_start(), *text_block(0, "partial")[:2], error_event("overloaded_error")])

    events, error = await _run(provider)

    assert _text(events) == "part"
    assert error is not None
    assert (error.upstream_status, error.status, error.retryable) == (529, 503, True)
    assert "Overloaded" in error.message


async def test_invalid_request_error_event_is_not_retryable(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue([message_start(), error_event("invalid_request_error", "bad")])

    _, error = await _run(provider)

    assert error is not None
    assert (error.upstream_status, error.retryable) == (400, False)


async def test_connection_cut_mid_stream(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.queue_text("hello there", chunk=2, cut_after=4)

    events, error = await _run(provider)

    assert _text(events) == "he"
    assert error is not None
    assert error.retryable
    assert error.code == "upstream_unreachable"


async def test_stream_ending_without_message_stop_is_incomplete(
    mock: MockAnthropic, provider: AnthropicProvider
) -> None:
    mock.queue([message_start(), *text_block(0, "cut short")])

    events, error = await _run(provider)

    assert _text(events) == "cut short"
    assert not any(isinstance(e, Done) for e in events)
    assert error is not None
    assert (error.code, error.retryable) == ("upstream_incomplete", True)


async def test_malformed_json_in_stream(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.queue([message_start(), b"event: content_block_delta\ndata: {nope\n\n"])

    _, error = await _run(provider)

    assert error is not None
    assert error.code == "upstream_malformed"


async def test_unreachable_upstream(client: httpx.AsyncClient) -> None:
    provider = AnthropicProvider(_config(_closed_port_url()), client)

    _, error = await _run(provider)

    assert error is not None
    assert (error.code, error.retryable, error.upstream_status) == (
        "upstream_unreachable",
        True,
        None,
    )


# --- models --------------------------------------------------------------------------


async def test_list_models_from_upstream(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.models = ["claude-a", "claude-b"]

    assert await provider.list_models() == ["claude-a", "claude-b"]
    assert mock.requests[-1].path == "/v1/models"
    assert mock.requests[-1].headers["x-api-key"] == "sk-test"


async def test_list_models_prefers_configured_models(
    mock: MockAnthropic, client: httpx.AsyncClient
) -> None:
    provider = AnthropicProvider(_config(mock.base_url, models=["fixed"]), client)

    assert await provider.list_models() == ["fixed"]
    assert mock.requests == []


async def test_list_models_is_empty_on_failure(client: httpx.AsyncClient) -> None:
    provider = AnthropicProvider(_config(_closed_port_url()), client)

    assert await provider.list_models() == []


# --- request conversion --------------------------------------------------------------


async def test_request_body_on_the_wire(mock: MockAnthropic, provider: AnthropicProvider) -> None:
    mock.queue_text("ok")
    request = _request(
        text_message("system", "Be brief."),
        text_message("user", "weather?"),
        text_message("system", "Use metric."),
        tools=(ToolSpec("get_weather", "Weather for a city", {"type": "object"}),),
        tool_choice="required",
        temperature=0.2,
        top_p=0.9,
        stop=("END",),
        options={
            "seed": 1,
            "presence_penalty": 0.5,
            "top_k": 5,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "user": "u1",
        },
    )

    await _run(provider, request)

    assert mock.requests[0].json == {
        "model": "claude-test",
        "max_tokens": 4096,
        "stream": True,
        "system": "Be brief.\n\nUse metric.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "weather?"}]}],
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": {"type": "object"},
            }
        ],
        "tool_choice": {"type": "any"},
        "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "u1"},
    }


def test_max_tokens_passes_through() -> None:
    assert request_body(_request(max_tokens=77))["max_tokens"] == 77


def test_reasoning_effort_becomes_a_thinking_budget() -> None:
    body = request_body(_request(max_tokens=100, options={"reasoning_effort": "medium"}))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert body["max_tokens"] == 4096 + 1024
    assert "reasoning_effort" not in body
    assert "thinking" not in request_body(_request(options={"reasoning_effort": "extreme"}))


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ({"type": "function", "function": {"name": "f"}}, {"type": "tool", "name": "f"}),
        (None, None),
    ],
)
def test_tool_choice_mapping(choice: Any, expected: dict[str, Any] | None) -> None:
    body = request_body(_request(tools=(ToolSpec("f", "d"),), tool_choice=choice))
    assert body.get("tool_choice") == expected


def test_no_tools_sends_no_tool_choice() -> None:
    body = request_body(_request(tool_choice="auto"))
    assert "tools" not in body
    assert "tool_choice" not in body


def test_multi_step_assistant_message_splits_and_results_go_to_the_next_user_message() -> None:
    first = ToolCallPart("call_1", "search", '{"q": "a"}', result=ToolResult("found a"))
    second = ToolCallPart("call_2", "search", "not json", result=ToolResult("boom", is_error=True))
    third = ToolCallPart("call_3", "fetch", "[1, 2]", result=ToolResult("page"))
    assistant = Message(
        "assistant",
        (
            ReasoningPart("plan", signature="sig-1"),
            ReasoningPart("unsigned thoughts"),
            TextPart("Searching."),
            first,
            second,
            TextPart("Fetching."),
            third,
            TextPart("Done."),
        ),
    )

    system, messages = to_anthropic_messages(
        (text_message("user", "go"), assistant, text_message("user", "thanks"))
    )

    assert system == ""
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "call_1", "name": "search", "input": {"q": "a"}},
                {"type": "tool_use", "id": "call_2", "name": "search", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "found a",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": "boom",
                    "is_error": True,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Fetching."},
                {"type": "tool_use", "id": "call_3", "name": "fetch", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_3",
                    "content": "page",
                    "is_error": False,
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]


def test_trailing_tool_results_merge_into_the_following_user_message() -> None:
    call = ToolCallPart("call_1", "f", "{}", result=ToolResult("r"))
    _, messages = to_anthropic_messages(
        (
            text_message("user", "a"),
            Message("assistant", (call,)),
            text_message("user", "b"),
        )
    )

    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "r", "is_error": False},
        {"type": "text", "text": "b"},
    ]


def test_consecutive_same_role_messages_merge() -> None:
    _, messages = to_anthropic_messages(
        (
            text_message("user", "one"),
            text_message("system", "sys"),
            text_message("user", "two"),
            text_message("assistant", "three"),
            text_message("assistant", "four"),
            text_message("user", ""),
        )
    )

    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "three"}, {"type": "text", "text": "four"}],
        },
    ]


def test_images_become_base64_or_url_sources() -> None:
    user = Message(
        "user",
        (
            TextPart("what is this?"),
            ImagePart("data:image/png;base64,iVBORw0KGgo="),
            ImagePart("https://example.com/cat.jpg", detail="high"),
            ImagePart("data:image/svg+xml,%3Csvg%2F%3E"),
        ),
    )

    _, messages = to_anthropic_messages((user,))

    assert messages[0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/svg+xml", "data": "PHN2Zy8+"},
        },
    ]
