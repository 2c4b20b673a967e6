"""Message repair: each step's exact behaviour, then properties over messy histories.

The properties (behaviours.md section 2, reliability.md case 5): every call is answered
exactly once before the next non-tool message; repair is idempotent; user messages and
their order survive (a suffix of them, the newest included, under trimming); and the
repaired history, folded and sent through the real adapters' converters, passes strict
validators of OpenAI's and Anthropic's ordering rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from parley.agent.repair import (
    ANTHROPIC_RULES,
    OPENAI_RULES,
    ProviderRules,
    estimate_tokens,
    lost_result,
    normalize_system_messages,
    normalize_tool_call_ids,
    repair,
    repair_message_order,
    repair_messages,
    repair_tool_pairs,
    rules_for,
    synthesize_missing_results,
    synthesize_missing_tool_results,
    trim_to_context_window,
    truncate_old_tool_results,
)
from parley.agent.transcript import (
    CONTINUES,
    Entry,
    ToolResultEntry,
    block_end,
    calls_of,
    entry_tokens,
    flatten,
    fold,
    is_note,
    text_tokens,
)
from parley.messages import (
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResult,
    text_message,
)
from parley.providers.anthropic import to_anthropic_messages
from parley.providers.openai_chat import to_openai_messages
from parley.settings import RepairSettings
from tests.agent.validators import WireError, validate_anthropic, validate_openai
from tests.support.growth import growth

DEFAULTS = RepairSettings()


def user(text: str) -> Message:
    return text_message("user", text)


def system(text: str) -> Message:
    return text_message("system", text)


def assistant(text: str = "", *calls: tuple[str, str]) -> Message:
    parts: tuple[Part, ...] = (TextPart(text),) if text else ()
    return Message("assistant", parts + tuple(ToolCallPart(i, n, "{}") for i, n in calls))


def result(call_id: str, content: str = "ok", name: str | None = None) -> ToolResultEntry:
    return ToolResultEntry(call_id, content, name=name)


def run(entries: Sequence[Entry], rules: ProviderRules = OPENAI_RULES) -> list[Entry]:
    return repair(entries, context_tokens=None, settings=DEFAULTS, rules=rules)


# --- the flat form ---------------------------------------------------------------------


def test_flatten_and_fold_round_trip() -> None:
    folded = [
        system("be brief"),
        user("hi"),
        Message(
            "assistant",
            (
                TextPart("let me look"),
                ToolCallPart("c1", "search", "{}", ToolResult("found")),
                TextPart("and more"),
                ToolCallPart("c2", "read", "{}", ToolResult("boom", is_error=True)),
                ToolCallPart("c3", "read", "{}"),
            ),
        ),
    ]
    flat = flatten(folded)
    assert flat[3:] == [
        ToolResultEntry("c1", "found", False, "search"),
        ToolResultEntry("c2", "boom", True, "read"),
    ]
    assert all(c.result is None for c in calls_of(flat[2]))
    assert fold(flat) == folded


def test_fold_rejects_a_stray_result() -> None:
    with pytest.raises(ValueError, match="does not follow"):
        fold([user("q"), result("c1")])
    with pytest.raises(ValueError, match="no unanswered call"):
        fold([assistant("", ("c1", "search")), result("c1"), result("c1")])


def test_token_estimate() -> None:
    assert text_tokens("abcd") == 1
    assert text_tokens("中文") == pytest.approx(2 / 1.5)
    assert entry_tokens(user("abcdabcd")) == 2 + 4
    assert entry_tokens(assistant("", ("c1", "abcd"))) == pytest.approx((4 + 2) / 4 + 4)
    assert entry_tokens(result("c1", "x" * 40)) == 10 + 4
    assert estimate_tokens([user("abcd"), user("abcd")]) == 10


# --- step 1: trim_to_context_window --------------------------------------------------


def conversation(turns: int, size: int = 400) -> list[Entry]:
    entries: list[Entry] = [system("rules")]
    for n in range(turns):
        entries += [
            user(f"question {n}\nsecond line"),
            assistant("", (f"c{n}", "search")),
            result(f"c{n}", "r" * size, name="search"),
            assistant(f"answer {n}"),
        ]
    return entries


def test_trim_needs_a_window_enough_messages_and_an_overflow() -> None:
    history = conversation(4)
    trim: Callable[..., list[Entry]] = trim_to_context_window
    assert trim(history, context_tokens=None, settings=DEFAULTS) == history
    assert trim(history[:7], context_tokens=10, settings=DEFAULTS) == history[:7]
    assert trim(history, context_tokens=100_000, settings=DEFAULTS) == history


def test_trim_summarises_old_messages_into_one_note() -> None:
    history = conversation(6)
    trimmed = trim_to_context_window(history, context_tokens=1000, settings=DEFAULTS)
    assert trimmed[0] == system("rules")
    summary = trimmed[1]
    assert isinstance(summary, Message)
    assert summary.role == "system"
    lines = summary.text.split("\n")
    assert lines[:5] == [
        "[Conversation summary] Earlier in this conversation:",
        "User: question 0",
        "Called search",
        "-> search: ok - " + "r" * 100 + "...",
        "Assistant: answer 0",
    ]
    kept = trimmed[2:]
    assert kept == history[len(history) - len(kept) :]
    assert len(kept) >= DEFAULTS.keep_recent_messages
    assert not isinstance(kept[0], ToolResultEntry)


def test_trim_caps_the_summary_and_counts_what_it_left_out() -> None:
    history = conversation(30, size=50)
    trimmed = trim_to_context_window(history, context_tokens=900, settings=DEFAULTS)
    summary = trimmed[1]
    assert isinstance(summary, Message)
    budget = 900 * 0.8 / 1.2
    assert entry_tokens(summary) <= budget * 0.4 + 20
    assert summary.text.split("\n")[-1].startswith("... (")
    assert summary.text.endswith(" earlier messages omitted)")


def test_trim_never_splits_a_tool_block() -> None:
    history: list[Entry] = [system("rules"), user("go")]
    history += [assistant("", ("a", "search"), ("b", "search"), ("c", "search"))]
    history += [result(i, "x" * 200) for i in "abc"]
    history += [user("next"), assistant("", ("d", "read")), result("d", "y" * 200)]
    history += [assistant("done")]
    trimmed = trim_to_context_window(history, context_tokens=400, settings=DEFAULTS)
    first_kept = trimmed[2]
    assert not isinstance(first_kept, ToolResultEntry)


def test_trim_keeps_the_current_request_and_everything_after_it() -> None:
    history: list[Entry] = [user("old"), assistant("old answer"), user("now do a long task")]
    for n in range(10):
        history += [assistant("", (f"c{n}", "search")), result(f"c{n}", "z" * 500)]
    trimmed = trim_to_context_window(history, context_tokens=300, settings=DEFAULTS)
    assert trimmed[1:] == history[2:]
    assert isinstance(trimmed[0], Message)
    assert trimmed[0].text.endswith("Assistant: old answer")


def test_trim_merges_an_earlier_summary_instead_of_summarising_it() -> None:
    history = conversation(8)
    once = repair(history, context_tokens=1500, settings=DEFAULTS, rules=OPENAI_RULES)
    summaries = [e for e in once if isinstance(e, Message) and "[Conversation summary]" in e.text]
    assert len(summaries) == 1
    assert is_note(summaries[0])
    longer = [*once, user("another question"), assistant("another answer")]
    again = repair(longer, context_tokens=1500, settings=DEFAULTS, rules=OPENAI_RULES)
    notes = [e for e in again if isinstance(e, Message) and "[Conversation summary]" in e.text]
    assert len(notes) == 1
    assert "User: question 0" in notes[0].text


# --- step 2: normalize_system_messages ----------------------------------------------


def test_leading_system_messages_merge_into_the_first() -> None:
    out = normalize_system_messages([system("a"), system(" "), system("b"), user("q")])
    assert out == [system("a\n\nb"), user("q")]


def test_later_system_messages_become_user_notes() -> None:
    out = normalize_system_messages([system("rules"), user("q"), system("it is 5pm"), system("")])
    assert out == [system("rules"), user("q"), user("[System note] it is 5pm")]


def test_a_stray_result_does_not_start_the_conversation() -> None:
    out = normalize_system_messages([result("c1"), system("a"), system("b"), user("q")])
    assert out == [system("a\n\nb"), result("c1"), user("q")]


def test_the_trim_summary_is_a_note_even_at_the_start() -> None:
    summary = system("[Conversation summary] Earlier in this conversation:\nUser: hi")
    out = normalize_system_messages([system("rules"), summary, user("q")])
    assert out[1] == user(f"[System note] {summary.text}")


# --- step 3: repair_message_order ----------------------------------------------------


def test_results_move_right_after_their_call_in_call_order() -> None:
    call = assistant("", ("a", "search"), ("b", "read"))
    out = repair_message_order([user("q"), call, user("more"), result("b"), result("a")])
    assert out == [user("q"), call, result("a"), result("b"), user("more")]


def test_one_result_per_id_the_last_wins() -> None:
    call = assistant("", ("a", "search"))
    out = repair_message_order([call, result("a", "first"), result("a", "second")])
    assert out == [call, result("a", "second")]


def test_a_result_before_its_call_moves_after_it() -> None:
    call = assistant("", ("a", "search"))
    assert repair_message_order([user("q"), result("a"), call]) == [user("q"), call, result("a")]


def test_a_reused_id_belongs_to_the_nearest_call_before_it() -> None:
    first, second = assistant("1", ("call_0", "search")), assistant("2", ("call_0", "search"))
    entries: list[Entry] = [first, result("call_0", "r1"), user("q"), second]
    entries.append(result("call_0", "r2"))
    assert repair_message_order(entries) == entries


def test_an_id_called_twice_in_one_message_keeps_two_results() -> None:
    call = assistant("", ("x", "search"), ("x", "read"))
    out = repair_message_order([call, result("x", "1"), result("x", "2"), result("x", "3")])
    assert out == [call, result("x", "2"), result("x", "3")]


def test_anthropic_wants_a_user_message_first() -> None:
    history: list[Entry] = [system("rules"), user("  "), assistant("hello"), user("q")]
    assert repair_message_order(history, rules=OPENAI_RULES) == history
    out = repair_message_order(history, rules=ANTHROPIC_RULES)
    assert out == [system("rules"), user("  "), user(CONTINUES), *history[2:]]
    assert repair_message_order([system("only")], rules=ANTHROPIC_RULES)[-1] == user(CONTINUES)
    assert repair_message_order([], rules=ANTHROPIC_RULES) == []


def test_rules_for_provider_kinds() -> None:
    assert rules_for("anthropic") is ANTHROPIC_RULES
    assert rules_for("local") is ANTHROPIC_RULES
    assert rules_for("openai") is OPENAI_RULES


# --- step 4: repair_tool_pairs -------------------------------------------------------


def test_orphan_results_are_removed() -> None:
    call = assistant("", ("a", "search"))
    entries: list[Entry] = [result("z"), user("q"), result("a"), call, result("a"), result("b")]
    assert repair_tool_pairs(entries) == [user("q"), call, result("a")]


def test_unanswered_calls_are_left_to_step_5() -> None:
    call = assistant("", ("a", "search"), ("b", "read"))
    assert repair_tool_pairs([call, result("b"), user("q")]) == [call, result("b"), user("q")]


def test_calls_no_provider_accepts_lose_their_place() -> None:
    call = assistant("", ("a", "functions.search"), ("b", ""), ("c", "read"))
    out = repair_tool_pairs([call, result("a"), result("b"), result("c")])
    assert out == [
        Message(
            "assistant",
            (
                TextPart("[Called tools: functions.search, unknown_tool]"),
                ToolCallPart("c", "read", "{}"),
            ),
        ),
        result("c"),
    ]
    with_text = assistant("I tried", ("a", "bad name"))
    assert repair_tool_pairs([with_text, result("a")]) == [assistant("I tried")]


# --- step 5: synthesize_missing_results ----------------------------------------------


def test_a_missing_result_is_synthesised_in_call_order() -> None:
    call = assistant("", ("a", "search"), ("b", "read"))
    out = synthesize_missing_results([call, result("b"), user("q")])
    assert out == [
        call,
        ToolResultEntry(
            "a", "[Tool 'search' result was lost - no output available]", True, "search"
        ),
        result("b"),
        user("q"),
    ]


def test_the_folded_step_5_still_works() -> None:
    message = Message("assistant", (ToolCallPart("a", "search", "{}"),))
    [repaired] = synthesize_missing_tool_results([message])
    assert repaired.tool_calls[0].result == lost_result("search")
    assert lost_result("x") == ToolResult(
        "[Tool 'x' result was lost - no output available]", is_error=True
    )


# --- step 6: truncate_old_tool_results -----------------------------------------------


def test_old_long_results_are_cut() -> None:
    call_1, call_2 = assistant("", ("a", "search")), assistant("", ("b", "search"))
    entries: list[Entry] = [user("q1"), call_1, result("a", "x" * 801), user("q2"), call_2]
    entries += [result("b", "y" * 900)]
    out = truncate_old_tool_results(entries, max_chars=800)
    assert out[2] == result("a", "x" * 800 + "\n\n[... truncated for brevity]")
    assert out[5] == entries[5]  # the current turn is kept whole
    assert truncate_old_tool_results(out, max_chars=800) == out
    exact: list[Entry] = [call_1, result("a", "x" * 800), user("q")]
    assert truncate_old_tool_results(exact) == exact


def test_notes_do_not_move_the_boundary() -> None:
    entries: list[Entry] = [user("q"), assistant("", ("a", "s")), result("a", "x" * 900)]
    entries.append(user("[System note] it is 5pm"))
    assert truncate_old_tool_results(entries) == entries


# --- step 7: normalize_tool_call_ids -------------------------------------------------


def test_ids_become_provider_safe_on_both_sides() -> None:
    call = assistant("", ("admin:view sessions", "search"), ("call_ok-1", "read"))
    out = normalize_tool_call_ids([call, result("admin:view sessions"), result("call_ok-1")])
    assert [c.id for c in calls_of(out[0])] == ["call_admin_view_sessions", "call_ok-1"]
    assert out[1:] == [result("call_admin_view_sessions"), result("call_ok-1")]


def test_duplicate_ids_are_made_unique() -> None:
    entries: list[Entry] = [
        assistant("", ("x", "a"), ("x", "b")),
        result("x", "1"),
        result("x", "2"),
    ]
    entries += [assistant("", ("call_x", "c")), result("call_x", "3")]
    out = normalize_tool_call_ids(entries)
    assert [c.id for e in out for c in calls_of(e)] == ["call_x", "call_x_2", "call_x_3"]
    assert [e.call_id for e in out if isinstance(e, ToolResultEntry)] == [
        "call_x",
        "call_x_2",
        "call_x_3",
    ]


def test_repair_is_linear_in_calls_however_their_ids_and_names_repeat() -> None:
    """A request's history is the client's to write: 8 messages of 1,024 calls sharing
    one id (made unique by trying _2, _3 ... from the start for each call: 6.5 s on the
    event loop, quadratic), or with names no provider takes, or with long unsafe ids,
    all repair in time linear in the calls: four times the calls cost about four times
    as much, not sixteen."""
    results = ToolResult("r")
    kinds: list[Callable[[int], list[ToolCallPart]]] = [
        lambda n: [ToolCallPart("x", "f", "{}", results) for _ in range(n)],
        lambda n: [ToolCallPart(f"c{i}", "!", "{}", results) for i in range(n)],
        lambda n: [ToolCallPart("é" * 50 + str(i % 7), "f", "{}") for i in range(n)],
    ]

    def history(calls: list[ToolCallPart]) -> list[Message]:
        return [user("q"), *(Message("assistant", tuple(calls)) for _ in range(8)), user("r")]

    def repair(messages: list[Message]) -> list[Message]:
        return repair_messages(
            messages, context_tokens=None, settings=RepairSettings(), rules=OPENAI_RULES
        )

    for calls in kinds:
        repaired = repair(history(calls(1024)))
        ids = [c.id for m in repaired for c in m.tool_calls]
        assert len(ids) == len(set(ids))
        grew = growth(lambda n, calls=calls: history(calls(n)), repair, 256)
        assert grew < 8, f"{calls(1)[0]}: 4x the calls took {grew:.1f}x as long"


def test_long_ids_are_shortened_per_provider() -> None:
    raw = "toolu_" + "A" * 60
    out = normalize_tool_call_ids([assistant("", (raw, "s")), result(raw)], rules=OPENAI_RULES)
    new_id = calls_of(out[0])[0].id
    assert len(new_id) == 40
    assert new_id.startswith("call_toolu_AAA")
    assert out[1] == result(new_id)
    out = normalize_tool_call_ids([assistant("", (raw, "s"))], rules=ANTHROPIC_RULES)
    assert len(calls_of(out[0])[0].id) == 64
    assert normalize_tool_call_ids(out, rules=ANTHROPIC_RULES) == out


# --- the whole pipeline ----------------------------------------------------------------


def test_a_clean_history_is_left_alone() -> None:
    history: list[Entry] = [system("rules"), user("q"), assistant("", ("call_1", "search"))]
    history += [result("call_1"), assistant("done"), user("thanks")]
    assert run(history) == history
    assert run(history, ANTHROPIC_RULES) == history


def test_repair_messages_on_a_folded_history() -> None:
    history = [
        user("q"),
        Message("assistant", (ToolCallPart("weird:id", "search", "{}"),)),
        user("again"),
    ]
    out = repair_messages(history, context_tokens=None, settings=DEFAULTS, rules=OPENAI_RULES)
    assert out == [
        user("q"),
        Message(
            "assistant",
            (ToolCallPart("call_weird_id", "search", "{}", lost_result("search")),),
        ),
        user("again"),
    ]


# --- properties ------------------------------------------------------------------------

IDS = ["call_1", "call_2", "toolu_01AbC", "id:with:colons", "a b", "", "ünï", "x" * 70, "dup"]
NAMES = ["search", "read_file", "mcp__fs__ls"] * 4 + ["bad.name", ""]
SHORT = st.sampled_from(["", " ", "hi", "line one\nline two", "中文文本", "  padded  ", "ok"])
TEXTS = st.one_of(SHORT, st.text(alphabet="ab c\n中é", max_size=20))
LONG = st.builds(lambda s, n: s * n, st.sampled_from(["abc ", "长"]), st.integers(210, 400))
CONTENTS = st.one_of(TEXTS, TEXTS, LONG)

calls = st.builds(
    ToolCallPart,
    id=st.sampled_from(IDS),
    name=st.sampled_from(NAMES),
    arguments=st.sampled_from(["{}", '{"q": 1}', "not json"]),
)
assistant_parts = st.one_of(
    st.builds(TextPart, TEXTS),
    calls,
    calls,
    st.builds(ReasoningPart, TEXTS, st.sampled_from([None, "sig"])),
)
users = st.builds(
    lambda text, image: Message(
        "user", (TextPart(text),) + ((ImagePart("https://example.com/a.png"),) if image else ())
    ),
    TEXTS,
    st.booleans(),
)
systems = st.builds(system, TEXTS)
assistants = st.builds(
    lambda parts: Message("assistant", tuple(parts)), st.lists(assistant_parts, max_size=4)
)
stray_results = st.builds(
    ToolResultEntry,
    st.sampled_from(IDS),
    CONTENTS,
    st.booleans(),
    st.sampled_from([None, "search"]),
)


@st.composite
def messy_histories(draw: st.DrawFn) -> list[Entry]:
    """Turns whose results are missing, doubled or shuffled, stray results, system
    messages anywhere, then a few entries moved far from where they were."""
    entries: list[Entry] = []
    kinds = st.sampled_from(["user", "user", "system", "assistant", "turn", "turn", "result"])
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(kinds)
        if kind == "turn":
            message = draw(assistants.filter(lambda m: bool(m.tool_calls)))
            answers = [
                ToolResultEntry(c.id, draw(CONTENTS), draw(st.booleans()), c.name)
                for c in message.tool_calls
                for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2])))
            ]
            entries += [message, *draw(st.permutations(answers))]
        else:
            strategy: dict[str, st.SearchStrategy[Entry]] = {
                "user": users,
                "system": systems,
                "assistant": assistants,
            }
            entries.append(draw(strategy.get(kind, stray_results)))
    for _ in range(draw(st.integers(0, 3))):
        if len(entries) > 1:
            source = draw(st.integers(0, len(entries) - 1))
            entries.insert(draw(st.integers(0, len(entries) - 1)), entries.pop(source))
    return entries


windows = st.one_of(st.none(), st.integers(1, 3000))
both_rules = st.sampled_from([OPENAI_RULES, ANTHROPIC_RULES])


def real_users(entries: Sequence[Entry]) -> list[Message]:
    return [
        e
        for e in entries
        if isinstance(e, Message) and e.role == "user" and not is_note(e) and e.text != CONTINUES
    ]


def assert_every_call_answered_once(entries: Sequence[Entry]) -> None:
    index = 0
    while index < len(entries):
        entry = entries[index]
        assert not isinstance(entry, ToolResultEntry), f"stray result at {index}"
        end = block_end(entries, index)
        answers = [e.call_id for e in entries[index + 1 : end] if isinstance(e, ToolResultEntry)]
        assert answers == [c.id for c in calls_of(entry)], f"block after {index}"
        index = end


@settings(max_examples=200, deadline=None)
@given(messy_histories(), windows, both_rules)
def test_every_call_is_answered_exactly_once(
    history: list[Entry], window: int | None, rules: ProviderRules
) -> None:
    repaired = repair(history, context_tokens=window, settings=DEFAULTS, rules=rules)
    assert_every_call_answered_once(repaired)
    fold(repaired)  # the flat result folds back without error


@settings(max_examples=200, deadline=None)
@given(messy_histories(), windows, both_rules)
def test_repair_is_idempotent(
    history: list[Entry], window: int | None, rules: ProviderRules
) -> None:
    once = repair(history, context_tokens=window, settings=DEFAULTS, rules=rules)
    assert repair(once, context_tokens=window, settings=DEFAULTS, rules=rules) == once


@settings(max_examples=200, deadline=None)
@given(messy_histories(), both_rules)
def test_user_messages_and_their_order_survive(history: list[Entry], rules: ProviderRules) -> None:
    repaired = repair(history, context_tokens=None, settings=DEFAULTS, rules=rules)
    assert real_users(repaired) == real_users(history)


@settings(max_examples=200, deadline=None)
@given(messy_histories(), st.integers(1, 2000), both_rules)
def test_trimming_keeps_the_newest_user_messages(
    history: list[Entry], window: int, rules: ProviderRules
) -> None:
    before = real_users(history)
    after = real_users(repair(history, context_tokens=window, settings=DEFAULTS, rules=rules))
    assert after == before[len(before) - len(after) :]
    assert bool(after) == bool(before)


@settings(max_examples=200, deadline=None)
@given(messy_histories(), windows)
def test_the_repaired_history_is_valid_on_the_wire(
    history: list[Entry], window: int | None
) -> None:
    assume(history)  # an empty request never reaches a provider
    for_openai = repair(history, context_tokens=window, settings=DEFAULTS, rules=OPENAI_RULES)
    validate_openai(to_openai_messages(tuple(fold(for_openai))))
    for_anthropic = repair(history, context_tokens=window, settings=DEFAULTS, rules=ANTHROPIC_RULES)
    folded = tuple(fold(for_anthropic))
    validate_openai(to_openai_messages(folded))  # the strict rules suit OpenAI too
    validate_anthropic(*to_anthropic_messages(folded))


def test_the_validators_reject_what_the_providers_reject() -> None:
    with pytest.raises(WireError, match="unanswered"):
        validate_openai([{"role": "assistant", "content": None, "tool_calls": [_call("a")]}])
    with pytest.raises(WireError, match="not after tool_calls"):
        validate_openai([{"role": "user", "content": "q"}, _tool("a")])
    with pytest.raises(WireError, match="answers no open call"):
        validate_openai(
            [{"role": "assistant", "content": None, "tool_calls": [_call("a")]}, _tool("b")]
        )
    with pytest.raises(WireError, match="id"):
        validate_openai([{"role": "assistant", "content": None, "tool_calls": [_call("a:b")]}])
    with pytest.raises(WireError, match="first message"):
        validate_anthropic("", [{"role": "assistant", "content": [_text("hi")]}])
    with pytest.raises(WireError, match="alternate"):
        validate_anthropic("", [{"role": "user", "content": [_text("a")]}] * 2)
    with pytest.raises(WireError, match="text"):
        validate_anthropic("", [{"role": "user", "content": [_text(" ")]}])
    use = {"type": "tool_use", "id": "a", "name": "s", "input": {}}
    answer = {"type": "tool_result", "tool_use_id": "a", "content": "ok"}
    with pytest.raises(WireError, match="not first"):
        validate_anthropic(
            "",
            [
                {"role": "user", "content": [_text("q")]},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [_text("x"), answer]},
            ],
        )
    with pytest.raises(WireError, match="results"):
        validate_anthropic(
            "",
            [
                {"role": "user", "content": [_text("q")]},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [_text("x")]},
            ],
        )


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "s", "arguments": "{}"}}


def _tool(call_id: str) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


@st.composite
def clean_histories(draw: st.DrawFn) -> list[Message]:
    """Valid folded histories: what the agent loop usually holds."""
    history = [system("rules")] if draw(st.booleans()) else []
    for turn in range(draw(st.integers(1, 5))):
        history.append(user(draw(st.sampled_from(["q", "中文 question", "a\nb"]))))
        parts: list[Part] = []
        for step in range(draw(st.integers(0, 2))):
            parts.append(TextPart(draw(st.sampled_from(["", "thinking aloud", "长"]))))
            answer = ToolResult(draw(st.sampled_from(["", "ok", "x" * 100])), draw(st.booleans()))
            parts.append(
                ToolCallPart(f"call_{turn}_{step}", draw(st.sampled_from(NAMES[:3])), "{}", answer)
            )
        parts.append(TextPart(draw(st.sampled_from(["done", "好的"]))))
        history.append(Message("assistant", tuple(parts)))
    return history


@settings(max_examples=200, deadline=None)
@given(clean_histories(), both_rules)
def test_a_valid_folded_history_round_trips_unchanged(
    history: list[Message], rules: ProviderRules
) -> None:
    assert fold(flatten(history)) == history
    repaired = repair_messages(history, context_tokens=None, settings=DEFAULTS, rules=rules)
    assert repaired == history
