"""The sensitive-content filter: rule files, whole-text redaction, stream redaction over
every way of splitting a text into chunks, requests replaced or rejected, and the
detection rows in a real audit log."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parley.errors import ConfigurationError
from parley.events import Done, Event, ReasoningDelta, TextDelta, ToolCallDelta, UsageEvent
from parley.identity import Caller
from parley.interceptors.builtins import sensitive as sensitive_module
from parley.interceptors.builtins.redaction import Redactor, Rule, StreamRedactor
from parley.interceptors.builtins.sensitive import ContentRejected, SensitiveFilter
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallInfo, Purpose, Services, TurnInfo
from parley.messages import ImagePart, Message, TextPart, Usage, text_message
from parley.patterns import Budget
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.settings import Settings
from parley.settings.interceptors import SensitiveSettings
from parley.store.audit import AuditLog
from tests.support.probe import longest_pause

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).parents[2] / "examples"
WORDS = ["bad", "badly", "敏感词", "secret"]
PHONE = r"\d{3}-\d{4}"
ALICE = Caller("alice-owner", "key_alice", "alice")


def make_filter(**options: Any) -> SensitiveFilter:
    values: dict[str, Any] = {"enabled": True, "words": WORDS, "patterns": [PHONE]}
    values["max_pattern_chars"] = 8
    return SensitiveFilter(SensitiveSettings.model_validate({**values, **options}))


REDACTOR = make_filter().redactor


def splits(text: str) -> Iterator[list[str]]:
    """Every way of cutting ``text`` into non-empty chunks (2^(n-1) of them)."""
    n = len(text)
    for mask in range(1 << max(n - 1, 0)):
        cuts = [0, *(i + 1 for i in range(n - 1) if mask >> i & 1), n]
        yield [text[a:b] for a, b in itertools.pairwise(cuts)]


def streamed(redactor: Redactor, chunks: Sequence[str]) -> list[str]:
    stream = StreamRedactor(redactor)
    return [stream.feed(chunk) for chunk in chunks] + [stream.flush()]


def assert_clean(pieces: Sequence[str]) -> None:
    """No word (in any case) and no phone number in any piece nor in them all joined."""
    for piece in [*pieces, "".join(pieces)]:
        for word in WORDS:
            assert word not in piece.lower()
        assert re.search(PHONE, piece) is None


# --- rules ------------------------------------------------------------------------------


def test_rule_files_skip_comments_and_blanks_and_name_their_lines(tmp_path: Path) -> None:
    words = tmp_path / "sensitive.txt"
    words.write_bytes("\ufeff# a comment\n\n  hunter2  \r\n# another\n机密\n".encode())
    patterns = tmp_path / "pii.txt"
    patterns.write_text("# phone numbers\n" + PHONE + "\n")
    sensitive = SensitiveFilter(
        SensitiveSettings(word_files=[words], pattern_files=[patterns], words=["extra"])
    )
    text, found = sensitive.redactor.redact("HUNTER2 and 机密 or extra, 555-1234")
    assert text == "*** and *** or ***, ***"
    assert [rule.id for rule in found] == [
        "word:sensitive.txt:3",
        "word:sensitive.txt:5",
        "word:1",
        "pattern:pii.txt:2",
    ]
    assert found[0].source == "word list sensitive.txt line 3"
    described = sensitive.describe()
    assert described == {
        "words": 3,
        "patterns": 1,
        "case_sensitive": False,
        "on_request": "replace",
        "redact_responses": True,
        "redact_tool_results": True,
    }
    assert "hunter2" not in repr(described)
    assert sensitive.name == "sensitive_filter"
    assert (sensitive.order, sensitive.fail_closed) == (210, True)


def test_the_example_word_list_loads() -> None:
    example = EXAMPLES / "sensitive-words.txt"
    sensitive = SensitiveFilter(SensitiveSettings(word_files=[example]))
    text, found = sensitive.redactor.redact("my password is Hunter2, 机密!")
    assert text == "my password is ***, ***!"
    assert all(rule.id.startswith("word:sensitive-words.txt:") for rule in found)


@pytest.mark.parametrize(
    ("content", "kind", "expected"),
    [
        (b"ok\n(unclosed\n", "pattern", r"pattern list p\.txt line 2: bad regular expression"),
        (b"a*\n", "pattern", r"line 1: the pattern matches empty text"),
        (b"(a)\\1\n", "pattern", r"line 1: numbered group references"),
        (b"(?i)x\n", "pattern", r"line 1: bad regular expression \(global flags"),
        (b"fine\n\xff\xfe\n", "word", r"word file .*p\.txt line 2 is not valid UTF-8"),
    ],
)
def test_a_bad_rule_file_names_the_file_and_line(
    tmp_path: Path, content: bytes, kind: str, expected: str
) -> None:
    path = tmp_path / "p.txt"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError, match=expected):
        SensitiveFilter(SensitiveSettings.model_validate({f"{kind}_files": [path]}))


def test_other_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read word file .*missing\.txt"):
        SensitiveFilter(SensitiveSettings(word_files=[tmp_path / "missing.txt"]))
    with pytest.raises(ConfigurationError, match="inline word 2 is empty"):
        SensitiveFilter(SensitiveSettings(words=["ok", ""]))
    with pytest.raises(ConfigurationError, match="inline pattern 1: bad regular expression"):
        SensitiveFilter(SensitiveSettings(patterns=["[a-"]))
    with pytest.raises(ConfigurationError, match="cannot be combined"):
        SensitiveFilter(SensitiveSettings(patterns=["(?P<n>a)", "(?P<n>b)"]))


# --- whole text -------------------------------------------------------------------------


def test_the_longest_word_wins_and_words_come_before_patterns() -> None:
    text, found = REDACTOR.redact("badly bad")
    assert text == "*** ***"
    assert [rule.id for rule in found] == ["word:2", "word:1"]
    both = Redactor([("555", Rule("word:1", "w"))], [(PHONE, Rule("pattern:1", "p"))])
    assert both.redact("555-1234") == ("***-1234", (Rule("word:1", "w"),))


def test_case_and_replacement_settings() -> None:
    assert REDACTOR.redact("BaDLY SeCrEt 敏感词!").text == "*** *** ***!"
    strict = make_filter(case_sensitive=True, replacement="[x]").redactor
    assert strict.redact("BAD bad Secret secret").text == "BAD [x] Secret [x]"


def test_patterns_see_the_text_before_a_chunk() -> None:
    redactor = Redactor(
        patterns=[(r"(?<=#)\w\w", Rule("pattern:1", "p")), (r"\bcat\b", Rule("pattern:2", "q"))],
        max_pattern_chars=5,
    )
    for text in ["#ab cat", "a#bc cats", "tomcat #cat"]:
        whole = redactor.redact(text).text
        for chunks in splits(text):
            assert "".join(streamed(redactor, chunks)) == whole, chunks


# --- streams ----------------------------------------------------------------------------

TEXTS = [
    "badly bad",
    "xBaDlyx",
    "abadbadlyb",
    "这是敏感词吗",
    "敏感敏感词词",
    "555-1234!",
    "1555-12345",
    "secretsecret",
    "sec ret bad",
]


@pytest.mark.parametrize("text", TEXTS)
def test_every_split_streams_exactly_the_whole_redaction(text: str) -> None:
    whole = REDACTOR.redact(text)
    assert whole.detections  # each text holds something to find
    for chunks in splits(text):
        pieces = streamed(REDACTOR, chunks)
        assert "".join(pieces) == whole.text, chunks
        assert_clean(pieces)


FRAGMENTS = ["bad", "ly", "b", "a", "d", "敏", "感词", "5", "555", "-", "1234", " ", "x", "SeC"]
FRAGMENTS += ["ret", "secret"]


@st.composite
def chunked(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = "".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=25)))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(text) - 1, 1)))) if len(text) > 1 else [])
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=400, deadline=None)
@given(chunked())
def test_random_texts_and_splits_stream_the_whole_redaction(case: tuple[str, list[str]]) -> None:
    text, chunks = case
    assert "".join(chunks) == text
    stream = StreamRedactor(REDACTOR)
    pieces = [stream.feed(chunk) for chunk in chunks] + [stream.flush()]
    whole = REDACTOR.redact(text)
    assert "".join(pieces) == whole.text
    assert sorted(r.id for r in stream.detections) == sorted(r.id for r in whole.detections)
    assert_clean(pieces)


def test_a_stream_holds_back_only_what_may_become_a_match() -> None:
    stream = StreamRedactor(REDACTOR)
    assert REDACTOR.hold_chars == 7  # max_pattern_chars 8 - 1 (words are shorter)
    assert stream.feed("hello world, ") == "hello "
    assert stream.held == "world, "
    assert stream.feed("bad") == "wor"
    assert stream.feed("ly, ok") == "ld, ***"  # "badly" is whole: the cut moves past it
    assert stream.flush() == ", ok"
    words_only = StreamRedactor(Redactor([("secret", Rule("word:1", "w"))]))
    assert words_only.feed("top secre") == "top "  # holds len("secret") - 1
    assert words_only.feed("t!") == "***"  # decided once the whole word is there
    assert words_only.flush() == "!"


def events_through(
    sensitive: SensitiveFilter, events: Sequence[Event], call: CallInfo | None = None
) -> list[Event]:
    """``events`` through the filter's stream hook, as the chain passes them."""
    call = call or make_call()
    out: list[Event] = []
    for event in events:
        result = sensitive.on_stream_event(event, call)
        if result is None:
            out.append(event)
        elif isinstance(result, list | tuple):
            out.extend(result)
        else:
            out.append(result)  # type: ignore[arg-type]
    return out


def joined(events: Sequence[Event], kind: type[TextDelta] | type[ReasoningDelta]) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


@pytest.mark.parametrize("text", ["badly 敏感词", "555-1234 bad"])
def test_the_hook_redacts_text_and_reasoning_in_separate_buffers(text: str) -> None:
    sensitive = make_filter()
    whole = REDACTOR.redact(text).text
    for chunks in splits(text):
        events: list[Event] = [ReasoningDelta(c) for c in chunks]
        events += [TextDelta(c) for c in chunks]
        events.append(Done("end_turn"))
        out = events_through(sensitive, events)
        assert joined(out, ReasoningDelta) == whole
        assert joined(out, TextDelta) == whole
        kinds = [e.kind for e in out]
        assert kinds == sorted(kinds, key=["reasoning", "text", "done"].index)  # order kept
        assert all(e.text for e in out if isinstance(e, TextDelta | ReasoningDelta))
        assert_clean([e.text for e in out if isinstance(e, TextDelta | ReasoningDelta)])


def test_held_text_is_released_before_a_tool_call_and_other_events_pass() -> None:
    usage = UsageEvent(Usage(1, 2))
    events: list[Event] = [TextDelta("say ba"), usage, TextDelta("d"), ToolCallDelta(0, "c1")]
    out = events_through(make_filter(), [*events, Done("tool_use")])
    assert out[0] is usage
    assert out[1:] == [TextDelta("say ***"), events[3], Done("tool_use")]


def test_a_redacted_thinking_block_loses_its_signature() -> None:
    clean = events_through(make_filter(), [ReasoningDelta("fine"), ReasoningDelta("", "sig")])
    assert clean == [ReasoningDelta("fine", "sig")]
    dirty = events_through(make_filter(), [ReasoningDelta("so bad"), ReasoningDelta("", "sig")])
    assert dirty == [ReasoningDelta("so ***")]


def test_redact_responses_off_passes_the_stream_unchanged() -> None:
    events: list[Event] = [TextDelta("ba"), TextDelta("d"), Done("end_turn")]
    assert events_through(make_filter(redact_responses=False), events) == events


# --- requests ---------------------------------------------------------------------------


def make_call(purpose: Purpose = "chat", attempt: int = 0) -> CallInfo:
    turn = TurnInfo(ALICE, "chat.completions", "conv_1", "msg_1")
    return CallInfo("model", "fast", turn, purpose=purpose, attempt=attempt)


def conversation(*texts: str) -> ModelRequest:
    """system, then user/assistant turns alternating; the last user has an image too."""
    messages = [text_message("system", "do not be bad")]
    for index, text in enumerate(texts):
        messages.append(text_message("user" if index % 2 == 0 else "assistant", text))
    last = messages[-1]
    if last.role == "user":
        messages[-1] = Message("user", (*last.parts, ImagePart("https://x/bad.png")))
    return ModelRequest("mock-model", tuple(messages))


async def test_replace_rewrites_user_text_only() -> None:
    sensitive = make_filter()
    request = conversation("a bad idea", "badly said", "call 555-1234, SECRET")
    changed = await sensitive.before_request(request, make_call())
    assert changed is not None
    assert [m.text for m in changed.messages] == [
        "do not be bad",
        "a *** idea",
        "badly said",
        "call ***, ***",
    ]
    assert changed.messages[-1].parts[1] == ImagePart("https://x/bad.png")
    assert await sensitive.before_request(conversation("all fine"), make_call()) is None


async def test_requests_are_checked_once_per_text() -> None:
    sensitive = make_filter()
    history = [f"message {i} bad" for i in range(50)]
    for _ in range(3):
        await sensitive.before_request(conversation(*history, "new"), make_call())
    remembered = sensitive._redact
    assert remembered.misses == len(history[::2]) + 1  # the user messages, each once
    assert remembered.hits == 2 * remembered.misses


async def test_reject_refuses_only_the_newest_user_message() -> None:
    sensitive = make_filter(on_request="reject")
    with pytest.raises(ContentRejected) as caught:
        await sensitive.before_request(conversation("hi", "hello", "my secret"), make_call())
    error = caught.value
    assert (error.status, error.type, error.code) == (
        400,
        "invalid_request_error",
        "content_rejected",
    )
    assert error.message == "the request contains blocked content (rule: inline word 4)"
    old = await sensitive.before_request(conversation("bad", "hm", "fine now"), make_call())
    assert old is not None
    assert [m.text for m in old.messages if m.role == "user"] == ["***", "fine now"]
    title = await sensitive.before_request(conversation("secret"), make_call("title"))
    assert title is not None  # the server's own calls are cleaned, never refused
    assert title.messages[-1].text == "***"


# --- detections -------------------------------------------------------------------------


async def run_chain(
    sensitive: SensitiveFilter, request: ModelRequest, reply: Sequence[Event], call: CallInfo
) -> list[Event]:
    async def upstream(_request: ModelRequest) -> AsyncGenerator[Event]:
        for event in reply:
            yield event

    chain = InterceptorChain([sensitive])
    return [event async for event in chain.stream(call, request, upstream)]


async def test_detections_are_recorded_per_rule_per_call(audit: AuditLog, tmp_path: Path) -> None:
    sensitive = make_filter()
    await sensitive.startup(Services(Settings(data_dir=tmp_path), PriceCatalog(), None, audit))
    reply: list[Event] = [ReasoningDelta("think b"), ReasoningDelta("ad")]
    reply += [TextDelta(c) for c in ["so ba", "d, bad", "ly bad ", "555-", "1234"]]
    reply.append(Done("end_turn"))
    out = await run_chain(
        sensitive, conversation("my secret", "ok", "secret bad"), reply, make_call()
    )
    assert joined(out, TextDelta) == "so ***, *** *** ***"
    rows = await audit.query(owner=None, kind="detection")
    found = {(r["name"], r["outcome"], r["detail"]["where"], r["detail"]["count"]) for r in rows}
    assert found == {
        ("word:4", "replaced", "request", 1),
        ("word:1", "replaced", "request", 1),
        ("word:1", "redacted", "reasoning", 1),
        ("word:1", "redacted", "response", 2),
        ("word:2", "redacted", "response", 1),
        ("pattern:1", "redacted", "response", 1),
    }
    row = rows[0]
    assert (row["owner"], row["key_id"], row["purpose"]) == ("alice-owner", "key_alice", "chat")
    assert (row["source"], row["conversation_id"], row["message_id"]) == (
        "chat.completions",
        "conv_1",
        "msg_1",
    )
    # rules are named, matches never stored (numbers left out: a row's time or id may
    # hold "555" by chance)
    stored = repr([{k: v for k, v in r.items() if not isinstance(v, int | float)} for r in rows])
    for text in ["secret", "bad", "555", "1234"]:
        assert text not in stored
    # a retry, or the agent's next step, does not count the user's words again
    await run_chain(sensitive, conversation("secret"), [Done("end_turn")], make_call(attempt=1))
    assert await audit.query(owner=None, kind="detection") == rows


async def test_a_rejection_is_recorded(audit: AuditLog, tmp_path: Path) -> None:
    sensitive = make_filter(on_request="reject")
    await sensitive.startup(Services(Settings(data_dir=tmp_path), PriceCatalog(), None, audit))
    with pytest.raises(ContentRejected):
        await run_chain(sensitive, conversation("敏感词 bad"), [Done("end_turn")], make_call())
    rows = await audit.query(owner=None, kind="detection")
    assert sorted((r["name"], r["outcome"], r["detail"]["count"]) for r in rows) == [
        ("word:1", "rejected", 1),
        ("word:3", "rejected", 1),
    ]


async def test_tool_results_are_redacted_before_the_model_and_client_see_them(
    audit: AuditLog, tmp_path: Path
) -> None:
    from parley.interceptors.protocol import ToolCall
    from parley.tools.protocol import ToolOutput

    sensitive = make_filter()
    await sensitive.startup(Services(Settings(data_dir=tmp_path), PriceCatalog(), None, audit))
    call = CallInfo("tool", "web_fetch", TurnInfo(ALICE), purpose="tool", call_id="c1")
    tool_call = ToolCall("c1", "web_fetch", {"url": "https://example.com"})
    output = await sensitive.after_tool_call(tool_call, ToolOutput("a bad page"), call)
    assert output == ToolOutput("a *** page")
    assert await sensitive.after_tool_call(tool_call, ToolOutput("fine"), call) is None
    off = make_filter(redact_tool_results=False)
    assert await off.after_tool_call(tool_call, ToolOutput("a bad page"), call) is None
    [row] = await audit.query(owner=None, kind="detection")
    assert (row["name"], row["detail"]) == ("word:1", {"where": "tool", "count": 1})


async def test_text_an_inner_interceptor_writes_is_checked_too() -> None:
    from dataclasses import replace

    from parley.interceptors.protocol import Interceptor, ModelResponse

    class Careless(Interceptor):
        order = 400  # inside the filter (210): its stream hook never sees this text

        async def after_response(self, response: ModelResponse, call: CallInfo) -> ModelResponse:
            return replace(response, text=response.text + " and bad")

    async def upstream(_request: ModelRequest) -> AsyncGenerator[Event]:
        yield TextDelta("all good")
        yield Done("end_turn")

    chain = InterceptorChain([make_filter(), Careless()])
    events = [e async for e in chain.stream(make_call(), conversation("hi"), upstream)]
    assert joined(events, TextDelta).endswith("all good and ***")
    assert "bad" not in joined(events, TextDelta)


# --- time ---------------------------------------------------------------------------------


def _slow_text(sensitive: SensitiveFilter) -> str:
    """A text the filter's pattern ``(a|aa)+$`` takes at least 20 ms to check on this
    machine (each ``a`` more costs about 1.6 times as much), far under its time limit."""
    for count in range(16, 40):
        text = "a" * count + "!"
        started = time.perf_counter()
        sensitive.redactor.redact(text)
        took = time.perf_counter() - started
        if took >= 0.02:
            assert took < 0.15
            return text
    raise AssertionError("the pattern never took 20 ms")


async def test_a_request_is_checked_within_one_budget_letting_the_loop_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A time limit per text let 40 texts that each take a little less hold the event
    loop for all of them (and a 10 MB history 0.6 s a call with common patterns). One
    call's request shares one budget, checked a slice at a time with the loop let run in
    between, and fails closed when the budget is spent."""
    sensitive = make_filter(patterns=["(a|aa)+$"])
    slow = _slow_text(sensitive)
    parts = tuple(TextPart(f"{i} {slow}") for i in range(40))  # each checked: none cached
    request = ModelRequest("mock-model", (Message("user", parts),))
    longest = await longest_pause(sensitive.before_request(request, make_call()))
    assert longest < 0.4, f"the event loop waited {longest:.2f} s"  # 40 x 20 ms before

    monkeypatch.setattr(sensitive_module, "REQUEST_SECONDS", 0.2)
    fresh = make_filter(patterns=["(a|aa)+$"])  # nothing remembered
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await fresh.before_request(request, make_call())
    assert time.monotonic() - started < 0.8


async def test_a_long_text_is_checked_in_slices_exactly() -> None:
    sensitive = make_filter()
    text = ("call 555-1234 now, it is a secret. " * 4000)[:-1]
    assert len(text) > 3 * sensitive_module.SLICE_CHARS
    request = ModelRequest("mock-model", (text_message("user", text),))
    changed = await sensitive.before_request(request, make_call())
    assert changed is not None
    # The reference redacts the whole text at once: a budget of its own, so that a busy
    # machine cannot fail the check that is not under test (CI: 0.25 s ran out).
    assert changed.messages[0].text == REDACTOR.redact(text, Budget(60)).text


async def test_the_checks_of_one_reply_share_one_budget() -> None:
    """A reply's chunks each had their own time limit too."""
    sensitive = make_filter(patterns=["(a|aa)+$"])
    slow = _slow_text(sensitive)
    call = make_call()

    def stream() -> None:
        for i in range(40):
            sensitive.on_stream_event(TextDelta(f"{i} {slow}\n"), call)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        stream()
    assert time.monotonic() - started < 0.8
