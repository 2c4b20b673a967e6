"""Sensitive-content matching: which words and patterns a text holds, redacted in one go
(``Redactor``) or as it streams in (``StreamRedactor``).

Pure and synchronous: rules come in as strings, text goes in and out. Reading word lists,
settings, events, the audit log and the interceptor hooks belong to ``sensitive.py``.

All rules are one compiled alternation, scanned left to right like ``re.sub``: first the
words (escaped, longest first, so the longest word wins at a position), then the
patterns, in the order given. A stream gives exactly the text the whole reply would have
given, however it is split into chunks: ``StreamRedactor`` releases only the text that
no later chunk can change, holding back the last ``hold_chars`` characters (a word or a
pattern match that may still be completed) and any match that started before them.

Patterns are checked by ``parley.patterns`` (length, syntax, repetition) and matched by
the ``regex`` module under a ``Budget`` the interceptor gives each request and each
reply (``MATCH_SECONDS`` by default), for all their texts and chunks: a pattern that
backtracks without end on some text, or many texts that each take a little less, raise
``TimeoutError`` once it is spent, which the interceptor chain's security band turns
into a refused call (it fails closed), instead of stalling the server.

For patterns that guarantee holds only if a pattern needs at most ``max_pattern_chars``
characters from where its match starts (the match and any look-ahead); ``long_patterns``
names those that may need more (``\\d+``): the interceptor warns about them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import regex

from parley.errors import ConfigurationError
from parley.patterns import Budget, Pattern, PatternError, compile_pattern

MATCH_SECONDS = 0.25
"""What the matching of one reply may take in all (streamed and final), or of one tool
result, before the check fails closed (``Budget`` s given by the interceptor)."""

NUMBERED_BACKREFERENCE = re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]|\(\?\(\d")
"""``\\1`` or ``(?(1)...)``: group numbers shift once the patterns are combined."""


@dataclass(frozen=True, slots=True)
class Rule:
    """Where a word or pattern came from; never the word itself."""

    id: str
    """Stable and content-free, for the audit log: ``word:sensitive.txt:3``, ``word:2``
    (the second inline word), ``pattern:pii.txt:1``, ``pattern:2``."""
    source: str
    """For people: ``word list sensitive.txt line 3``, ``inline pattern 2``."""


class Redaction(NamedTuple):
    text: str
    detections: tuple[Rule, ...]
    """One entry per match, in order."""


class Redactor:
    def __init__(
        self,
        words: Iterable[tuple[str, Rule]] = (),
        patterns: Iterable[tuple[str, Rule]] = (),
        *,
        case_sensitive: bool = False,
        replacement: str = "***",
        max_pattern_chars: int = 64,
    ) -> None:
        self.case_sensitive = case_sensitive
        self.replacement = replacement
        self._flags = 0 if case_sensitive else re.IGNORECASE
        self._words: dict[str, tuple[str, Rule]] = {}
        for word, rule in words:
            if not word:
                raise ConfigurationError(f"sensitive filter: {rule.source} is empty")
            self._words.setdefault(self._key(word), (word, rule))  # the first listed wins
        spellings = sorted((w for w, _ in self._words.values()), key=len, reverse=True)
        alternatives = ["|".join(map(re.escape, spellings))] if spellings else []
        self._word_group = 1 if spellings else 0
        self._pattern_groups: dict[int, Rule] = {}
        long: list[Rule] = []
        group = self._word_group + 1
        for pattern, rule in patterns:
            compiled = self._check(pattern, rule)
            self._pattern_groups[group] = rule
            group += compiled.groups + 1
            alternatives.append(pattern)
            if _longest_match(pattern) > max_pattern_chars:
                long.append(rule)
        self.long_patterns = tuple(long)
        self.words = len(self._words)
        self.patterns = len(self._pattern_groups)
        self.hold_chars = max(
            max((len(w) for w in spellings), default=1) - 1,
            max_pattern_chars - 1 if self._pattern_groups else 0,
        )
        """How much of a stream's end may still become (part of) a match."""
        self.context_chars = max_pattern_chars if self._pattern_groups else 0
        """How much released text a stream keeps for look-behinds and ``\\b``."""
        self._regex: Pattern | None = None
        if alternatives:
            combined = "|".join(f"({a})" for a in alternatives)
            try:
                # re refuses what regex would accept but number differently (a group name
                # used twice); compiling never backtracks
                re.compile(combined, self._flags)
                self._regex = regex.compile(combined, regex.IGNORECASE if self._flags else 0)
            except (re.error, regex.error) as exc:
                raise ConfigurationError(
                    f"sensitive filter: the patterns cannot be combined: {exc}"
                ) from None

    def _key(self, word: str) -> str:
        return word if self.case_sensitive else word.lower()

    def _check(self, pattern: str, rule: Rule) -> Pattern:
        def bad(reason: str) -> ConfigurationError:
            return ConfigurationError(f"sensitive filter: {rule.source}: {reason}: {pattern!r}")

        if NUMBERED_BACKREFERENCE.search(pattern):
            raise bad("numbered group references are not supported (name the group)")
        try:
            compiled = compile_pattern(pattern, ignore_case=not self.case_sensitive)
            compile_pattern(f"({pattern})")
        except PatternError as exc:
            raise bad(f"bad regular expression ({exc})") from None
        if compiled.match("") is not None:
            raise bad("the pattern matches empty text")
        return compiled

    def __bool__(self) -> bool:
        return self._regex is not None

    def matches(
        self, text: str, pos: int = 0, before: int | None = None, budget: Budget | None = None
    ) -> list[tuple[int, int, Rule]]:
        """Matches (start, end, rule) scanning ``text`` from ``pos`` (what precedes it
        is seen by look-behinds only), up to the first one that starts at ``before``,
        within ``budget`` (else one of their own); ``TimeoutError`` past it."""
        if self._regex is None:
            return []
        found: list[tuple[int, int, Rule]] = []
        with (budget if budget is not None else Budget(MATCH_SECONDS)).spend() as seconds:
            for match in self._regex.finditer(text, pos, timeout=seconds):
                start, end = match.span()
                if before is not None and start >= before:
                    break
                if end > start:  # a bare look-around: nothing to redact
                    found.append((start, end, self._rule(match)))
        return found

    def _rule(self, match: regex.Match[str]) -> Rule:
        group = match.lastindex or 0
        if group != self._word_group:
            return self._pattern_groups[group]
        found = self._words.get(self._key(match.group()))
        if found is not None:
            return found[1]
        for word, rule in self._words.values():  # a case folding lower() does not share
            if re.fullmatch(re.escape(word), match.group(), self._flags):
                return rule
        raise AssertionError("a word matched that is in no list")  # pragma: no cover

    def redact(self, text: str, budget: Budget | None = None) -> Redaction:
        out, found, _ = self._apply(text, 0, None, budget)
        return Redaction(out, tuple(found))

    def _apply(
        self, text: str, pos: int, before: int | None, budget: Budget | None
    ) -> tuple[str, list[Rule], int]:
        """``text[pos:cut]`` redacted, its detections, and ``cut``: ``before`` or the end
        of a match that starts before it (the end of ``text`` when ``before`` is None)."""
        pieces: list[str] = []
        found: list[Rule] = []
        last = pos
        for start, end, rule in self.matches(text, pos, before, budget):
            pieces += (text[last:start], self.replacement)
            found.append(rule)
            last = end
        cut = len(text) if before is None else max(before, last)
        pieces.append(text[last:cut])
        return "".join(pieces), found, cut


class StreamRedactor:
    """One stream of text (a reply, or its reasoning): ``feed`` each chunk, ``flush``
    at the end. The released pieces joined are ``redactor.redact`` of the whole text.
    Its matching is ``budget`` (its call's; else one of its own)."""

    def __init__(self, redactor: Redactor, budget: Budget | None = None) -> None:
        self._redactor = redactor
        self._budget = budget if budget is not None else Budget(MATCH_SECONDS)
        self._held = ""
        self._context = ""
        self.detections: list[Rule] = []
        """Matches in the text released so far."""

    @property
    def held(self) -> str:
        """The raw text not yet released."""
        return self._held

    def feed(self, text: str) -> str:
        """Add a chunk; returns the redacted text that can no longer change (maybe "")."""
        self._held += text
        full = self._context + self._held
        pos = len(self._context)
        before = len(full) - self._redactor.hold_chars
        if before <= pos:
            return ""
        return self._release(full, pos, before)

    def flush(self) -> str:
        """The stream ended: the rest, redacted."""
        if not self._held:
            return ""
        return self._release(self._context + self._held, len(self._context), None)

    def _release(self, full: str, pos: int, before: int | None) -> str:
        out, found, cut = self._redactor._apply(full, pos, before, self._budget)
        self.detections += found
        keep = self._redactor.context_chars
        self._context = full[max(0, cut - keep) : cut] if keep else ""
        self._held = full[cut:]
        return out


def _longest_match(pattern: str) -> int:
    """The most characters ``pattern`` can match (0 when it cannot be told)."""
    try:
        parser: Any = importlib.import_module("re._parser")
        return int(parser.parse(pattern).getwidth()[1])
    except Exception:  # a private module: its absence only costs the warning
        return 0
