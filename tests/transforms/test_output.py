"""Output transformers: think tags split into reasoning, and regex rules (stored, shown,
and streamed), exact however a stream is cut into chunks."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.events import ReasoningDelta, TextDelta
from parley.messages import ImagePart, TextPart
from parley.transforms.output import (
    DisplayRewriter,
    RegexRule,
    ThinkDelta,
    ThinkTagSplitter,
    apply_rules,
    rewrite_parts,
    split_think_tags,
)

# --- think tags ----------------------------------------------------------------------

REFERENCE = re.compile(r"<(think|thinking)>(.*?)(?:</\1>|\Z)", re.IGNORECASE | re.DOTALL | re.ASCII)


def reference(text: str) -> tuple[str, str]:
    """The regex conversion: blocks to reasoning, whitespace after each tag dropped."""
    plain: list[str] = []
    reasoning: list[str] = []
    last, after_tag = 0, False
    for match in REFERENCE.finditer(text):
        segment = text[last : match.start()]
        plain.append(segment.lstrip() if after_tag else segment)
        reasoning.append(match[2].lstrip())
        last, after_tag = match.end(), True
    segment = text[last:]
    plain.append(segment.lstrip() if after_tag else segment)
    return "".join(plain), "".join(reasoning)


def run(chunks: list[str]) -> list[ThinkDelta]:
    splitter = ThinkTagSplitter()
    events = [e for chunk in chunks for e in splitter.feed(chunk)]
    return events + splitter.finish()


def merged(events: list[ThinkDelta]) -> list[tuple[str, str]]:
    """(kind, text) with neighbours of one kind joined."""
    out: list[tuple[str, str]] = []
    for event in events:
        assert event.text, "an empty event"
        if out and out[-1][0] == event.kind:
            out[-1] = (event.kind, out[-1][1] + event.text)
        else:
            out.append((event.kind, event.text))
    return out


def texts(events: list[ThinkDelta]) -> tuple[str, str]:
    return (
        "".join(e.text for e in events if isinstance(e, TextDelta)),
        "".join(e.text for e in events if isinstance(e, ReasoningDelta)),
    )


FRAGMENTS = [
    "<think>", "</think>", "<thinking>", "</thinking>", "<THINK>", "</Think>", "<ThInKiNg>",
    "</THINKING>", "<", "</", "<t", "<thin", "<think", "</think", "<thinkin", "<thinkx>",
    ">", "a", "hello", " ", "\n", "\n\n", "é", "\u212a", "<b>", "x<y",
]  # fmt: skip
think_texts = st.lists(st.sampled_from(FRAGMENTS), max_size=24).map("".join)


def cut(text: str, points: list[int]) -> list[str]:
    bounds = [0, *sorted(p % (len(text) + 1) for p in points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=500, deadline=None)
@given(think_texts, st.lists(st.integers(min_value=0), max_size=12))
def test_every_split_gives_what_the_whole_text_gives(text: str, points: list[int]) -> None:
    whole = run([text])
    pieces = run(cut(text, points))
    assert merged(pieces) == merged(whole)
    assert texts(pieces) == texts(whole) == reference(text)


@settings(max_examples=300, deadline=None)
@given(think_texts)
def test_one_character_at_a_time_matches_the_reference(text: str) -> None:
    assert texts(run(list(text))) == reference(text)


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=24))
def test_only_a_possible_tag_prefix_is_held_back(fragments: list[str]) -> None:
    splitter = ThinkTagSplitter()
    for fragment in fragments:
        splitter.feed(fragment)
        held = splitter.pending
        assert len(held) <= len("</thinking>") - 1
        if held:
            tags = (
                ("</think>", "</thinking>") if splitter.in_reasoning else ("<think>", "<thinking>")
            )
            assert any(tag.startswith(held.lower()) for tag in tags)


def test_a_block_becomes_reasoning_and_the_whitespace_after_it_goes() -> None:
    events = run(["<think>\nLet me see.\n</think>\n\nThe answer is 4."])
    assert events == [ReasoningDelta("Let me see.\n"), TextDelta("The answer is 4.")]


def test_a_tag_split_anywhere_is_still_a_tag() -> None:
    assert texts(run(["<th", "ink>plan</th", "INK>", "done"])) == ("done", "plan")
    assert texts(run(["a<", "thinking", ">b</thinking", ">c"])) == ("ac", "b")


def test_text_that_cannot_begin_a_tag_is_released_at_once() -> None:
    splitter = ThinkTagSplitter()
    assert splitter.feed("plain") == [TextDelta("plain")]
    assert splitter.feed("a < b and <tag> x<") == [TextDelta("a < b and <tag> x")]
    assert splitter.pending == "<"
    assert splitter.feed("p") == [TextDelta("<p")]
    assert splitter.feed("") == []


def test_feed_event_hands_back_an_unchanged_event() -> None:
    splitter = ThinkTagSplitter()
    event = TextDelta("plain")
    assert splitter.feed_event(event)[0] is event
    assert splitter.feed_event(TextDelta("")) == []
    assert splitter.feed_event(TextDelta("x<think>y")) == [TextDelta("x"), ReasoningDelta("y")]
    assert splitter.feed_event(TextDelta("z")) == [ReasoningDelta("z")]


def test_an_unclosed_block_ends_with_the_stream() -> None:
    splitter = ThinkTagSplitter()
    assert splitter.feed("<think>still going</thi") == [ReasoningDelta("still going")]
    assert splitter.in_reasoning
    assert splitter.finish() == [ReasoningDelta("</thi")]
    assert not splitter.in_reasoning
    assert splitter.feed("fresh") == [TextDelta("fresh")]


def test_closers_match_their_openers_and_stray_closers_are_text() -> None:
    assert split_think_tags("<thinking>a</think>b</thinking>c") == ("c", "a</think>b")
    assert split_think_tags("x</think>y") == ("x</think>y", "")
    assert split_think_tags("<think><think>a</think>b") == ("b", "<think>a")
    assert split_think_tags("<thin\u212a>a</think>") == ("<thin\u212a>a</think>", "")


# --- regex rules ---------------------------------------------------------------------


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
