"""The SQL ``LIKE`` matcher of Chatchat's ``search_docs`` ``file_name`` filter."""

from __future__ import annotations

import random
import re
import time

import pytest
from pydantic import ValidationError

from parley.api.chatchat.kb import MAX_FILE_NAME, LikePattern, SearchBody


def _reference(pattern: str, text: str) -> bool:
    """The same semantics by regular expression (fine for short random cases)."""
    parts = [".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern]
    return re.fullmatch("".join(parts), text, re.IGNORECASE | re.DOTALL) is not None


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("", "", True),
        ("", "a", False),
        ("%", "", True),
        ("%", "anything.pdf", True),
        ("_", "", False),
        ("_", "x", True),
        ("guide%", "Guide.md", True),
        ("%.MD", "guide.md", True),
        ("%.md", "guide.mdx", False),
        ("g_ide.md", "guide.md", True),
        ("g_ide.md", "gide.md", False),
        ("%%%a%%b%%", "xxaYYbzz", True),
        ("%a%b", "ba", False),
        ("a%", "ba", False),
        ("100%", "100% sure", True),
        ("%x", "a" * 60, False),
        ("line_%", "line\nbreak", True),
    ],
)
def test_known_cases(pattern: str, text: str, expected: bool) -> None:
    assert LikePattern(pattern).fullmatch(text) is expected
    assert _reference(pattern, text) is expected


def test_agrees_with_the_regular_expression_on_random_cases() -> None:
    rng = random.Random(20240611)
    for _ in range(5_000):
        pattern = "".join(rng.choice("ab%_A") for _ in range(rng.randint(0, 8)))
        text = "".join(rng.choice("abAB") for _ in range(rng.randint(0, 10)))
        assert LikePattern(pattern).fullmatch(text) is _reference(pattern, text), (
            pattern,
            text,
        )


def test_a_pathological_pattern_finishes_fast() -> None:
    name = "a" * 255
    started = time.perf_counter()
    for pattern in ("%" * 8 + "x", "%a" * 120 + "x", "%_" * 120 + "%x"):
        assert LikePattern(pattern).fullmatch(name) is False
    assert time.perf_counter() - started < 1.0


def test_file_name_is_capped() -> None:
    SearchBody(knowledge_base_name="kb", file_name="%" * MAX_FILE_NAME)
    with pytest.raises(ValidationError):
        SearchBody(knowledge_base_name="kb", file_name="%" * (MAX_FILE_NAME + 1))
