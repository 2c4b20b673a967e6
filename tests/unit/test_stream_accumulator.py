"""The stream reader: parts from events, tool-call fragments merged by index."""

from __future__ import annotations

from parley.agent.stream import StreamAccumulator
from parley.events import Done, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from parley.messages import ReasoningPart, TextPart, ToolCallPart, Usage


def test_text_reasoning_and_calls_in_order() -> None:
    reader = StreamAccumulator()
    for event in [
        ReasoningDelta("let me "),
        ReasoningDelta("think", signature=None),
        ReasoningDelta("", signature="sig"),
        TextDelta("Hel"),
        TextDelta("lo"),
        ToolCallDelta(1, id="call_b", name="second", arguments='{"b"'),
        ToolCallDelta(0, id="call_a", name="first", arguments=""),
        ToolCallDelta(0, arguments='{"x": 1}'),
        ToolCallDelta(1, arguments=": 2}"),
        UsageEvent(Usage(5, 7)),
        Done("tool_use"),
    ]:
        reader.apply(event)
    assert reader.parts() == (
        ReasoningPart("let me think", "sig"),
        TextPart("Hello"),
        ToolCallPart("call_b", "second", '{"b": 2}'),  # in order of appearance
        ToolCallPart("call_a", "first", '{"x": 1}'),
    )
    assert reader.stop_reason == "tool_use"
    assert reader.usage == Usage(5, 7)
    assert reader.has_output


def test_call_without_id_gets_one_and_nameless_calls_are_dropped() -> None:
    reader = StreamAccumulator()
    reader.apply(ToolCallDelta(0, name="f", arguments="{}"))
    reader.apply(ToolCallDelta(1, arguments="{}"))
    calls = reader.tool_calls()
    assert len(calls) == 1
    assert calls[0].id.startswith("call_")


def test_parallel_calls_sharing_an_index_are_kept_apart() -> None:
    """Ollama numbers every parallel call 0; a new id means a new call."""
    reader = StreamAccumulator()
    first = reader.apply(ToolCallDelta(0, id="c1", name="w", arguments='{"a":1}'))
    second = reader.apply(ToolCallDelta(0, id="c2", name="w", arguments='{"a":2}'))
    more = reader.apply(ToolCallDelta(0, arguments=""))
    assert (first.index, first.id) == (0, "c1")  # type: ignore[union-attr]
    assert (second.index, second.id) == (1, "c2")  # type: ignore[union-attr]
    assert (more.index, more.id) == (1, None)  # type: ignore[union-attr]
    assert [(c.id, c.arguments) for c in reader.tool_calls()] == [
        ("c1", '{"a":1}'),
        ("c2", '{"a":2}'),
    ]
    assert reader.apply(Done("end_turn")) == Done("tool_use")
    assert reader.stop_reason == "tool_use"


def test_empty_stream_has_no_output() -> None:
    reader = StreamAccumulator()
    reader.apply(Done("end_turn"))
    assert not reader.has_output
    assert reader.parts() == ()
