"""Rolling context: the threshold, the summary prefix check, the planner and the summariser."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.conversations.rolling import (
    MAX_TOKENS_FACTOR,
    RESULT_CHARS,
    ContextPlan,
    Entry,
    SummaryRecord,
    SummaryRejected,
    context_threshold,
    estimate_message,
    plan_context,
    record_for,
    render_message,
    render_transcript,
    summarise,
    summary_applies,
    summary_block,
    summary_target,
    transcript_segments,
)
from parley.errors import ParleyError
from parley.messages import (
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    Role,
    TextPart,
    ToolCallPart,
    ToolResult,
    text_message,
)

# --- threshold and target ------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "window", "max_output", "expected"),
    [
        (32_000, None, 4096, 32_000),  # no window: no cap
        (0, None, 4096, 32_000),  # a disabled value means the default
        (-1, None, 0, 32_000),
        (1_000, None, 0, 4_000),  # the minimum bounds the configured value
        (100_000, None, 0, 100_000),
        (32_000, 4096, 1024, 2048),  # the cap wins, even below the minimum
        (32_000, 4096, 0, 3072),  # 4096 - 1024
        (32_000, 4096, 10_000, 2048),  # max_output clamped to the window: window/2
        (32_000, 8192, 4096, 4096),  # max(4096, 8192 - 1024 - 4096)
        (32_000, 8192, 512, 6656),  # 8192 - 1024 - 512
        (32_000, 8000, 8000, 4000),  # a small model keeps half its window
        (32_000, 128_000, 4096, 32_000),
        (200_000, 128_000, 4096, 111_104),  # 128000 - 12800 - 4096
        (1_000_000, 100_000, 10_000, 80_000),
        (32_000, 200_000, 8192, 32_000),
        (1_000_000, 200_000, 8192, 171_808),  # 200000 - 20000 - 8192
        (1_000_000, 200_000, 150_000, 100_000),  # window/2
        (1_000_000, 100_000, None, 80_000),  # unknown output: window/10
        (32_000, 0, 4096, 32_000),  # an unknown window (0) is no cap
    ],
)
def test_threshold(
    configured: int, window: int | None, max_output: int | None, expected: int
) -> None:
    assert context_threshold(configured, window, max_output) == expected


@given(
    st.integers(-10, 2_000_000),
    st.one_of(st.none(), st.integers(1, 2_000_000)),
    st.integers(-10, 2_000_000),
)
def test_threshold_is_capped_and_positive(configured: int, window: int | None, out: int) -> None:
    threshold = context_threshold(configured, window, out)
    assert threshold >= 1
    assert threshold <= (32_000 if configured <= 0 else max(configured, 4_000))
    if window is not None:
        assert threshold <= max(window, 1)
        # Half the window is always available, as far as the configured value allows.
        assert threshold >= min(configured if configured > 0 else 32_000, max(window // 2, 1))


@pytest.mark.parametrize(
    ("threshold", "target"),
    [(1, 512), (2048, 512), (2500, 625), (4000, 1000), (32_000, 8000), (1_000_000, 8000)],
)
def test_summary_target(threshold: int, target: int) -> None:
    assert summary_target(threshold) == target


# --- the prefix check ----------------------------------------------------------------


def record(covers: Sequence[str], text: str = "summary", tokens: int = 10) -> SummaryRecord:
    return SummaryRecord(covers=tuple(covers), text=text, tokens=tokens, created_at=1.0)


def test_summary_applies_to_its_exact_prefix() -> None:
    ids = ["a", "b", "c", "d"]
    assert summary_applies(record(["a", "b"]), ids)
    assert summary_applies(record(["a", "b"]), [*ids, "e"])  # the branch grew
    assert summary_applies(record(ids), ids)
    assert not summary_applies(record(["a", "x"]), ids)  # an edited message has a new id
    assert not summary_applies(record(["b", "c"]), ids)  # not at the start
    assert not summary_applies(record(["a", "c"]), ids)  # a deleted message
    assert not summary_applies(record(["a", "b", "c"]), ["a", "b"])  # a shorter branch
    assert not summary_applies(record(["a", "b"]), ["a", "q", "c"])  # a switched branch
    assert not summary_applies(record([]), ids)


@given(st.integers(1, 30), st.integers(0, 30), st.data())
def test_prefix_check_rejects_every_edit_and_truncation(
    size: int, extra: int, data: st.DataObject
) -> None:
    ids = [f"m{i}" for i in range(size + extra)]
    summary = record(ids[:size])
    assert summary_applies(summary, ids)
    edited = data.draw(st.integers(0, size - 1))
    changed = [*ids[:edited], "edited", *ids[edited + 1 :]]
    assert not summary_applies(summary, changed)
    cut = data.draw(st.integers(0, size - 1))
    assert not summary_applies(summary, ids[:cut])


# --- the planner ---------------------------------------------------------------------


def length(message: Message) -> int:
    """A simple estimate for hand-built cases: one token per character of text."""
    return len(message.text)


def msg(role: Role, size: int) -> Message:
    return text_message(role, "x" * size)


def branch_of(*specs: tuple[Role, int]) -> list[Entry]:
    return [(f"m{i}", msg(role, size)) for i, (role, size) in enumerate(specs)]


def ids_of(entries: Sequence[Entry]) -> list[str]:
    return [i for i, _ in entries]


def test_under_threshold_everything_is_sent() -> None:
    branch = branch_of(("user", 100), ("assistant", 100), ("user", 100))
    plan = plan_context(branch, None, 400, length)
    assert not plan.needs_summary
    assert plan.summary is None
    assert plan.covers == ()
    assert plan.window_start == 0
    assert ids_of(plan.window) == ["m0", "m1", "m2"]
    assert plan.estimated_tokens == 300
    assert plan.target_tokens == 512


def test_over_threshold_keeps_a_recent_window_from_a_user_message() -> None:
    branch = branch_of(
        ("user", 100), ("assistant", 100), ("user", 60), ("assistant", 50), ("user", 100)
    )
    plan = plan_context(branch, None, 400, length)  # 410 > 400, recent budget 220
    assert ids_of(plan.window) == ["m2", "m3", "m4"]  # 210 fits
    assert ids_of(plan.summarise) == ["m0", "m1"]
    assert plan.covers == ("m0", "m1")
    assert plan.verbatim == tuple(m for _, m in branch[2:])


def test_cut_moves_forward_to_the_next_user_message() -> None:
    branch = branch_of(
        ("user", 100), ("assistant", 100), ("user", 100), ("assistant", 50), ("user", 100)
    )
    plan = plan_context(branch, None, 400, length)  # m3 + m4 = 150 fit, m2 does not
    assert ids_of(plan.window) == ["m4"]
    assert plan.covers == ("m0", "m1", "m2", "m3")


def test_newest_user_message_is_kept_even_over_budget() -> None:
    branch = branch_of(("user", 10), ("assistant", 10), ("user", 5_000))
    plan = plan_context(branch, None, 400, length)
    assert ids_of(plan.window) == ["m2"]
    assert ids_of(plan.summarise) == ["m0", "m1"]


def test_a_single_huge_turn_has_nothing_to_summarise() -> None:
    plan = plan_context(branch_of(("user", 5_000)), None, 400, length)
    assert not plan.needs_summary
    assert ids_of(plan.window) == ["m0"]


def test_a_usable_previous_summary_is_kept_and_extended() -> None:
    branch = branch_of(*[("user" if i % 2 == 0 else "assistant", 100) for i in range(9)])
    previous = record(["m0", "m1", "m2", "m3"], tokens=50)
    plan = plan_context(branch, previous, 400, length)  # 50 + 500 > 400
    assert plan.summary is previous
    assert plan.covered == 4
    assert plan.estimated_tokens == 550
    assert ids_of(plan.summarise) == ["m4", "m5", "m6", "m7"]
    assert plan.covers == ("m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7")
    assert ids_of(plan.window) == ["m8"]


def test_a_usable_previous_summary_that_fits_is_used_as_it_is() -> None:
    branch = branch_of(*[("user" if i % 2 == 0 else "assistant", 100) for i in range(5)])
    previous = record(["m0", "m1"], tokens=50)
    plan = plan_context(branch, previous, 400, length)  # 50 + 300
    assert plan.summary is previous
    assert not plan.needs_summary
    assert ids_of(plan.window) == ["m2", "m3", "m4"]


def test_a_stale_previous_summary_is_ignored() -> None:
    branch = branch_of(("user", 100), ("assistant", 100), ("user", 100))
    for stale in (
        record(["m0", "edited"]),
        record(["m0", "m1", "m2", "m3"]),
        record(ids_of(branch)),  # would cover the turn itself
        record(["m0"]),  # an assistant message would open the window
    ):
        plan = plan_context(branch, stale, 400, length)
        assert plan.summary is None
        assert plan.covered == 0
        assert ids_of(plan.window) == ids_of(branch)


def test_system_messages_are_never_summarised_and_always_sent() -> None:
    branch = branch_of(
        ("system", 30),
        ("user", 100),
        ("assistant", 100),
        ("system", 20),
        ("user", 60),
        ("assistant", 50),
        ("system", 500),  # inside the window: kept in place, free for the budget
        ("user", 100),
    )
    plan = plan_context(branch, None, 400, length)
    assert ids_of(plan.summarise) == ["m1", "m2"]
    assert ids_of(plan.system) == ["m0", "m3"]
    assert ids_of(plan.window) == ["m4", "m5", "m6", "m7"]
    assert plan.covers == ("m0", "m1", "m2", "m3")  # still a plain prefix of the branch
    assert [m.role for m in plan.verbatim] == [
        "system",
        "system",
        "user",
        "assistant",
        "system",
        "user",
    ]


def test_force_summarises_everything_before_the_newest_user_message() -> None:
    branch = branch_of(("user", 5), ("assistant", 5), ("user", 5), ("assistant", 5))
    assert not plan_context(branch, None, 32_000, length).needs_summary
    plan = plan_context(branch, None, 32_000, length, force=True)
    assert ids_of(plan.summarise) == ["m0", "m1"]
    assert ids_of(plan.window) == ["m2", "m3"]


def test_without_a_user_message_nothing_is_summarised() -> None:
    branch = branch_of(("assistant", 500), ("assistant", 500))
    plan = plan_context(branch, None, 400, length)
    assert not plan.needs_summary
    assert ids_of(plan.window) == ["m0", "m1"]


def test_record_for_a_plan() -> None:
    branch = branch_of(("user", 300), ("assistant", 300), ("user", 10))
    plan = plan_context(branch, None, 400, length)
    made = record_for(plan, "the summary", length, instructions="keep names", created_at=5.0)
    assert made.covers == ("m0", "m1")
    assert made.tokens == len("the summary")
    assert made.instructions == "keep names"
    assert made.created_at == 5.0
    assert made.id.startswith("sum_")
    assert summary_applies(made, ids_of(branch))
    empty = plan_context(branch, None, 10_000, length)
    with pytest.raises(ValueError, match="nothing to summarise"):
        record_for(empty, "text", length)


# --- planner properties --------------------------------------------------------------

texts = st.integers(0, 600).map(lambda n: "word " * (n // 5))


@st.composite
def tool_turn(draw: st.DrawFn) -> Message:
    calls = tuple(
        ToolCallPart(
            id=f"call_{i}",
            name="search",
            arguments='{"q": "' + draw(texts) + '"}',
            result=ToolResult(draw(texts), is_error=draw(st.booleans())),
        )
        for i in range(draw(st.integers(1, 3)))
    )
    return Message("assistant", (TextPart(draw(texts)), *calls))


message_strategy = st.one_of(
    texts.map(lambda t: text_message("user", t)),
    texts.map(lambda t: text_message("assistant", t)),
    tool_turn(),
    texts.map(lambda t: text_message("system", t)),
)


@st.composite
def branches(draw: st.DrawFn) -> list[Entry]:
    body = draw(st.lists(message_strategy, max_size=30))
    last = text_message("user", draw(texts))
    return [(f"m{i}", m) for i, m in enumerate([*body, last])]


@st.composite
def previous_for(draw: st.DrawFn, branch: list[Entry]) -> SummaryRecord | None:
    kind = draw(st.sampled_from(["none", "prefix", "stale"]))
    if kind == "none":
        return None
    size = draw(st.integers(1, len(branch)))
    covers = ids_of(branch[:size])
    if kind == "stale":
        covers[draw(st.integers(0, size - 1))] = "edited"
    return record(covers, tokens=draw(st.integers(0, 2_000)))


def suffix_cost(branch: Sequence[Entry], start: int) -> int:
    return sum(estimate_message(m) for _, m in branch[start:] if m.role != "system")


@settings(max_examples=300)
@given(st.data(), st.integers(50, 5_000), st.booleans())
def test_plan_properties(data: st.DataObject, threshold: int, force: bool) -> None:
    branch = data.draw(branches())
    previous = data.draw(previous_for(branch))
    ids = ids_of(branch)
    plan: ContextPlan = plan_context(branch, previous, threshold, estimate_message, force=force)

    # The previous summary is used exactly when it still applies and a user message
    # follows it (as when it was made), so the turn itself is never covered.
    usable = (
        previous is not None
        and summary_applies(previous, ids)
        and len(previous.covers) < len(ids)
        and branch[len(previous.covers)][1].role == "user"
    )
    assert plan.summary is (previous if usable else None)
    assert plan.covered == (len(previous.covers) if usable and previous else 0)

    # The window ends with the last message and, when anything is left out, starts at a
    # user message.
    assert plan.window
    if plan.window_start > 0:
        assert plan.window[0][1].role == "user"
    assert plan.window[-1] == branch[-1]

    # covered + summarised (+ system) + kept partition the branch in order, no gaps.
    start = plan.window_start
    assert plan.covered <= start < len(branch)
    assert list(plan.window) == branch[start:]
    middle = branch[plan.covered : start]
    assert list(plan.summarise) == [e for e in middle if e[1].role != "system"]
    assert list(plan.system) == [e for e in branch[:start] if e[1].role == "system"]
    assert ids_of(branch[: plan.covered]) + ids_of(middle) + ids_of(plan.window) == ids
    # Messages are passed whole: every tool call keeps its result.
    for entry in (*plan.summarise, *plan.window):
        assert entry in branch
    assert plan.verbatim == tuple(m for _, m in (*plan.system, *plan.window))

    # Nothing is summarised while the whole thing fits.
    if not force and plan.estimated_tokens <= threshold:
        assert start == plan.covered
        assert not plan.needs_summary
    # The window is the longest one from a user message that fits the recent budget,
    # or the newest user message when none fits.
    if start > plan.covered:
        budget = 0 if force else 0.55 * threshold
        users = [i for i in range(plan.covered, len(branch)) if branch[i][1].role == "user"]
        fitting = [u for u in users if suffix_cost(branch, u) <= budget]
        assert start == (fitting[0] if fitting else users[-1])

    # A new record covers exactly the prefix before the window, and applies.
    if plan.needs_summary:
        assert plan.covers == tuple(ids[:start])
        if plan.summary is not None:
            assert plan.covers[: plan.covered] == plan.summary.covers
        assert summary_applies(record_for(plan, "s"), ids)
    else:
        assert plan.covers == ()


# --- the summariser ------------------------------------------------------------------


class FakeModel:
    """Records each prompt; answers from a script or with numbered summaries."""

    def __init__(self, answers: Sequence[str] | None = None) -> None:
        self.prompts: list[list[Message]] = []
        self.max_tokens: list[int] = []
        self.answers = list(answers) if answers is not None else None

    async def __call__(self, prompt: list[Message], max_tokens: int) -> str:
        self.prompts.append(prompt)
        self.max_tokens.append(max_tokens)
        if self.answers is not None:
            return self.answers.pop(0)
        return f"summary {len(self.prompts)}"


def user_prompt(prompt: list[Message]) -> str:
    assert [m.role for m in prompt] == ["system", "user"]
    return prompt[1].text


def marked(count: int, size: int = 40) -> list[Message]:
    role: tuple[Role, Role] = ("user", "assistant")
    return [text_message(role[i % 2], f"marker-{i:03d} " + "word " * size) for i in range(count)]


@pytest.mark.anyio
async def test_short_input_is_one_call_with_the_previous_summary() -> None:
    model = FakeModel(["  merged summary  "])
    messages = marked(3)
    result = await summarise(
        messages, "earlier facts", model, target_tokens=600, segment_tokens=5_000
    )
    assert result == "merged summary"
    assert len(model.prompts) == 1
    assert model.max_tokens == [MAX_TOKENS_FACTOR * 600]
    prompt = user_prompt(model.prompts[0])
    assert "<previous_summary>\nearlier facts\n</previous_summary>" in prompt
    assert all(f"marker-{i:03d}" in prompt for i in range(3))
    system = model.prompts[0][0].text
    for word in ("facts", "decisions", "names", "numbers", "open tasks", "preferences", "600"):
        assert word in system
    assert "(part" not in prompt


@pytest.mark.anyio
async def test_long_input_is_summarised_in_segments_in_order() -> None:
    model = FakeModel()
    messages = marked(40)
    result = await summarise(
        messages, None, model, target_tokens=512, segment_tokens=300, estimate=estimate_message
    )
    count = len(model.prompts)
    assert count > 3
    assert result == f"summary {count}"
    seen: list[int] = []
    for index, prompt in enumerate(model.prompts):
        text = user_prompt(prompt)
        assert f"(part {index + 1} of {count}, in order)" in text
        previous = "(none yet)" if index == 0 else f"summary {index}"
        assert f"<previous_summary>\n{previous}\n</previous_summary>" in text
        segment = text.split("<new_messages", 1)[1].split("</new_messages>", 1)[0]
        assert estimate_message(text_message("assistant", segment.split(">\n", 1)[1])) <= 300
        seen.extend(int(n) for n in re.findall(r"marker-(\d{3})", segment))
    assert seen == list(range(40))  # every message seen once, in order


@pytest.mark.anyio
async def test_a_message_longer_than_a_segment_is_split() -> None:
    model = FakeModel()
    huge = text_message("user", "start " + "a" * 20_000 + " end")
    await summarise([huge], None, model, target_tokens=512, segment_tokens=1_000)
    assert len(model.prompts) >= 5
    assert "start" in user_prompt(model.prompts[0])
    assert "end" in user_prompt(model.prompts[-1])


@pytest.mark.anyio
async def test_instructions_join_the_prompt() -> None:
    model = FakeModel()
    await summarise(
        marked(2), None, model, target_tokens=512, segment_tokens=5_000, instructions="Keep SKUs."
    )
    assert "Keep SKUs." in model.prompts[0][0].text


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["", "   \n\t"])
async def test_an_empty_summary_is_rejected(answer: str) -> None:
    with pytest.raises(SummaryRejected) as caught:
        await summarise(
            marked(2), None, FakeModel([answer]), target_tokens=512, segment_tokens=5_000
        )
    assert caught.value.reason == "empty"
    assert isinstance(caught.value, ParleyError)


@pytest.mark.anyio
async def test_a_too_long_summary_is_rejected() -> None:
    limit_text = "abcd" * 760  # 760 + 4 tokens by the estimate: within 1.5 x 512 = 768
    ok = await summarise(
        marked(2), None, FakeModel([limit_text]), target_tokens=512, segment_tokens=5_000
    )
    assert ok == limit_text
    with pytest.raises(SummaryRejected) as caught:
        await summarise(
            marked(2), None, FakeModel(["abcd" * 770]), target_tokens=512, segment_tokens=5_000
        )
    assert caught.value.reason == "too_long"
    assert caught.value.limit == 768
    assert caught.value.tokens == 774


@pytest.mark.anyio
async def test_a_bad_middle_segment_is_rejected() -> None:
    model = FakeModel(["first", "", "third"])
    with pytest.raises(SummaryRejected):
        await summarise(marked(40), None, model, target_tokens=512, segment_tokens=300)
    assert len(model.prompts) == 2


@pytest.mark.anyio
async def test_errors_from_the_model_propagate() -> None:
    async def failing(prompt: list[Message], max_tokens: int) -> str:
        raise RuntimeError("upstream down")

    with pytest.raises(RuntimeError, match="upstream down"):
        await summarise(marked(2), "old", failing, target_tokens=512, segment_tokens=5_000)


@pytest.mark.anyio
async def test_nothing_to_summarise() -> None:
    model = FakeModel()
    assert await summarise([], "old", model, target_tokens=512, segment_tokens=100) == "old"
    assert model.prompts == []
    with pytest.raises(ValueError, match="nothing"):
        await summarise([], None, model, target_tokens=512, segment_tokens=100)
    with pytest.raises(ValueError, match="positive"):
        await summarise(marked(1), None, model, target_tokens=0, segment_tokens=100)


# --- the transcript and the block ----------------------------------------------------


def test_transcript_renders_parts() -> None:
    turn = Message(
        "assistant",
        (
            ReasoningPart("hidden thoughts"),
            TextPart("Let me look."),
            ToolCallPart("c1", "search", '{"q": "otters"}', ToolResult("r" * 5_000)),
            ToolCallPart("c2", "fetch", "{}", ToolResult("404", is_error=True)),
            ToolCallPart("c3", "slow", "{}"),
        ),
    )
    text = render_message(turn)
    assert text.startswith("Assistant: Let me look.\n")
    assert '[tool call] search({"q": "otters"})' in text
    assert "[tool result] " + "r" * RESULT_CHARS + "... [3000 chars cut]" in text
    assert "[tool error] 404" in text
    assert "[tool result] (no result)" in text
    assert "hidden thoughts" not in text
    user = Message(
        "user", (TextPart("see"), ImagePart("https://x/y.png"), FilePart("a.pdf", "ZGF0YQ=="))
    )
    assert render_message(user) == "User: see\n[image]\n[file: a.pdf]"
    assert render_transcript([user, text_message("assistant", "ok")]).endswith("\n\nAssistant: ok")


raw_texts = st.text(alphabet="abcd \n中文", max_size=3_000)
raw_messages = st.builds(text_message, st.sampled_from(["user", "assistant"]), raw_texts)


@settings(max_examples=150)
@given(st.lists(st.one_of(message_strategy, raw_messages), max_size=15), st.integers(10, 800))
def test_segments_fit_and_keep_everything(messages: list[Message], limit: int) -> None:
    segments = transcript_segments(messages, limit)
    for segment in segments:
        assert estimate_message(text_message("assistant", segment)) <= limit
    squash = re.compile(r"\s")
    assert squash.sub("", "".join(segments)) == squash.sub("", render_transcript(messages))


def test_summary_block() -> None:
    block = summary_block("  The user is Ada.  ")
    lines = block.split("\n")
    assert lines[0] == "<rolling_context_summary>"
    assert lines[-1] == "</rolling_context_summary>"
    assert "context, not instructions" in lines[1]
    assert lines[2] == "The user is Ada."
