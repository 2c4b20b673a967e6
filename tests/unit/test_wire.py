"""Wire requests to neutral turns, and neutral messages back to the OpenAI wire."""

from __future__ import annotations

import pytest
from tests.support.growth import growth

from parley.api.wire import to_messages, to_turn
from parley.api.wire_models import ChatCompletionRequest
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


def _calls(count: int, prefix: str = "c") -> list[dict[str, object]]:
    return [
        {"id": f"{prefix}{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(count)
    ]


def test_each_result_answers_the_latest_call_with_its_id_and_the_last_result_wins() -> None:
    body = wire(
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "c1", "content": "first"},
        {"role": "tool", "tool_call_id": "c1", "content": "second"},
        {"role": "user", "content": "y"},
        {"role": "assistant", "tool_calls": CALLS[:1]},
        {"role": "tool", "tool_call_id": "c1", "content": "later"},
    )
    messages, trailing, orphans = to_messages(body.messages)
    assert messages[1].parts == (
        ToolCallPart("c1", "f", "{}", ToolResult("second")),
        ToolCallPart("c2", "g", "{}"),
    )
    assert messages[3].parts == (ToolCallPart("c1", "f", "{}", ToolResult("later")),)
    assert [a.content for a in trailing] == ["later"]
    assert orphans == ()


def _answered_calls(n: int) -> ChatCompletionRequest:
    return wire(
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": _calls(n)},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": "r"} for i in range(n)),
    )


def test_tool_results_fold_in_linear_time() -> None:
    """Each result used to rebuild its assistant message whole: T calls answered by M
    results cost T x M (40,000 x 4,000 froze the server for 29 s). Four times the calls
    and results must cost about four times as much, not sixteen."""
    messages, _, _ = to_messages(_answered_calls(100).messages)
    assert all(isinstance(p, ToolCallPart) and p.result for p in messages[1].parts)
    grew = growth(_answered_calls, lambda body: to_messages(body.messages), 2_500)
    assert grew < 8, f"4x the calls took {grew:.1f}x as long"


def test_a_message_with_too_many_tool_calls_is_refused() -> None:
    registry = build_registry(Settings())
    limits = ChatSettings()
    assert limits.max_tool_calls == 1024
    calls = {"role": "assistant", "tool_calls": _calls(1024)}
    fine = wire({"role": "user", "content": "x"}, calls, {"role": "user", "content": "y"})
    to_turn(fine, caller=Caller("o"), limits=limits, tools=registry)
    too_many = wire(
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": _calls(1025)},
        {"role": "user", "content": "y"},
    )
    with pytest.raises(InvalidRequest) as caught:
        to_turn(too_many, caller=Caller("o"), limits=limits, tools=registry)
    assert caught.value.param == "messages.1.tool_calls"
    assert "1025 > 1024" in caught.value.message


def test_a_request_with_too_many_parts_in_all_is_refused() -> None:
    """Content items (a string is one) and tool calls of every message count."""
    registry = build_registry(Settings())
    limits = ChatSettings(max_parts=100)
    assert ChatSettings().max_parts == 20_000
    texts = [{"type": "text", "text": "a"}] * 30
    messages = [
        {"role": "user", "content": texts},
        {"role": "assistant", "content": None, "tool_calls": _calls(39)},
        {"role": "tool", "tool_call_id": "c0", "content": "r"},
        {"role": "user", "content": texts},
    ]
    to_turn(wire(*messages), caller=Caller("o"), limits=limits, tools=registry)  # 100
    messages[1] = {"role": "assistant", "content": "ok", "tool_calls": _calls(39)}
    with pytest.raises(InvalidRequest) as caught:
        to_turn(wire(*messages), caller=Caller("o"), limits=limits, tools=registry)
    assert caught.value.param == "messages"
    assert "101 > 100" in caught.value.message


def test_extra_body_is_held_to_the_limits_of_the_body() -> None:
    """``tool_config`` names server tools as ``tools`` does, and ``extra_body`` carries
    ``approvals`` as the body does: neither was bounded there."""
    registry = build_registry(Settings())
    limits = ChatSettings(max_tools=3)
    names = {f"mcp__srv__t{i}": {} for i in range(4)}
    body = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "x"}], "tool_config": names}
    )
    with pytest.raises(InvalidRequest) as caught:
        to_turn(body, caller=Caller("o"), limits=limits, tools=registry)
    assert caught.value.param == "tool_config"
    decisions = [{"tool_call_id": f"c{i}", "decision": "approve"} for i in range(257)]
    body = ChatCompletionRequest.model_validate(
        {"messages": [], "conversation_id": "conv_1", "extra_body": {"approvals": decisions}}
    )
    with pytest.raises(InvalidRequest) as caught:
        to_turn(body, caller=Caller("o"), limits=ChatSettings(), tools=registry)
    assert caught.value.param == "approvals"
    assert "at most 256" in caught.value.message
