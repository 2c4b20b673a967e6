"""The sensitive-content filter (Snail AI's example): word lists and regular expressions
from files, checked on the way in and redacted on the way out, streams included.

Requests: the text of user messages. ``on_request: replace`` swaps each match for the
``replacement``; ``reject`` refuses the request (``ContentRejected``, HTTP 400) when the
newest user message matches, and replaces matches in older ones, so history from before
a word was listed never makes a conversation unusable. The server's own calls (titles,
summaries) are never refused, only cleaned. Only the request sent upstream changes: the
stored conversation keeps what the user wrote.

Replies: text and reasoning are redacted as they stream, each in its own buffer, holding
back just enough that a word split across chunks is still caught and never shown (see
``redaction.py``). A change of kind (reasoning to text), a tool call and the end of the
reply release what is held. Redacted reasoning loses its signature (it would no longer
verify). Tool results are redacted too (``redact_tool_results``), and so is whatever an
inner interceptor's ``after_response`` wrote. Tool-call arguments are left alone.

Time: the texts of one call's request share ``REQUEST_SECONDS``, checked a slice of
``SLICE_CHARS`` at a time (``MATCH_SECONDS`` at most each) with the event loop let run
between slices (a slice's result is exact: it is the stream redactor's); its reply,
streamed and final, shares ``redaction.MATCH_SECONDS``, and so does a tool call's
result. Once a budget is spent the check fails closed. Before, each text had its own
limit and a request of many texts held the event loop for all of them (a 10 MB history:
0.6 s a call with a phone-number pattern, 3 s with an email one).

Each detection is counted per call and recorded when the call ends: one audit row
(kind ``detection``) per rule, where and outcome, naming the rule (``word:words.txt:3``),
never the matched text; the same goes to the log at INFO.

What does not belong here: the matching itself (``redaction.py``), writing audit rows
(``store/audit.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from parley.errors import ConfigurationError, InvalidRequest, ParleyError
from parley.events import Done, Event, ReasoningDelta, TextDelta, ToolCallDelta
from parley.interceptors.builtins.audit import call_record
from parley.interceptors.builtins.redaction import (
    MATCH_SECONDS,
    Redaction,
    Redactor,
    Rule,
    StreamRedactor,
)
from parley.interceptors.protocol import CallInfo, Interceptor, ModelResponse, Services, ToolCall
from parley.messages import Message, Part, TextPart
from parley.patterns import Budget
from parley.providers.protocol import ModelRequest
from parley.settings.interceptors import SensitiveSettings
from parley.store.audit import AuditLog
from parley.tools.protocol import ToolOutput

log = logging.getLogger(__name__)

REQUEST_CACHE_SIZE = 1024
"""Texts whose redaction is remembered: a long history is checked once, not per call."""
REQUEST_SECONDS = 3.0
"""What checking one model call's request may take, all its texts together (the event
loop runs between slices, each of which may take ``MATCH_SECONDS``: 10 MB of history
takes about 0.6 s with common patterns)."""
SLICE_CHARS = 32_768
"""How much of a long text is checked at once."""
YIELD_SECONDS = 0.01
"""Checking a request lets the event loop run after this much work."""

Where = Literal["request", "response", "reasoning", "tool"]
Outcome = Literal["replaced", "rejected", "redacted"]


class ContentRejected(InvalidRequest):
    """The request holds blocked content (``on_request: reject``)."""

    code = "content_rejected"


def load_redactor(settings: SensitiveSettings) -> Redactor:
    """The rules of ``settings``: files first, then the inline ones."""
    words: list[tuple[str, Rule]] = []
    patterns: list[tuple[str, Rule]] = []
    for path in settings.word_files:
        for number, line in _lines(path, "word"):
            words.append((line, Rule(f"word:{path.name}:{number}", _at("word", path, number))))
    for index, word in enumerate(settings.words, 1):
        words.append((word, Rule(f"word:{index}", f"inline word {index}")))
    for path in settings.pattern_files:
        for number, line in _lines(path, "pattern"):
            rule = Rule(f"pattern:{path.name}:{number}", _at("pattern", path, number))
            patterns.append((line, rule))
    for index, pattern in enumerate(settings.patterns, 1):
        patterns.append((pattern, Rule(f"pattern:{index}", f"inline pattern {index}")))
    return Redactor(
        words,
        patterns,
        case_sensitive=settings.case_sensitive,
        replacement=settings.replacement,
        max_pattern_chars=settings.max_pattern_chars,
    )


def _at(kind: str, path: Path, number: int) -> str:
    return f"{kind} list {path.name} line {number}"


def _lines(path: Path, kind: str) -> list[tuple[int, str]]:
    """The (line number, stripped text) of a rule file; blank and '#' lines skipped."""
    try:
        data = path.expanduser().read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigurationError(
            f"sensitive filter: cannot read {kind} file {path}: {reason}"
        ) from None
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        raise ConfigurationError(
            f"sensitive filter: {kind} file {path} line {bad_line} is not valid UTF-8"
        ) from None
    found: list[tuple[int, str]] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            found.append((number, line))
    return found


@dataclass(slots=True)
class _CallState:
    """One call's buffers and detection counts (in ``call.data[filter]``)."""

    text: StreamRedactor
    reasoning: StreamRedactor
    counts: Counter[tuple[Rule, Where, Outcome]] = field(default_factory=Counter)


class _Remembered:
    """Redactions of request texts, the ``REQUEST_CACHE_SIZE`` most recent: a long
    history is checked once, not on every call."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._found: OrderedDict[str, Redaction] = OrderedDict()
        self.hits = 0
        self.misses = 0

    async def __call__(self, text: str, checking: _Checking) -> Redaction:
        found = self._found.get(text)
        if found is not None:
            self.hits += 1
            self._found.move_to_end(text)
            return found
        self.misses += 1
        found = self._found[text] = await _sliced(self._redactor, text, checking)
        if len(self._found) > REQUEST_CACHE_SIZE:
            self._found.popitem(last=False)
        return found


class _Checking:
    """One request's check: its time (``REQUEST_SECONDS``, ``MATCH_SECONDS`` at most at
    once), and when it last let the event loop run."""

    def __init__(self) -> None:
        self.budget = Budget(REQUEST_SECONDS, at_once=MATCH_SECONDS)
        self._resumed = time.monotonic()

    async def breathe(self) -> None:
        """Let the event loop run, once ``YIELD_SECONDS`` of work have been done."""
        if time.monotonic() - self._resumed > YIELD_SECONDS:
            await asyncio.sleep(0)
            self._resumed = time.monotonic()


async def _sliced(redactor: Redactor, text: str, checking: _Checking) -> Redaction:
    """``redactor.redact(text)`` within ``checking``, ``SLICE_CHARS`` at a time with the
    event loop let run in between: a stream of slices gives exactly the whole text's
    redaction (``StreamRedactor``)."""
    if len(text) <= SLICE_CHARS:
        redaction = redactor.redact(text, checking.budget)
        await checking.breathe()
        return redaction
    stream = StreamRedactor(redactor, checking.budget)
    pieces: list[str] = []
    for start in range(0, len(text), SLICE_CHARS):
        pieces.append(stream.feed(text[start : start + SLICE_CHARS]))
        await checking.breathe()
    pieces.append(stream.flush())
    return Redaction("".join(pieces), tuple(stream.detections))


class SensitiveFilter(Interceptor):
    name = "sensitive_filter"

    def __init__(self, settings: SensitiveSettings) -> None:
        self.order = settings.order
        self.fail_closed = settings.fail_closed
        self._settings = settings
        self.redactor = load_redactor(settings)
        self._redact = _Remembered(self.redactor)
        self._audit: AuditLog | None = None
        for rule in self.redactor.long_patterns:
            log.warning(
                "sensitive filter: %s may match more than max_pattern_chars (%d) "
                "characters; a stream may cut such a match and miss it",
                rule.source,
                settings.max_pattern_chars,
            )

    async def startup(self, services: Services) -> None:
        self._audit = services.audit

    def describe(self) -> dict[str, Any]:
        settings = self._settings
        return {
            "words": self.redactor.words,
            "patterns": self.redactor.patterns,
            "case_sensitive": settings.case_sensitive,
            "on_request": settings.on_request,
            "redact_responses": settings.redact_responses,
            "redact_tool_results": settings.redact_tool_results,
        }

    def _state(self, call: CallInfo) -> _CallState:
        state = call.data.get(self)
        if state is None:
            budget = self._budget(call)
            state = call.data[self] = _CallState(
                StreamRedactor(self.redactor, budget), StreamRedactor(self.redactor, budget)
            )
        assert isinstance(state, _CallState)
        return state

    def _budget(self, call: CallInfo) -> Budget:
        """The time this call's reply (or result) may take to check, all told (kept
        after its stream's state is gone: ``after_response`` comes later)."""
        budget = call.data.setdefault((self, Budget), Budget(MATCH_SECONDS))
        assert isinstance(budget, Budget)
        return budget

    # --- requests -------------------------------------------------------------------

    async def before_request(self, request: ModelRequest, call: CallInfo) -> ModelRequest | None:
        if not self.redactor:
            return None
        state = self._state(call)
        messages = list(request.messages)
        users = [i for i, message in enumerate(messages) if message.role == "user"]
        if not users:
            return None
        newest = users[-1]
        checking = _Checking()
        if self._settings.on_request == "reject" and call.purpose == "chat":
            found = [
                rule
                for text in _texts(messages[newest])
                for rule in (await self._redact(text, checking)).detections
            ]
            if found:
                state.counts.update((rule, "request", "rejected") for rule in found)
                raise ContentRejected(
                    f"the request contains blocked content (rule: {found[0].source})"
                )
        changed = False
        for index in reversed(users):  # the newest first, should the time run out
            redacted, found = await self._clean(messages[index], checking)
            if redacted is None:
                continue
            messages[index] = redacted
            changed = True
            # the newest user message is new only to the first attempt that answers it
            if index == newest == len(messages) - 1 and call.attempt == 0:
                state.counts.update((rule, "request", "replaced") for rule in found)
        return replace(request, messages=tuple(messages)) if changed else None

    async def _clean(
        self, message: Message, checking: _Checking
    ) -> tuple[Message | None, list[Rule]]:
        """The message with its text redacted (None: unchanged) and what was found."""
        parts: list[Part] = []
        found: list[Rule] = []
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                redaction: Redaction = await self._redact(part.text, checking)
                if redaction.detections:
                    found += redaction.detections
                    part = TextPart(redaction.text)
            parts.append(part)
        if not found:
            return None, found
        return replace(message, parts=tuple(parts)), found

    # --- replies --------------------------------------------------------------------

    def on_stream_event(self, event: Event, call: CallInfo) -> Event | Sequence[Event] | None:
        cls = event.__class__
        if cls is Done:
            state = call.data.pop(self, None)
            if not isinstance(state, _CallState):
                return None
            out = _flush(state)
            self._record(call, state)
            return [*out, event] if out else None
        if not (self._settings.redact_responses and self.redactor):
            return None
        if cls is TextDelta:
            assert isinstance(event, TextDelta)
            state = self._state(call)
            out = _flush(state, text=False)
            released = state.text.feed(event.text)
            if not out and released == event.text:
                return None
            if released:
                out.append(TextDelta(released))
            return out
        if cls is ReasoningDelta:
            assert isinstance(event, ReasoningDelta)
            state = self._state(call)
            out = _flush(state, reasoning=False)
            released = state.reasoning.feed(event.text)
            signature = event.signature
            if signature is not None:  # the end of a thinking block
                released += state.reasoning.flush()
                if state.reasoning.detections:
                    signature = None
            if not out and released == event.text and signature == event.signature:
                return None
            if released or signature is not None:
                out.append(ReasoningDelta(released, signature))
            return out
        if cls is ToolCallDelta:
            state = self._state(call)
            out = _flush(state)
            return [*out, event] if out else None
        return None

    async def after_response(self, response: ModelResponse, call: CallInfo) -> ModelResponse | None:
        """What an inner interceptor's ``after_response`` wrote never passed the stream
        filter: check the final reply too (streamed text is already clean: no match)."""
        if not (self._settings.redact_responses and self.redactor):
            return None
        budget = self._budget(call)
        text = self.redactor.redact(response.text, budget)
        reasoning = self.redactor.redact(response.reasoning, budget)
        if not (text.detections or reasoning.detections):
            return None
        counts: Counter[tuple[Rule, Where, Outcome]] = Counter()
        counts.update((rule, "response", "redacted") for rule in text.detections)
        counts.update((rule, "reasoning", "redacted") for rule in reasoning.detections)
        self._record_counts(call, counts)
        return replace(response, text=text.text, reasoning=reasoning.text)

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        state = call.data.pop(self, None)
        if isinstance(state, _CallState):
            self._record(call, state)

    # --- tool results ---------------------------------------------------------------

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> ToolOutput | None:
        """A tool's result reaches the client (``parley.tool``) and the model: redacted
        like a reply, so a listed word cannot be read back through a tool."""
        if not (self._settings.redact_tool_results and self.redactor):
            return None
        redaction = self.redactor.redact(output.content, self._budget(call))
        if not redaction.detections:
            return None
        self._record_counts(
            call, Counter((rule, "tool", "redacted") for rule in redaction.detections)
        )
        return ToolOutput(redaction.text, output.is_error)

    # --- detections -----------------------------------------------------------------

    def _record(self, call: CallInfo, state: _CallState) -> None:
        counts = state.counts
        counts.update((rule, "response", "redacted") for rule in state.text.detections)
        counts.update((rule, "reasoning", "redacted") for rule in state.reasoning.detections)
        self._record_counts(call, counts)

    def _record_counts(self, call: CallInfo, counts: Counter[tuple[Rule, Where, Outcome]]) -> None:
        turn = call.turn
        for (rule, where, outcome), count in counts.items():
            log.info(
                "sensitive filter: %s matched %d time(s) in the %s (%s); owner %s, conversation %s",
                rule.id,
                count,
                where,
                outcome,
                turn.caller.owner,
                turn.conversation_id,
            )
            if self._audit is None:
                continue
            self._audit.add(
                call_record(
                    call,
                    kind="detection",
                    name=rule.id,
                    outcome=outcome,
                    detail={"where": where, "count": count},
                )
            )


def _texts(message: Message) -> list[str]:
    return [part.text for part in message.parts if isinstance(part, TextPart) and part.text]


def _flush(state: _CallState, *, text: bool = True, reasoning: bool = True) -> list[Event]:
    """Release what is held (reasoning first: it comes before the answer)."""
    out: list[Event] = []
    if reasoning and (held := state.reasoning.flush()):
        out.append(ReasoningDelta(held))
    if text and (held := state.text.flush()):
        out.append(TextDelta(held))
    return out
