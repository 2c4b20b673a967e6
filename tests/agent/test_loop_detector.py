"""The loop detector: cycles of length 1..3 repeated three times fire, nothing else does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.agent.loop_detector import LoopDetector, ToolCallKey, canonical_arguments
from parley.settings import AgentSettings

A: ToolCallKey = ("read_file", '{"path": "a.txt"}')
B: ToolCallKey = ("read_file", '{"path": "b.txt"}')
C: ToolCallKey = ("shell", '{"cmd": "make test"}')
D: ToolCallKey = ("search", '{"q": "x"}')


def feed(detector: LoopDetector, calls: list[ToolCallKey]) -> list[bool]:
    """One call per step; what observe returned for each."""
    return [detector.observe([call]) for call in calls]


@pytest.mark.parametrize(
    "cycle", [[A], [A, B], [A, B, C]], ids=["length-1", "length-2", "length-3"]
)
def test_a_cycle_repeated_three_times_fires_on_its_last_call(cycle: list[ToolCallKey]) -> None:
    results = feed(LoopDetector(), cycle * 3)
    assert results == [False] * (len(cycle) * 3 - 1) + [True]


@pytest.mark.parametrize("cycle", [[A], [A, B], [A, B, C]])
def test_two_repeats_do_not_fire(cycle: list[ToolCallKey]) -> None:
    assert not any(feed(LoopDetector(), cycle * 2))


@pytest.mark.parametrize("cycle", [[A], [A, B], [A, B, C]])
def test_a_whole_loop_in_one_step_fires(cycle: list[ToolCallKey]) -> None:
    assert LoopDetector().observe(cycle * 3)


def test_a_loop_completed_in_the_middle_of_a_step_fires() -> None:
    detector = LoopDetector()
    assert not detector.observe([A, A])
    assert detector.observe([A, D])


def test_a_cycle_longer_than_max_cycle_does_not_fire() -> None:
    assert not any(feed(LoopDetector(), [A, B, C, D] * 3))
    assert feed(LoopDetector(max_cycle=4, window=12), [A, B, C, D] * 3)[-1]


def test_argument_key_order_and_spacing_do_not_matter() -> None:
    detector = LoopDetector()
    assert not detector.observe([("edit", '{"path": "x", "line": 3}')])
    assert not detector.observe([("edit", '{"line":3,"path":"x"}')])
    assert detector.observe([("edit", '{\n  "line": 3,\n  "path": "x"\n}')])


def test_different_arguments_do_not_fire() -> None:
    calls = [("read_file", json.dumps({"path": f"{i}.txt"})) for i in range(12)]
    assert not any(feed(LoopDetector(), calls))


def test_same_arguments_for_different_tools_do_not_fire() -> None:
    args = '{"path": "a.txt"}'
    assert not any(feed(LoopDetector(), [("read", args), ("write", args), ("stat", args)] * 2))


def test_calls_older_than_the_window_are_forgotten() -> None:
    # Nine calls make A B C three times; with a window of eight the first A is gone.
    assert not any(feed(LoopDetector(window=8), [A, B, C] * 3))
    assert feed(LoopDetector(window=9), [A, B, C] * 3)[-1]


def test_a_cycle_that_does_not_fit_the_window_never_fires() -> None:
    assert not any(feed(LoopDetector(window=5), [A, B] * 6))


def test_firing_clears_the_window() -> None:
    detector = LoopDetector()
    assert feed(detector, [A, A, A]) == [False, False, True]
    assert detector.fired == 1
    # The same loop counts again only after three more repeats from scratch.
    assert feed(detector, [A, A, A]) == [False, False, True]
    assert detector.fired == 2


def test_calls_after_the_firing_one_in_the_same_step_are_not_recorded() -> None:
    detector = LoopDetector()
    assert detector.observe([A, A, A, A, A])
    assert feed(detector, [A, A, A]) == [False, False, True]


def test_reset_forgets_calls_and_firings() -> None:
    detector = LoopDetector()
    feed(detector, [A, A, A, A, A])
    assert detector.fired == 1
    detector.reset()
    assert detector.fired == 0
    assert not detector.observe([A, A])


def test_from_settings_uses_the_agent_settings() -> None:
    detector = LoopDetector.from_settings(
        AgentSettings(loop_window=20, loop_max_cycle=4, loop_repeats=2)
    )
    assert (detector.window, detector.max_cycle, detector.repeats) == (20, 4, 2)
    assert feed(detector, [A, B, C, D] * 2)[-1]


@pytest.mark.parametrize(("window", "max_cycle", "repeats"), [(0, 3, 3), (12, 0, 3), (12, 3, 1)])
def test_invalid_parameters_are_rejected(window: int, max_cycle: int, repeats: int) -> None:
    with pytest.raises(ValueError, match="window"):
        LoopDetector(window, max_cycle, repeats)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ('{"b": 1, "a": [1, 2]}', '{"a":[1,2],"b":1}'),
        ('{"q": "caf\\u00e9"}', '{"q":"café"}'),
        ("", "{}"),
        ("   ", "{}"),
        ("{not json", "{not json"),
        ('"just a string"', '"just a string"'),
    ],
)
def test_canonical_arguments(raw: str, canonical: str) -> None:
    assert canonical_arguments(raw) == canonical


def test_deeply_nested_arguments_fall_back_to_the_raw_string() -> None:
    raw = "[" * 100_000 + "]" * 100_000
    assert canonical_arguments(raw) == raw


_distinct_calls = st.lists(
    st.tuples(st.sampled_from(["read", "write", "shell", "search"]), st.integers()),
    unique=True,
    max_size=60,
).map(lambda pairs: [(name, json.dumps({"n": n})) for name, n in pairs])


@given(calls=_distinct_calls, step_sizes=st.lists(st.integers(1, 5), max_size=60))
def test_calls_that_never_repeat_never_fire(
    calls: list[ToolCallKey], step_sizes: list[int]
) -> None:
    detector = LoopDetector()
    rest, sizes = list(calls), iter(step_sizes)
    while rest:
        size = next(sizes, 1)
        step, rest = rest[:size], rest[size:]
        assert not detector.observe(step)
    assert detector.fired == 0


@given(call=st.tuples(st.text(max_size=10), st.text(max_size=20)), cycle=st.integers(1, 3))
def test_any_call_repeated_fires(call: ToolCallKey, cycle: int) -> None:
    others = [("other-tool", json.dumps({"i": i})) for i in range(cycle - 1)]
    assert LoopDetector().observe([call, *others] * 3)
