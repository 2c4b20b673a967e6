"""Output transformers: regex rules rewrite replies, for storage or for display.

Pure: text goes in, text (or stream events) comes out (``store_user_messages`` awaits
only to let the event loop run between parts). Choosing the rules for a conversation,
persisting, and saving images (``images.py``) belong elsewhere.

Think tags (``<think>…</think>`` in a reply's text) become reasoning as the stream is
read, in ``agent/stream.py`` (``ThinkTagReader``), where every reply passes.

**Regex rules.** A ``RegexRule`` applies to user and/or assistant messages. A storage
rule (``display_only=False``) rewrites the text that is saved (and so later sent to the
model); a display-only rule rewrites only what is shown, never what is stored. Rules run
in the order given, each over the whole output of the one before (``re.sub``), with
Python's replacement syntax (``\\1``, ``\\g<name>``).

Patterns are compiled by ``parley.patterns`` and matched under one ``Budget`` per turn
(``turn_budget``: ``RULES_SECONDS``, at most ``RULES_AT_ONCE`` for one rule on one
text): the user's messages as they are stored, the reply as it streams, as it is stored
and as it is shown all draw on it, however many messages, parts and chunks there are
(only the time spent matching counts). A rule that runs out of time is skipped (a
stream stops applying it) and logged, and once the budget is spent every rule is
skipped, so a pattern that backtracks without end costs its author that long, and
nobody else anything.

``DisplayRewriter`` applies rules to a stream. Its output joined equals ``apply_rules``
on the whole text, however the text is split, provided every match, together with what
its pattern looks at around it, spans at most ``max_match_chars`` characters from where
the match starts (look-behinds: at most that many before it). A match that needs more
(``\\d+`` over a long run of digits) is not guaranteed while streaming: it may be cut
where the stream was. Each rule holds back at most ``max_match_chars`` characters, less
when its pattern has no look-ahead and a bounded width (``foo`` holds back 5).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from parley.messages import Message, Part, Role, TextPart
from parley.patterns import Budget, Pattern, PatternError, compile_pattern

log = logging.getLogger(__name__)
RULES_SECONDS = 0.25
"""What an assistant's rules may take over one turn, all told (a ``Budget``)."""
RULES_AT_ONCE = 0.1
"""What one rule may take on one text, as each text had before the turn's budget."""
YIELD_SECONDS = 0.01
"""``store_user_messages`` lets the event loop run after this much work."""


def turn_budget() -> Budget:
    """The time an assistant's rules have for one turn."""
    return Budget(RULES_SECONDS, at_once=RULES_AT_ONCE)


# --- regex rules ---------------------------------------------------------------------

RuleRole = Literal["user", "assistant"]
_ROLES: frozenset[str] = frozenset({"user", "assistant"})


@dataclass(frozen=True, slots=True)
class RegexRule:
    """Replace ``pattern`` with ``replacement`` in the messages of ``roles``."""

    pattern: str
    replacement: str = ""
    roles: frozenset[RuleRole] = frozenset({"assistant"})
    display_only: bool = False
    """Only what is shown changes; the stored (and model-bound) text keeps the match."""
    name: str = ""
    """For error messages and settings; the pattern stands in when empty."""
    compiled: Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        label = f"regex rule {self.name or self.pattern!r}"
        if not self.roles or not set(self.roles) <= _ROLES:
            raise ValueError(f"{label}: roles must be 'user' and/or 'assistant': {self.roles}")
        try:
            compiled = compile_pattern(self.pattern)
        except PatternError as exc:
            raise ValueError(f"{label}: bad regular expression {self.pattern!r}: {exc}") from None
        try:
            _check_replacement(compiled, self.replacement)
        except (re.error, IndexError) as exc:
            raise ValueError(f"{label}: bad replacement {self.replacement!r}: {exc}") from None
        object.__setattr__(self, "compiled", compiled)

    def applies(self, role: Role, *, for_storage: bool) -> bool:
        return role in self.roles and self.display_only != for_storage

    @property
    def label(self) -> str:
        return self.name or f"pattern of {len(self.pattern)} characters"


def _check_replacement(compiled: Pattern, replacement: str) -> None:
    """Raise ``re.error`` for a replacement naming a group the pattern lacks."""
    compile_template = getattr(re, "_compile_template", None)  # Python 3.12+
    if compile_template is not None:
        compile_template(compiled, replacement)
        return
    compile_repl = getattr(re, "_compile_repl", None)  # Python 3.11
    if compile_repl is not None:
        compile_repl(replacement, compiled)


def apply_rules(
    text: str,
    rules: Iterable[RegexRule],
    role: Role,
    *,
    for_storage: bool,
    budget: Budget | None = None,
) -> str:
    """``text`` after the rules for ``role``: the storage rules (``for_storage``, for a
    finished reply or a user message before it is saved) or the display-only ones (for
    showing stored text), under ``budget`` (the turn's; else one of its own)."""
    budget = budget if budget is not None else Budget(RULES_SECONDS)
    for rule in rules:
        if rule.applies(role, for_storage=for_storage):
            try:
                with budget.spend() as seconds:
                    text = rule.compiled.sub(rule.replacement, text, timeout=seconds)
            except TimeoutError:
                _out_of_time(rule, budget, "was skipped")
    return text


def _out_of_time(rule: RegexRule, budget: Budget, outcome: str) -> None:
    """Log the rule that spent the last of a budget (once: after it, rules are skipped
    without a word, or one request of 100 parts would log 100 lines)."""
    if not budget.told:
        budget.told = True
        log.warning("regex rule %s ran out of time and %s", rule.label, outcome)


def rewrite_parts(
    parts: Sequence[Part],
    rules: Sequence[RegexRule],
    role: Role,
    *,
    for_storage: bool,
    budget: Budget | None = None,
) -> tuple[Part, ...]:
    """``apply_rules`` on each text part, all under one budget (``budget``, else one of
    their own); other parts (images, files, calls) as they are."""
    if not any(rule.applies(role, for_storage=for_storage) for rule in rules):
        return tuple(parts)
    budget = budget if budget is not None else Budget(RULES_SECONDS)
    return tuple(
        TextPart(apply_rules(p.text, rules, role, for_storage=for_storage, budget=budget))
        if isinstance(p, TextPart)
        else p
        for p in parts
    )


async def store_user_messages(
    messages: Sequence[Message], rules: Sequence[RegexRule], budget: Budget
) -> list[Message]:
    """``messages`` with the storage rules applied to the user messages, newest first
    (when the budget runs out, the older ones, a stateless request's history, are left
    as they are), letting the event loop run between parts."""
    out = list(messages)
    if not any(rule.applies("user", for_storage=True) for rule in rules):
        return out
    resumed = time.monotonic()
    for index in range(len(out) - 1, -1, -1):
        message = out[index]
        if message.role != "user":
            continue
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                part = TextPart(
                    apply_rules(part.text, rules, "user", for_storage=True, budget=budget)
                )
                if time.monotonic() - resumed > YIELD_SECONDS:
                    await asyncio.sleep(0)
                    resumed = time.monotonic()
            parts.append(part)
        out[index] = Message(message.role, tuple(parts), message.name)
    return out


class DisplayRewriter:
    """One streamed reply: ``feed`` each chunk, ``finish`` at the end. The pieces joined
    are ``apply_rules(whole, rules, role, for_storage=False)`` (see the module docstring
    for the condition). With ``with_storage_rules`` the storage rules run first, so the
    stream shows what the stored reply will show: display rules over storage rules.
    The rules' time is ``budget`` (the turn's; else one of the stream's own)."""

    def __init__(
        self,
        rules: Iterable[RegexRule],
        max_match_chars: int = 256,
        *,
        role: Role = "assistant",
        with_storage_rules: bool = False,
        budget: Budget | None = None,
    ) -> None:
        if max_match_chars < 1:
            raise ValueError("max_match_chars must be at least 1")
        rules = list(rules)
        chosen = [r for r in rules if r.applies(role, for_storage=False)]
        if with_storage_rules:
            chosen = [r for r in rules if r.applies(role, for_storage=True)] + chosen
        budget = budget if budget is not None else Budget(RULES_SECONDS)
        self._stages = [_RuleStream(rule, max_match_chars, budget) for rule in chosen]

    def __bool__(self) -> bool:
        return bool(self._stages)

    @property
    def hold_chars(self) -> int:
        """The most characters the stream can lag behind the model."""
        return sum(stage.hold for stage in self._stages)

    def feed(self, text: str) -> str:
        """Add a chunk; returns the rewritten text that can no longer change (maybe "")."""
        for stage in self._stages:
            if not text:
                return ""
            text = stage.feed(text)
        return text

    def finish(self) -> str:
        """The stream ended: the rest, rewritten. The rewriter is then ready to reuse."""
        text = ""
        for stage in self._stages:
            text = stage.finish(text)
        return text


class _RuleStream:
    """One rule over a stream: the released text is what ``re.sub`` gives the whole."""

    __slots__ = ("_budget", "_context", "_context_chars", "_held", "_rule", "hold")

    def __init__(self, rule: RegexRule, max_match_chars: int, budget: Budget) -> None:
        self._rule: RegexRule | None = rule
        self._budget = budget
        self.hold = _hold_chars(rule.compiled, max_match_chars)
        """Matches starting this close to the end of the text so far may still change."""
        self._context_chars = max_match_chars
        self._context = ""
        """Released input kept for look-behinds and ``\\b``."""
        self._held = ""

    def feed(self, text: str) -> str:
        self._held += text
        if len(self._held) <= self.hold:
            return ""
        full = self._context + self._held
        return self._release(full, len(self._context), len(full) - self.hold)

    def finish(self, text: str = "") -> str:
        # released even when nothing is held: a pattern may match empty text at the end
        out = self._release(self._context + self._held + text, len(self._context), None)
        self._context = self._held = ""
        return out

    def _release(self, full: str, pos: int, before: int | None) -> str:
        """``full[pos:cut]`` rewritten, where ``cut`` is ``before`` or the end of a match
        that starts before it (the end of ``full`` when ``before`` is None). A rule out of
        time stops rewriting: from then on the text passes as it is."""
        pieces: list[str] = []
        last = pos
        for start, end, replacement in self._rewrites(full, pos, before):
            pieces += (full[last:start], replacement)
            last = end
        cut = len(full) if before is None else max(before, last)
        pieces.append(full[last:cut])
        self._context = full[max(0, cut - self._context_chars) : cut]
        self._held = full[cut:]
        return "".join(pieces)

    def _rewrites(self, full: str, pos: int, before: int | None) -> list[tuple[int, int, str]]:
        """(start, end, replacement) of each match from ``pos`` that starts before
        ``before``; none once the rule has run out of time."""
        rule = self._rule
        if rule is None:
            return []
        found: list[tuple[int, int, str]] = []
        try:
            with self._budget.spend() as seconds:
                for match in rule.compiled.finditer(full, pos, timeout=seconds):
                    if before is not None and match.start() >= before:
                        break
                    found.append((match.start(), match.end(), match.expand(rule.replacement)))
        except TimeoutError:
            _out_of_time(rule, self._budget, "is no longer applied to a stream")
            self._rule, self.hold = None, 0
            return []
        return found


def _hold_chars(compiled: Pattern, cap: int) -> int:
    """How much of a stream's end a rule must hold back: its widest match plus two (an
    anchor or ``\\b`` at the end looks one character on), or ``cap`` when the pattern
    looks ahead or its width cannot be told."""
    try:
        parser: Any = importlib.import_module("re._parser")
        tree = parser.parse(compiled.pattern, compiled.flags & re.IGNORECASE)
        if _looks_ahead(tree, parser):
            return cap
        return min(cap, int(tree.getwidth()[1]) + 2)
    except Exception:  # a private module: its absence only costs latency
        return cap


def _looks_ahead(node: Any, parser: Any) -> bool:
    if isinstance(node, parser.SubPattern):
        for op, av in node:
            if op in (parser.ASSERT, parser.ASSERT_NOT) and av[0] == 1:
                return True
            if _looks_ahead(av, parser):
                return True
        return False
    if isinstance(node, tuple | list):
        return any(_looks_ahead(item, parser) for item in node)
    return False
