"""Regular expressions from outside the code, with a bounded cost.

Python's ``re`` backtracks without limit and holds the GIL while it does: ``(a+)+$``
against 27 ``a`` s and a ``!`` stalled every request for 10 s, and each more ``a``
doubles it. Every pattern that a key holder (an assistant's regex rules, lorebook
keywords), a model (``workspace_search``) or the operator (sensitive patterns) supplies
is compiled here instead, by the ``regex`` module (``re`` 's syntax and semantics), and
every match runs under a ``Budget`` of the request it serves (a turn's rules, a model
call's sensitive checks, a turn's searches, a lorebook): past it the module stops with
``TimeoutError`` and the caller decides (a rule is skipped, a keyword does not match, a
sensitive check fails closed).

Chosen by measuring (2 cores): RE2 (google-re2) never backtracks, but its Python
wrapper costs about 10 µs a match (a rule matching each word of a 100,000-character
reply: 0.9 s against ``re`` 's 16 ms) and it has no look-around or back-references,
which stored rules use. ``regex`` ran the same substitutions as fast as ``re`` or
faster (``\\d+`` over 1 MB: 9 ms against 35 ms) and stopped ``(a+)+$`` at a 20 ms
deadline.

Saving a pattern checks it (``compile_pattern``): at most ``MAX_PATTERN_CHARS``, valid
``re`` syntax, and counted repetitions that expand to at most ``MAX_EXPANSION`` copies
(``regex`` unrolls them when compiling: ``((a{100}){100}){100}`` exhausted 24 GiB).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import regex

MAX_PATTERN_CHARS = 1_000
MAX_EXPANSION = 10_000
"""Copies counted repetitions may unroll to: ``(a{100}){100}`` is 10,000 (5 ms)."""

Pattern = regex.Pattern[str]


class PatternError(ValueError):
    """A pattern refused when it is saved or loaded; the message says why (the syntax
    error itself, or a limit), for callers to put after "invalid regular expression: "."""


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """``pattern`` compiled for matching under a deadline; ``PatternError`` says why not."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"the pattern is {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,}"
        )
    flags = re.IGNORECASE if ignore_case else 0
    try:
        tree = re._parser.parse(pattern, flags)  # type: ignore[attr-defined]
    except (re.error, RecursionError, OverflowError) as exc:
        raise PatternError(str(exc) or type(exc).__name__) from None
    expansion = _expansion(tree)
    if expansion > MAX_EXPANSION:
        raise PatternError(
            f"its counted repetitions expand to {expansion:,} copies; at most {MAX_EXPANSION:,}"
        )
    try:
        return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise PatternError(str(exc) or type(exc).__name__) from None


def _expansion(node: Any) -> int:
    """The most copies nested counted repetitions in a parsed ``re`` pattern unroll to."""
    parser: Any = re._parser  # type: ignore[attr-defined]
    most = 1
    for op, value in node if isinstance(node, parser.SubPattern) else ():
        if op in (parser.MAX_REPEAT, parser.MIN_REPEAT, parser.POSSESSIVE_REPEAT):
            low, high, inner = value
            count = low if high == parser.MAXREPEAT else high
            most = max(most, max(count, 1) * _expansion(inner))
        else:
            for item in value if isinstance(value, tuple | list) else (value,):
                most = max(most, _expansion(item))
    return most


class Budget:
    """The time the matches of one request (a turn, a model call, a search) may take,
    all told, however many texts, parts and chunks they run on.

    Only time spent matching counts: a stream's pauses between chunks do not. Each use
    is ``with budget.spend() as seconds:`` around one ``regex`` call, ``seconds`` (what
    is left) its ``timeout=``; the time it took is then taken off. Once nothing is left,
    ``spend`` raises ``TimeoutError`` without running anything. A budget per text would
    not do: 100 parts each cut at 100 ms froze the server for 10 s.
    """

    __slots__ = ("_at_once", "_left", "told")

    def __init__(self, seconds: float, *, at_once: float | None = None) -> None:
        self._left = seconds
        self._at_once = at_once
        """The most one use may take (None: all that is left): a request checked in
        slices, the event loop let run between them, holds it this long at most."""
        self.told = False
        """Whether running out was logged (once is enough: then everything is skipped)."""

    @property
    def left(self) -> float:
        return max(self._left, 0.0)

    @contextlib.contextmanager
    def spend(self) -> Iterator[float]:
        if self._left <= 0:
            raise TimeoutError("the regular expressions' time is up")
        started = time.monotonic()
        given = self._left if self._at_once is None else min(self._left, self._at_once)
        try:
            yield given
        except TimeoutError:
            # regex's clock can stop a hair before ours: timed out on all that was left
            # is all of it spent
            if given >= self._left:
                self._left = 0.0
            raise
        finally:
            self._left -= time.monotonic() - started
