"""Output transformers: regex rules (stored, shown, and streamed), exact however a stream
is cut into chunks."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.messages import ImagePart, Message, TextPart
from parley.patterns import Budget
from parley.transforms.output import (
    DisplayRewriter,
    RegexRule,
    apply_rules,
    rewrite_parts,
    store_user_messages,
    turn_budget,
)
from tests.support.probe import longest_pause


def cut(text: str, points: list[int]) -> list[str]:
    bounds = [0, *sorted(p % (len(text) + 1) for p in points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def test_rules_pick_by_role_and_by_storage_or_display() -> None:
    rules = [
        RegexRule("secret", "[hidden]", name="hide"),
        RegexRule("cat", "dog", roles=frozenset({"user", "assistant"})),
        RegexRule("dog", "DOG", display_only=True),
        RegexRule("hi", "hello", roles=frozenset({"user"}), display_only=True),
    ]
    text = "hi cat secret"
    assert apply_rules(text, rules, "assistant", for_storage=True) == "hi dog [hidden]"
    assert apply_rules(text, rules, "user", for_storage=True) == "hi dog secret"
    assert apply_rules("hi dog", rules, "assistant", for_storage=False) == "hi DOG"
    assert apply_rules("hi dog", rules, "user", for_storage=False) == "hello dog"
    assert apply_rules(text, rules, "system", for_storage=True) == text


def test_rules_run_in_order_with_python_replacements() -> None:
    rules = [RegexRule(r"(\w+)@(\w+)", r"\2 at \1"), RegexRule(r"(?P<w>at)", r"[\g<w>]")]
    assert apply_rules("me@home", rules, "assistant", for_storage=True) == "home [at] me"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (dict(pattern="(", name="broken"), "regex rule 'broken': bad regular expression '('"),
        (dict(pattern="[a-"), "regex rule '[a-': bad regular expression"),
        (
            dict(pattern="(a)", replacement=r"\2", name="r"),
            r"regex rule 'r': bad replacement '\\2'",
        ),
        (dict(pattern="a", replacement=r"\g<x>", name="r"), "regex rule 'r': bad replacement"),
        (dict(pattern="a", roles=frozenset({"system"}), name="r"), "regex rule 'r': roles"),
        (dict(pattern="a", roles=frozenset(), name="r"), "regex rule 'r': roles"),
    ],
)
def test_a_bad_rule_is_refused_by_name(rule: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        RegexRule(**rule)  # type: ignore[arg-type]


def test_rewrite_parts_touches_only_text() -> None:
    image = ImagePart("https://example.com/a.png")
    rules = [RegexRule("a", "b")]
    parts = (TextPart("aa"), image, TextPart("ca"))
    assert rewrite_parts(parts, rules, "assistant", for_storage=True) == (
        TextPart("bb"),
        image,
        TextPart("cb"),
    )
    assert rewrite_parts(parts, rules, "assistant", for_storage=False) == parts


# --- streaming display rules ---------------------------------------------------------

PATTERNS = [
    "ab", "a|ab", r"a{1,3}b", "x{0,3}", r"\d{2,4}", r"(?m)^b", "c$", r"\bab\b",
    r"(?<=a)b", r"(?<!a)c", "a(?=b)", r"b(?!1)", r"(a)(b)?", r"(?P<n>ba)", "(?i)A",
    r"\n", "^a",
]  # fmt: skip
REPLACEMENTS = ["", "-", "XYZ", r"\g<0>\g<0>", "\n"]
GROUPED = {r"(a)(b)?": r"<\2\1>", r"(?P<n>ba)": r"[\g<n>]"}


@st.composite
def rule_lists(draw: st.DrawFn) -> list[RegexRule]:
    chosen = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3))
    return [
        RegexRule(
            p,
            GROUPED.get(p) or draw(st.sampled_from(REPLACEMENTS)),
            display_only=draw(st.booleans()),
        )
        for p in chosen
    ]


@settings(max_examples=600, deadline=None)
@given(
    rule_lists(),
    st.text(alphabet="abcxA12 \n", max_size=60),
    st.lists(st.integers(min_value=0), max_size=12),
    st.integers(min_value=6, max_value=12),
    st.booleans(),
)
def test_streamed_display_rules_equal_the_rules_on_the_whole_text(
    rules: list[RegexRule], text: str, points: list[int], max_chars: int, with_storage: bool
) -> None:
    rewriter = DisplayRewriter(rules, max_chars, with_storage_rules=with_storage)
    streamed = "".join(rewriter.feed(chunk) for chunk in cut(text, points)) + rewriter.finish()
    expected = text
    if with_storage:
        expected = apply_rules(expected, rules, "assistant", for_storage=True)
    assert streamed == apply_rules(expected, rules, "assistant", for_storage=False)
    # ready for another stream
    assert rewriter.feed(text) + rewriter.finish() == streamed


def test_display_rules_never_touch_storage_and_no_rules_cost_nothing() -> None:
    stored_only = DisplayRewriter([RegexRule("a", "b")])
    assert not stored_only
    assert stored_only.feed("aaa") == "aaa"
    assert stored_only.finish() == ""


def test_a_short_literal_holds_back_only_a_few_characters() -> None:
    rewriter = DisplayRewriter([RegexRule("foo", "bar", display_only=True)])
    assert rewriter.hold_chars == 5
    assert rewriter.feed("hello world f") == "hello wo"
    assert rewriter.feed("oo!") + rewriter.finish() == "rld bar!"


def test_a_look_ahead_holds_back_max_match_chars() -> None:
    rewriter = DisplayRewriter([RegexRule("a(?=b)", "", display_only=True)], max_match_chars=10)
    assert rewriter.hold_chars == 10


def test_a_match_longer_than_max_match_chars_may_be_cut_while_streaming() -> None:
    """The documented limit: ``\\d+`` over a run longer than the window."""
    rule = RegexRule(r"\d+", "#", display_only=True)
    assert apply_rules("12345678", [rule], "assistant", for_storage=False) == "#"
    rewriter = DisplayRewriter([rule], max_match_chars=4)
    streamed = "".join(rewriter.feed(c) for c in ["1234", "5", "678"]) + rewriter.finish()
    assert streamed == "##"


def test_max_match_chars_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_match_chars"):
        DisplayRewriter([], max_match_chars=0)


@pytest.mark.parametrize("chunks", [[], [""], ["aaaaaaaa", "xxx"], ["aaaaaaaaxxx"]])
def test_an_empty_match_at_the_very_end_is_kept(chunks: list[str]) -> None:
    rule = RegexRule("x{0,3}", "-", display_only=True)
    rewriter = DisplayRewriter([rule], max_match_chars=6)
    streamed = "".join(rewriter.feed(c) for c in chunks) + rewriter.finish()
    assert streamed == apply_rules("".join(chunks), [rule], "assistant", for_storage=False)


EVIL = RegexRule("(a|aa)+$", "x", roles=frozenset({"user", "assistant"}))
"""Cut short by its time limit on ``VICTIM``, however short the limit."""
VICTIM = "a" * 40 + "!"


def test_the_rules_of_many_parts_share_one_budget() -> None:
    """A time limit per text part let one message of 100 parts, each a catastrophic
    input for its rule, cost 100 x 100 ms of a frozen event loop (the stall hunt: 11.5 s).
    The rules of a request share one budget: what one part spent, the next has not."""
    parts = [TextPart(VICTIM)] * 30
    started = time.monotonic()
    assert rewrite_parts(parts, [EVIL], "user", for_storage=True) == tuple(parts)
    took = time.monotonic() - started
    assert took < 1.0, f"30 parts took {took:.1f} s"

    budget = Budget(0.05)
    started = time.monotonic()
    for _ in range(10):
        apply_rules(VICTIM, [EVIL], "user", for_storage=True, budget=budget)
        rewrite_parts(parts, [EVIL], "user", for_storage=True, budget=budget)
    assert time.monotonic() - started < 0.5
    assert budget.left == 0
    # spent: rules are skipped, even those that would have been quick
    cheap = RegexRule("a", "b", roles=frozenset({"user"}))
    assert apply_rules("a", [cheap], "user", for_storage=True, budget=budget) == "a"


def test_a_stream_keeps_its_rules_however_long_it_lasts() -> None:
    """The stream's limit is the time its rules take, not the time since it began: a
    reply streaming longer than 200 ms lost its display rules midway."""
    rewriter = DisplayRewriter([RegexRule("cat", "dog", display_only=True)])
    shown = rewriter.feed("a cat, ")
    time.sleep(0.3)
    shown += rewriter.feed("another cat, ") + rewriter.finish()
    assert shown == "a dog, another dog, "


def test_a_stream_out_of_time_passes_the_rest_as_it_is() -> None:
    budget = Budget(0.05)
    rewriter = DisplayRewriter([EVIL], with_storage_rules=True, budget=budget)
    shown = rewriter.feed(VICTIM) + rewriter.feed(" and more a") + rewriter.finish()
    assert shown == VICTIM + " and more a"
    assert budget.left == 0


@pytest.mark.anyio
async def test_user_messages_are_rewritten_newest_first_letting_the_loop_run() -> None:
    """The storage rules of a request's user messages ran in one go: 10 messages that
    each took a rule its whole 100 ms held the event loop 1 s. The turn's budget now
    bounds them all, and the loop runs between parts."""
    cheap = RegexRule("!", "?", roles=frozenset({"user"}))
    messages = [Message("user", (TextPart(VICTIM),)) for _ in range(10)]
    stored: list[Message] = []

    async def store() -> None:
        stored.extend(await store_user_messages(messages, [EVIL, cheap], turn_budget()))

    longest = await longest_pause(store())
    assert longest < 0.3, f"the event loop waited {longest:.2f} s"
    assert stored[-1].text == VICTIM.replace("!", "?")  # the newest had the time
    assert stored[0].text == VICTIM  # the oldest did not
