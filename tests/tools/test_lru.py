"""The active-tool LRU: idle tools hide, at most ``max_active`` are offered, pinned
tools always are, and ``activate_tools`` appears exactly when something is hidden."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.tools.lru import ACTIVATOR, ActiveTools


def names(count: int) -> list[str]:
    return [f"t{i}" for i in range(count)]


def test_nothing_hidden_at_first_and_no_activator() -> None:
    lru = ActiveTools(names(3), max_active=15, idle_iterations=5)
    lru.begin_iteration(1)
    assert lru.offered() == ["t0", "t1", "t2"]
    assert lru.hidden() == []


def test_an_idle_tool_hides_after_idle_iterations() -> None:
    lru = ActiveTools(["a", "b"], idle_iterations=5)
    for n in range(1, 6):
        lru.begin_iteration(n)
        assert lru.offered() == ["a", "b"], n
        lru.used(["a"])
    lru.begin_iteration(6)  # b was offered 5 times and never used
    assert lru.offered() == ["a", ACTIVATOR]
    assert lru.hidden() == ["b"]


def test_use_restarts_the_idle_count() -> None:
    lru = ActiveTools(["a"], idle_iterations=5)
    lru.begin_iteration(3)
    lru.used(["a"])
    lru.begin_iteration(8)
    assert lru.offered() == ["a"]
    lru.begin_iteration(9)
    assert lru.offered() == [ACTIVATOR]
    assert lru.hidden() == ["a"]


def test_at_most_max_active_least_recently_used_hidden_first() -> None:
    lru = ActiveTools(names(5), max_active=3, idle_iterations=50)
    lru.begin_iteration(1)
    assert lru.offered() == ["t0", "t1", "t2", ACTIVATOR]  # earlier ones first
    assert lru.hidden() == ["t3", "t4"]
    lru.used(["t1"])
    lru.begin_iteration(2)
    lru.used(["t2"])
    lru.begin_iteration(3)
    lru.activate(["t4"])
    lru.begin_iteration(4)
    # touched: t1 at 1, t2 at 2, t4 at 3; t0 (start) is the least recently used
    assert lru.offered() == ["t1", "t2", "t4", ACTIVATOR]
    assert lru.hidden() == ["t0", "t3"]


def test_pinned_tools_are_always_offered_and_do_not_count() -> None:
    lru = ActiveTools(["p", "a", "b"], pinned=["p", "not-available"], max_active=1)
    lru.begin_iteration(100)
    assert lru.offered() == ["p", ACTIVATOR]
    lru.used(["b"])
    lru.begin_iteration(101)
    assert lru.offered() == ["p", "b", ACTIVATOR]
    assert lru.hidden() == ["a"]


def test_activate_brings_tools_back_and_ignores_unknown_names() -> None:
    lru = ActiveTools(["p", "a", "b", "c"], pinned=["p"], max_active=2, idle_iterations=2)
    lru.begin_iteration(4)
    assert lru.offered() == ["p", ACTIVATOR]
    assert lru.activate(["c", "nope", "a", "c", "p"]) == ["c", "a", "p"]
    assert lru.offered() == ["p", "a", "c", ACTIVATOR]  # b is still hidden
    lru.begin_iteration(5)
    assert lru.offered() == ["p", "a", "c", ACTIVATOR]


def test_activate_beyond_the_cap_keeps_the_first_names() -> None:
    lru = ActiveTools(names(4), max_active=2, idle_iterations=1)
    lru.begin_iteration(9)
    assert lru.offered() == [ACTIVATOR]
    assert lru.activate(["t3", "t2", "t1"]) == ["t3", "t2"]
    lru.begin_iteration(10)
    assert lru.offered() == ["t2", "t3", ACTIVATOR]


def test_the_activator_in_available_is_not_a_regular_tool() -> None:
    lru = ActiveTools(["a", ACTIVATOR, "b"], pinned=[ACTIVATOR], max_active=1)
    lru.begin_iteration(1)
    assert lru.offered() == ["a", ACTIVATOR]
    assert lru.activate([ACTIVATOR]) == []
    lru = ActiveTools(["a", ACTIVATOR], pinned=[ACTIVATOR])
    assert lru.offered() == ["a"]


def test_iterations_never_go_back() -> None:
    lru = ActiveTools(["a"])
    lru.begin_iteration(2)
    with pytest.raises(ValueError, match="before"):
        lru.begin_iteration(1)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[str], list[str], int, int, list[list[int]]]:
    tools = names(draw(st.integers(1, 25)))
    pinned = draw(st.lists(st.sampled_from([*tools, "ghost"]), max_size=4, unique=True))
    max_active = draw(st.integers(1, 8))
    idle = draw(st.integers(1, 4))
    steps = draw(st.lists(st.lists(st.integers(0, 10_000), max_size=6), min_size=1, max_size=25))
    return tools, pinned, max_active, idle, steps


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.data())
def test_lru_properties(
    scenario: tuple[list[str], list[str], int, int, list[list[int]]], data: st.DataObject
) -> None:
    tools, pinned, max_active, idle, steps = scenario
    lru = ActiveTools(tools, pinned=pinned, max_active=max_active, idle_iterations=idle)
    pinned_available = [p for p in pinned if p in tools]
    touched: list[str] = []
    for iteration, picks in enumerate(steps, start=1):
        lru.begin_iteration(iteration)
        offered = lru.offered()
        hidden = lru.hidden()
        regular = [n for n in offered if n not in pinned_available and n != ACTIVATOR]
        # never more than max_active regular tools, + pinned, + the activator
        assert len(regular) <= max_active
        assert len(offered) <= max_active + len(pinned_available) + 1
        # pinned (available) tools always offered, never hidden
        assert all(p in offered for p in pinned_available)
        assert not set(hidden) & set(pinned_available)
        # the activator is there exactly when something is hidden
        assert (ACTIVATOR in offered) == bool(hidden)
        # everything available is either offered or hidden
        assert set(regular) | set(hidden) | set(pinned_available) == set(tools)
        assert len(offered) == len(set(offered))
        # what was touched last iteration is offered now (it fits under the cap)
        regular_touched = {n for n in touched if n not in pinned_available}
        if len(regular_touched) <= max_active:
            assert regular_touched <= set(offered)
        # this iteration: the model uses some offered tools, maybe activates others
        usable = [n for n in offered if n != ACTIVATOR]
        used = [usable[i % len(usable)] for i in picks] if usable else []
        lru.used(used)
        touched = list(used)
        wants_more = data.draw(st.booleans(), label="activate")
        if hidden and wants_more:
            wanted = data.draw(st.lists(st.sampled_from([*hidden, "ghost"]), max_size=4))
            result = lru.activate(wanted)
            assert "ghost" not in result
            assert set(result) <= set(lru.offered())
            touched += result
