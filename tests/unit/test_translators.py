"""The Anthropic and Responses doors' stream translators on the chat path's own SSE: the
same events whether the bytes come whole or one at a time, each event in order, a
keepalive passed on, an error ending the stream, and a stream cut without ``[DONE]``
closed properly."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from parley.api.anthropic_messages import StreamTranslator as AnthropicTranslator
from parley.api.responses import StreamTranslator as ResponsesTranslator
from parley.api.translated import ChunkTranslator


def chunk(
    delta: dict[str, Any],
    finish: str | None = None,
    parley: dict[str, Any] | None = None,
    **extra: Any,
) -> bytes:
    body = {
        "id": "chatcmpl-msg_1",
        "model": "fast",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "parley": parley or {"conversation_id": "conv_1", "message_id": "msg_1"},
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
STREAM = b"".join(
    [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "Hmm."}),
        chunk({"content": "Hel"}),
        b": ping\n\n",
        chunk({"content": "lo."}),
        chunk({"tool_calls": [CALL]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}),
        chunk({}, "tool_calls"),
        b'data: {"id": "x", "choices": [], '
        b'"usage": {"prompt_tokens": 5, "completion_tokens": 3}}\n\n',
        b"data: [DONE]\n\n",
    ]
)


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for frame in raw.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in frame.split(b"\n") if b": " in line)
        if b"event" in lines:
            found.append((lines[b"event"].decode(), orjson.loads(lines[b"data"])))
    return found


@pytest.mark.parametrize("make", [AnthropicTranslator, lambda: ResponsesTranslator({})])
def test_bytes_cut_anywhere_translate_alike(make: Any) -> None:
    whole: ChunkTranslator = make()
    drip: ChunkTranslator = make()
    at_once = whole.feed(STREAM) + whole.close()
    one_by_one = b"".join(drip.feed(STREAM[n : n + 1]) for n in range(len(STREAM))) + drip.close()
    assert one_by_one == at_once
    assert at_once


def test_anthropics_events_in_order() -> None:
    translator = AnthropicTranslator()
    found = events(translator.feed(STREAM) + translator.close())
    assert [name for name, _ in found] == [
        "message_start",
        "content_block_start",  # thinking
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # text
        "content_block_delta",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # tool_use
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    delta = found[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == 3
    assert found[10][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a": 1}'}


def test_responses_events_in_order_with_sequence_numbers() -> None:
    translator = ResponsesTranslator({"store": True})
    raw = translator.feed(STREAM) + translator.close()
    assert b": ping\n\n" in raw
    found = events(raw)
    assert [data["sequence_number"] for _, data in found] == list(range(len(found)))
    names = [name for name, _ in found]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    final = found[-1][1]["response"]
    assert final["id"] == "resp_msg_1.conv_1"
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][1]["content"][0]["text"] == "Hello."
    assert final["output"][2]["arguments"] == '{"a": 1}'
    assert final["usage"]["output_tokens"] == 3


@pytest.mark.parametrize("make", [AnthropicTranslator, lambda: ResponsesTranslator({})])
def test_an_error_ends_the_stream_and_a_cut_stream_is_closed(make: Any) -> None:
    failing: ChunkTranslator = make()
    error = b'data: {"error": {"message": "upstream down", "type": "upstream_error"}}\n\n'
    raw = failing.feed(chunk({"content": "Hi"}) + error) + failing.close()
    names = [name for name, _ in events(raw)]
    assert "error" in names
    assert not {"message_stop", "response.completed"} & set(names)

    cut: ChunkTranslator = make()
    closed = events(cut.feed(chunk({"content": "Hi"})) + cut.close())
    assert closed[-1][0] in ("message_stop", "response.completed")
    assert cut.close() == b""  # once


@pytest.mark.parametrize("make", [AnthropicTranslator, lambda: ResponsesTranslator({})])
def test_a_restart_after_output_was_shown_fails_the_stream(make: Any) -> None:
    """Anthropic's and OpenAI's streams cannot take back what was sent: the client is
    told the answer restarted, and nothing of the new attempt follows."""
    restart = {"restart": {"reason": "upstream_error", "attempt": 2, "clear": True}}
    translator: ChunkTranslator = make()
    raw = (
        translator.feed(
            chunk({"content": "Half an ans"})
            + chunk({}, parley={"message_id": "msg_1", **restart})
            + chunk({"content": "A whole answer."})
            + chunk({}, "stop")
            + b"data: [DONE]\n\n"
        )
        + translator.close()
    )
    names = [name for name, _ in events(raw)]
    assert "error" in names
    assert b"the answer was restarted" in raw
    assert b"A whole answer." not in raw
    assert not {"message_stop", "response.completed"} & set(names)


def test_a_restart_before_any_output_is_no_failure() -> None:
    translator = AnthropicTranslator()
    quiet = {"restart": {"reason": "upstream_error", "attempt": 2, "clear": False}}
    raw = (
        translator.feed(
            chunk({}, parley={"message_id": "msg_1", **quiet}) + chunk({"content": "Fine."})
        )
        + translator.close()
    )
    assert [name for name, _ in events(raw)][-1] == "message_stop"
    assert b"Fine." in raw


def test_responses_items_of_later_steps_have_ids_of_their_own() -> None:
    translator = ResponsesTranslator({})
    steps = (
        chunk({"content": "Looking."})
        + chunk({"tool_calls": [CALL]})
        + chunk({"content": "Found it."})
        + chunk({}, "length")
        + b"data: [DONE]\n\n"
    )
    found = events(translator.feed(steps) + translator.close())
    added = [data["item"]["id"] for name, data in found if name == "response.output_item.added"]
    assert len(added) == len(set(added)) == 3
    indexes = [data["output_index"] for name, data in found if name == "response.output_item.done"]
    assert indexes == [0, 1, 2]
    assert found[-1][0] == "response.incomplete"  # cut at the token cap
