"""The turn's incremental repair gives exactly what the full pipeline gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parley.agent.repair import ANTHROPIC_RULES, OPENAI_RULES, repair, repair_messages
from parley.agent.transcript import fold
from parley.agent.turn_repair import TurnRepair
from parley.messages import Message, TextPart, ToolCallPart, ToolResult
from parley.settings import RepairSettings
from tests.agent.test_repair import both_rules, messy_histories, windows

SETTINGS = RepairSettings()


def full(messages: list[Message], window: int | None, rules: object) -> list[Message]:
    return repair_messages(messages, context_tokens=window, settings=SETTINGS, rules=rules)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(messy_histories(), messy_histories(), windows, both_rules, st.booleans())
def test_same_as_the_full_pipeline(raw, extra, window, rules, own_from_extra) -> None:  # type: ignore[no-untyped-def]
    # a history as Parley stores it (already repaired once), or a messy one as a client sends
    history = fold(repair(raw, context_tokens=None, settings=SETTINGS, rules=rules))
    candidates = [history, [m for m in fold_or_empty(raw)]]
    owns = [m for m in fold_or_empty(extra) if m.role == "assistant"]
    own = owns[0] if owns and own_from_extra else None
    for base in candidates:
        turn = TurnRepair(base, SETTINGS)
        expected = full([*base, own] if own else list(base), window, rules)
        assert turn.messages(own, context_tokens=window, rules=rules) == expected


def fold_or_empty(entries: list[object]) -> list[Message]:
    try:
        return fold(entries)  # type: ignore[arg-type]
    except ValueError:
        return []


def test_a_clean_history_takes_the_fast_path(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    history = [
        Message("system", (TextPart("be brief"),)),
        Message("user", (TextPart("hi"),)),
        Message(
            "assistant",
            (ToolCallPart("call_1", "search", "{}", ToolResult("x" * 2000)), TextPart("done")),
        ),
        Message("user", (TextPart("again"),)),
    ]
    own = Message("assistant", (ToolCallPart("call_2", "search", "{}", ToolResult("y" * 2000)),))
    turn = TurnRepair(history, SETTINGS)
    import parley.agent.turn_repair as module

    def refuse(*args: object, **kwargs: object) -> list[Message]:
        raise AssertionError("the full pipeline ran")

    monkeypatch.setattr(module, "repair_messages", refuse)
    for rules in (OPENAI_RULES, ANTHROPIC_RULES):
        out = turn.messages(own, context_tokens=None, rules=rules)
        old = out[2].tool_calls[0].result
        assert old is not None
        assert old.content.endswith("[... truncated for brevity]")  # before the request
        new = out[4].tool_calls[0].result
        assert new is not None
        assert new.content == "y" * 2000  # this turn's own result is whole


def test_a_result_that_step_6_lengthens_still_triggers_trimming() -> None:
    """801 characters become 800 plus the marker: a little longer than before."""
    import math

    from parley.agent.repair import estimate_tokens
    from parley.messages import text_message as t

    history = [
        t("user", "a" * 400),
        Message("assistant", (ToolCallPart("call_1", "search", "{}", ToolResult("r" * 801)),)),
        t("user", "b"),
        t("assistant", "c"),
        t("user", "d"),
        t("assistant", "e"),
        t("user", "f"),
    ]
    window = math.ceil(
        estimate_tokens(history) * SETTINGS.estimate_safety / SETTINGS.context_fraction
    )
    fast = TurnRepair(history, SETTINGS).messages(None, context_tokens=window, rules=OPENAI_RULES)
    assert fast == full(history, window, OPENAI_RULES)
    assert "[Conversation summary]" in fast[0].text


def test_tool_timings_survive_repair_on_both_paths() -> None:
    timed = ToolResult("x" * 900, False, 1_700_000_000.0, 0.25)
    history = [
        Message("user", (TextPart("hi"),)),
        Message("assistant", (ToolCallPart("call_1", "search", "{}", timed),)),
        Message("user", (TextPart("again"),)),
    ]
    own = Message("assistant", (ToolCallPart("call_2", "search", "{}", timed),))
    fast = TurnRepair(history, SETTINGS).messages(own, context_tokens=None, rules=OPENAI_RULES)
    assert fast == full([*history, own], None, OPENAI_RULES)
    kept = fast[-1].tool_calls[0].result
    assert kept is not None
    assert (kept.started_at, kept.seconds) == (1_700_000_000.0, 0.25)


def test_a_system_message_with_more_than_text_takes_the_full_path() -> None:
    odd = Message(
        "system",
        (TextPart("rules"), ToolCallPart("call_9", "search", "{}", ToolResult("y" * 900))),
    )
    history = [odd, Message("user", (TextPart("hi"),)), Message("user", (TextPart("more"),))]
    fast = TurnRepair(history, SETTINGS).messages(None, context_tokens=None, rules=OPENAI_RULES)
    assert fast == full(history, None, OPENAI_RULES)
