"""``calculate``: Langchain-Chatchat's "数学计算器" (math calculator) under its own name.

One string argument, ``text``, a math expression; the answer is the value as text
(``"5.5"``, ``"1024"``, ``"True"`` for a comparison). Chatchat evaluates with numexpr;
Parley uses ``simpleeval`` with a narrower language, checked before anything runs:

- numbers (integers and decimals; no strings, no complex numbers), parentheses, the
  operators ``+ - * / // % **``, unary ``+``/``-`` and comparisons;
- the names in ``CONSTANTS`` and calls of the functions in ``FUNCTIONS`` (positional
  arguments only). Nothing else: no attributes, subscripts, keywords or variables.

Limits keep one call cheap: at most ``MAX_CHARS`` characters; no integer (literal,
product or power) above ``MAX_INT_BITS`` bits, checked before it is computed;
``factorial`` up to ``MAX_FACTORIAL``. A result that is not a finite real number is an
error. Every failure (bad syntax, an unknown name, a division by zero, a limit) is a
``ToolError`` whose message says what was wrong. ``^`` is refused with a hint (numexpr
reads it as exclusive or, a model usually means a power).

What does not belong here: the other Chatchat tool (``api/chatchat/kb_tool.py``).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from simpleeval import (  # type: ignore[import-untyped]
    FunctionNotDefined,
    InvalidExpression,
    NameNotDefined,
    SimpleEval,
)

from parley.tools.function import function_tool
from parley.tools.protocol import ToolError

MAX_CHARS = 1_000
"""The longest expression evaluated."""
MAX_INT_BITS = 13_000
"""The largest integer made (about 3,900 decimal digits): a power or product that would
pass it is refused before it is computed."""
MAX_FACTORIAL = 1_000

Number = int | float


def _too_big(bits: float) -> ToolError:
    return ToolError(
        f"the result would be too large (about {int(bits * math.log10(2)):,} digits; "
        f"at most about {int(MAX_INT_BITS * math.log10(2)):,} are allowed)"
    )


def _check_int(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _too_big(value.bit_length())
    return value


def _power(base: Number, exponent: Number) -> Number:
    """``base ** exponent``, refused when an integer result would pass ``MAX_INT_BITS``."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        bits = exponent * math.log2(abs(base))
        if bits > MAX_INT_BITS:
            raise _too_big(bits)
    result: Number = base**exponent
    return result


def _multiply(left: Number, right: Number) -> Number:
    if isinstance(left, int) and isinstance(right, int):
        bits = left.bit_length() + right.bit_length()
        if bits > MAX_INT_BITS + 1:
            raise _too_big(bits)
    return left * right


def _pow(*args: Number) -> Number:
    if len(args) != 2:
        raise ToolError("pow takes two arguments: pow(base, exponent)")
    return _power(*args)


def _factorial(n: Number) -> int:
    if not isinstance(n, int) or n < 0:
        raise ToolError("factorial needs a whole number that is not negative")
    if n > MAX_FACTORIAL:
        raise ToolError(f"factorial is limited to n <= {MAX_FACTORIAL}")
    return math.factorial(n)


OPERATORS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Add: lambda a, b: _check_int(a + b),
    ast.Sub: lambda a, b: _check_int(a - b),
    ast.Mult: _multiply,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: _power,
    ast.USub: lambda a: -a,
    ast.UAdd: lambda a: +a,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
"""The operators an expression may use, by syntax node."""

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "cbrt": math.cbrt,
    "exp": math.exp,
    "log": math.log,
    "ln": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    "hypot": math.hypot,
    "floor": math.floor,
    "ceil": math.ceil,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "pow": _pow,
    "factorial": _factorial,
    "gcd": math.gcd,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}

_SYMBOLS: dict[type[ast.AST], str] = {
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.Invert: "~",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
    ast.Not: "not",
    ast.And: "and",
    ast.Or: "or",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_FORBIDDEN: dict[str, str] = {
    "Attribute": "attributes (a.b)",
    "Subscript": "indexing (a[i])",
    "BoolOp": "'and' or 'or'",
    "IfExp": "'if ... else'",
    "Tuple": "several values (a, b)",
    "List": "lists",
    "Lambda": "lambdas",
    "JoinedStr": "strings",
    "NamedExpr": "assignments",
}
"""What a refused syntax is called in the error (by node name)."""
_STRUCTURE = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Name, ast.Load)


@function_tool
def calculate(text: str) -> str:
    """Useful to answer questions about simple calculations: evaluates a math expression.

    Numbers, parentheses, + - * / // % ** and comparisons; functions sqrt, cbrt, exp,
    log (natural, or log(x, base)), log10, log2, sin, cos, tan, asin, acos, atan, atan2,
    sinh, cosh, tanh, degrees, radians, hypot, floor, ceil, abs, round, min, max, pow,
    factorial, gcd; constants pi, e, tau. Angles are in radians. Write powers with **.

    Args:
        text: a math expression
    """
    return format_value(evaluate(text))


def evaluate(text: str) -> Number:
    """The value of the expression ``text``; ``ToolError`` saying why when there is none."""
    if len(text) > MAX_CHARS:
        raise ToolError(
            f"the expression is too long ({len(text):,} characters; at most {MAX_CHARS:,})"
        )
    expression = text.strip()
    if not expression:
        raise ToolError("the expression is empty")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not a valid expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ToolError("the expression is nested too deeply") from None
    _check_syntax(tree)
    evaluator = SimpleEval(operators=OPERATORS, functions=FUNCTIONS, names=CONSTANTS)
    try:
        value = evaluator.eval(expression, previously_parsed=tree.body)
    except ToolError:
        raise
    except NameNotDefined as exc:
        raise ToolError(
            f"unknown name {exc.name!r}; the constants are {_listed(CONSTANTS)}"
        ) from None
    except FunctionNotDefined as exc:
        raise ToolError(
            f"unknown function {exc.func_name!r}; the functions are {_listed(FUNCTIONS)}"
        ) from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None
    except (InvalidExpression, ArithmeticError, ValueError, TypeError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from None
    return _checked_result(value)


def format_value(value: Number) -> str:
    """The value as the tool's answer: an integer in full, a decimal in Python's shortest
    exact form, a comparison as ``True``/``False``."""
    return repr(value)


def _check_syntax(tree: ast.Expression) -> None:
    """Refuse, with a message, any syntax but numbers, the operators, known names and
    plain function calls (before anything is evaluated)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, complex):
                raise ToolError("complex numbers are not supported")
            if not isinstance(value, int | float):
                raise ToolError(f"only numbers are allowed, not {type(value).__name__} values")
            _check_int(value)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise ToolError("only the listed functions can be called, by name")
            if node.keywords:
                raise ToolError("functions take positional arguments only")
        elif type(node) in _SYMBOLS:
            symbol = _SYMBOLS[type(node)]
            hint = ": write powers with ** (2 ** 10)" if symbol == "^" else ""
            raise ToolError(f"the operator {symbol!r} is not supported{hint}")
        elif not isinstance(node, _STRUCTURE) and type(node) not in OPERATORS:
            what = type(node).__name__
            raise ToolError(f"a math expression cannot hold {_FORBIDDEN.get(what, what)}")


def _checked_result(value: Any) -> Number:
    if isinstance(value, complex):
        raise ToolError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number (too large, or undefined)")
    if not isinstance(value, int | float):
        raise ToolError(f"the expression gave a {type(value).__name__}, not a number")
    return _check_int(value)


def _listed(names: dict[str, Any]) -> str:
    return ", ".join(names)
