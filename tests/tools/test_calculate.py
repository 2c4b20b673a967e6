"""The ``calculate`` tool (Chatchat's 数学计算器): what it evaluates, what it refuses and
how it says why."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from parley.tools.builtins.calculate import MAX_CHARS, calculate, evaluate
from parley.tools.protocol import ToolError
from tests.tools.contexts import tool_context

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3+5/2", 5.5),
        ("2 ** 10", 1024),
        ("7 // 2 + 7 % 2", 4),
        ("-(3 - 10)", 7),
        ("sqrt(16) + abs(-2)", 6.0),
        ("round(pi, 3)", 3.142),
        ("log(8, 2)", 3.0),
        ("log10(1000) + log2(8) + ln(e)", 7.0),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("pow(2, 8)", 256),
        ("factorial(5)", 120),
        ("floor(2.7) + ceil(2.1)", 5),
        ("hypot(3, 4)", 5.0),
        ("1 < 2", True),
        ("  1 + 1  ", 2),
    ],
)
def test_it_evaluates_arithmetic_functions_and_constants(text: str, value: object) -> None:
    assert evaluate(text) == value


def test_trigonometry_is_in_radians() -> None:
    assert math.isclose(evaluate("sin(pi / 2)"), 1.0)
    assert math.isclose(evaluate("degrees(atan2(1, 1))"), 45.0)


def test_large_integers_are_exact_up_to_the_limit() -> None:
    assert evaluate("2 ** 100") == 1267650600228229401496703205376
    assert evaluate("10 ** 3900") == 10**3900


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1/0", "division by zero"),
        ("2 ^ 10", "write powers with **"),
        ("foo + 1", "unknown name 'foo'; the constants are pi, e, tau"),
        ("system(1)", "unknown function 'system'"),
        ("'a' * 3", "only numbers are allowed, not str values"),
        ("__import__('os')", "only numbers are allowed"),
        ("(1).real", "cannot hold attributes (a.b)"),
        ("[1, 2][0]", "cannot hold indexing"),
        ("1 if 1 else 2", "'if ... else'"),
        ("1 and 2", "'and' or 'or'"),
        ("1, 2", "several values"),
        ("1 << 2", "'<<' is not supported"),
        ("round(1.5, ndigits=1)", "positional arguments only"),
        ("2j", "complex numbers are not supported"),
        ("(-8) ** (1 / 3)", "not a real number"),
        ("1e308 * 10", "not a finite number"),
        ("exp(1000)", "too large"),
        ("sqrt(-1)", "math domain error"),
        ("x = 1", "not a valid expression"),
        ("1; 2", "not a valid expression"),
        ("", "the expression is empty"),
        ("pow(2, 3, 5)", "pow takes two arguments"),
        ("factorial(1001)", "factorial is limited to n <= 1000"),
        ("factorial(2.5)", "factorial needs a whole number"),
    ],
)
def test_it_refuses_with_a_message_that_says_why(text: str, why: str) -> None:
    with pytest.raises(ToolError) as raised:
        evaluate(text)
    assert why in str(raised.value)


@pytest.mark.parametrize("text", ["10 ** 5000", "9 ** 4000 * 9 ** 4000", "pow(7, 10 ** 6)"])
def test_huge_integers_are_refused_before_they_are_computed(text: str) -> None:
    with pytest.raises(ToolError, match="would be too large"):
        evaluate(text)


def test_long_and_deeply_nested_expressions_are_refused() -> None:
    with pytest.raises(ToolError, match="too long"):
        evaluate("1+" * MAX_CHARS + "1")
    with pytest.raises(ToolError, match="nested too deeply"):
        evaluate("-" * (MAX_CHARS - 1) + "1")
    with pytest.raises(ToolError, match="nested parentheses"):
        evaluate("(" * 300 + "1" + ")" * 300)


def test_the_tool_has_chatchats_name_and_argument() -> None:
    spec = calculate.spec
    assert spec.name == "calculate"
    assert spec.parameters["required"] == ["text"]
    assert spec.parameters["properties"] == {
        "text": {"type": "string", "description": "a math expression"}
    }
    assert "sqrt" in spec.description


async def test_the_tool_answers_the_value_as_text_and_failures_as_errors(tmp_path: Path) -> None:
    context = tool_context(tmp_path)
    output = await calculate.run({"text": "3+5/2"}, context)
    assert (output.content, output.is_error) == ("5.5", False)
    output = await calculate.run({"text": "2 ** 64"}, context)
    assert output.content == "18446744073709551616"
    failure = await calculate.run({"text": "1/0"}, context)
    assert (failure.content, failure.is_error) == ("division by zero", True)
    missing = await calculate.run({}, context)
    assert missing.is_error
    assert "text" in missing.content
