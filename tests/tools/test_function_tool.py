"""``function_tool``: schema from the signature, description from the docstring, and
every failure turned into an error result the model sees."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import pytest
from pydantic import Field

from parley.tools.function import FunctionTool, function_tool
from parley.tools.protocol import ToolContext, ToolError, ToolOutput
from tests.tools.contexts import tool_context

pytestmark = pytest.mark.anyio


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    return tool_context(tmp_path)


@function_tool
async def lookup(
    city: str,
    context: ToolContext,
    days: int = 3,
    units: str = "metric",
    tags: list[str] | None = None,
) -> str:
    """Look up the weather forecast for a city.

    More detail that is still part of the description.

    Args:
        city: The city's name,
            with its country when it is ambiguous.
        days: How many days ahead.
            Note: at most a week.
        units: metric or imperial.

    Returns:
        The forecast.
    """
    return f"{city}/{days}/{units}/{tags}/{context.owner}"


def test_schema_comes_from_the_signature() -> None:
    spec = lookup.spec
    assert spec.name == "lookup"
    assert spec.description == (
        "Look up the weather forecast for a city.\n\n"
        "More detail that is still part of the description."
    )
    params = spec.parameters
    assert params["type"] == "object"
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert set(props) == {"city", "days", "units", "tags"}  # no context
    assert props["city"] == {
        "type": "string",
        "description": "The city's name, with its country when it is ambiguous.",
    }
    assert props["days"]["default"] == 3
    assert props["days"]["type"] == "integer"
    assert props["days"]["description"] == "How many days ahead. Note: at most a week."
    assert props["units"]["default"] == "metric"
    assert "description" not in props["tags"]
    assert all("title" not in p for p in props.values())
    assert "Returns" not in spec.description


def test_annotated_constraints_reach_the_schema_and_validation() -> None:
    @function_tool(name="bounded", pinned=True)
    def tool(limit: Annotated[int, Field(ge=1, le=50)] = 10) -> str:
        """Bounded."""
        return str(limit)

    assert tool.pinned
    assert tool.spec.name == "bounded"
    assert tool.spec.parameters["properties"]["limit"] == {
        "type": "integer",
        "default": 10,
        "minimum": 1,
        "maximum": 50,
    }


async def test_context_is_injected(context: ToolContext) -> None:
    output = await lookup.run({"city": "Oslo"}, context)
    assert output == ToolOutput("Oslo/3/metric/None/alice")


async def test_a_model_cannot_pass_the_context(context: ToolContext) -> None:
    output = await lookup.run({"city": "Oslo", "context": "x"}, context)
    assert output.is_error
    assert "context" in output.content


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "city: Field required"),
        ({"city": "Oslo", "days": "many"}, "days:"),
        ({"city": "Oslo", "surprise": 1}, "surprise:"),
        ({"city": ["not", "a", "string"]}, "city:"),
    ],
)
async def test_invalid_arguments_become_an_error_result(
    context: ToolContext, arguments: dict[str, Any], fragment: str
) -> None:
    output = await lookup.run(arguments, context)
    assert output.is_error
    assert output.content.startswith("Invalid arguments for tool 'lookup'")
    assert fragment in output.content


async def test_tool_error_becomes_an_error_result(context: ToolContext) -> None:
    @function_tool
    async def picky() -> str:
        """Refuses."""
        raise ToolError("not today")

    assert await picky.run({}, context) == ToolOutput("not today", is_error=True)


async def test_an_unexpected_exception_becomes_an_error_result(
    context: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    @function_tool
    async def broken() -> str:
        """Breaks."""
        raise KeyError("missing")

    output = await broken.run({}, context)
    assert output.is_error
    assert output.content == "Tool 'broken' failed: KeyError: 'missing'"
    assert "tool broken failed" in caplog.text


async def test_a_sync_function_runs_in_a_worker_thread(context: ToolContext) -> None:
    loop_thread = threading.get_ident()

    @function_tool
    def blocking(x: int) -> dict[str, int]:
        """Blocks."""
        return {"x": x, "same_thread": int(threading.get_ident() == loop_thread)}

    output = await blocking.run({"x": 2}, context)
    assert orjson.loads(output.content) == {"x": 2, "same_thread": 0}


@dataclass
class Point:
    x: int
    y: int


async def test_non_string_returns_are_sent_as_json(context: ToolContext) -> None:
    @function_tool
    async def shapes() -> list[Any]:
        """Shapes."""
        return [Point(1, 2), {"name": "ünïcode"}, None, 1.5, Path("/tmp")]

    output = await shapes.run({}, context)
    assert not output.is_error
    assert orjson.loads(output.content) == [
        {"x": 1, "y": 2},
        {"name": "ünïcode"},
        None,
        1.5,
        "/tmp",
    ]


async def test_a_returned_tool_output_is_kept(context: ToolContext) -> None:
    @function_tool
    async def custom() -> ToolOutput:
        """Custom."""
        return ToolOutput("soft failure", is_error=True)

    assert await custom.run({}, context) == ToolOutput("soft failure", is_error=True)


def test_var_arguments_are_refused() -> None:
    def spread(*values: int) -> str:
        """Spread."""
        return ""

    with pytest.raises(TypeError, match=r"\*args"):
        FunctionTool(spread)
