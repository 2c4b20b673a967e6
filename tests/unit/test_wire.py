"""Wire requests to neutral turns, and neutral messages back to the OpenAI wire."""

from __future__ import annotations

import pytest

from parley.api.wire import ChatCompletionRequest, to_messages, to_turn
from parley.errors import InvalidRequest
from parley.identity import Caller
from parley.messages import ImagePart, Message, TextPart, ToolCallPart, ToolResult
from parley.providers.openai_chat import to_openai_messages
from parley.settings import ChatSettings, Settings
from parley.tools.builtins import build_registry

CALLS = [
    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
]


def wire(*messages: dict[str, object]) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": list(messages)})


def test_tool_results_fold_into_their_calls() -> None:
    body = wire(
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": CALLS,
        },
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
    )
    messages, trailing, orphans = to_messages(body.messages)
    assert messages[0] == Message("system", (TextPart("rules"),))
    assert messages[2].parts == (
        ToolCallPart("c1", "f", "{}", ToolResult("one")),
        ToolCallPart("c2", "g", "{}", ToolResult("two")),
    )
    assert [a.call_id for a in trailing] == ["c2", "c1"]
    assert orphans == ()
    # and back: the assistant step, then its results in call order
    assert to_openai_messages(messages)[2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": CALLS,
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]


def test_orphans_are_reported() -> None:
    _, _, orphans = to_messages(
        wire({"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz"}).messages
    )
    assert [o.param for o in orphans] == ["messages.1.tool_call_id"]


def test_multi_step_assistant_message_becomes_several_wire_messages() -> None:
    turn = Message(
        "assistant",
        (
            TextPart("Let me look."),
            ToolCallPart("c1", "f", "{}", ToolResult("r1")),
            TextPart("Found it."),
        ),
    )
    assert [m["role"] for m in to_openai_messages((turn,))] == ["assistant", "tool", "assistant"]


def test_images_become_content_parts() -> None:
    message = Message("user", (TextPart("see"), ImagePart("data:image/png;base64,AA", "low")))
    assert to_openai_messages((message,))[0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}},
    ]


def test_image_urls_must_be_http_or_data() -> None:
    body = wire(
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///x"}}]}
    )
    with pytest.raises(InvalidRequest) as caught:
        to_messages(body.messages)
    assert caught.value.param == "messages.0.content"


def test_server_tools_by_name_and_tool_choice_expansion() -> None:
    registry = build_registry(Settings())
    body = ChatCompletionRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": ["current_time", {"type": "function", "function": {"name": "mine"}}],
            "tool_choice": "mine",
            "extra_body": {"conversation_id": "conv_1"},
        }
    )
    turn = to_turn(body, caller=Caller("o"), limits=ChatSettings(), tools=registry)
    assert turn.server_tools == ("current_time",)
    assert [t.name for t in turn.tools] == ["mine"]
    assert turn.tool_choice == {"type": "function", "function": {"name": "mine"}}
    assert turn.conversation_id == "conv_1"
    for keep in ("auto", "none", "required"):
        body.tool_choice = keep
        assert (
            to_turn(body, caller=Caller("o"), limits=ChatSettings(), tools=registry).tool_choice
            == keep
        )


def test_chatchat_tool_config_enables_server_tools() -> None:
    registry = build_registry(Settings())
    body = ChatCompletionRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": ["current_time"],
            "tool_config": {"web_fetch": {}, "current_time": {}},
        }
    )
    turn = to_turn(body, caller=Caller("o"), limits=ChatSettings(), tools=registry)
    assert turn.server_tools == ("current_time", "web_fetch")
    body.tool_config = {"no_such_tool": {}}
    with pytest.raises(InvalidRequest) as caught:
        to_turn(body, caller=Caller("o"), limits=ChatSettings(), tools=registry)
    assert caught.value.param == "tool_config"
