"""Tools written as typed Python functions.

The docstring's first paragraph is the description, an ``Args:`` section (Google style)
describes the parameters, and the JSON schema comes from the signature through pydantic.
A parameter annotated ``ToolContext`` receives the context and is not shown to the
model. Arguments are validated before the function runs; a validation failure, a
``ToolError`` or any other exception becomes an error result the model sees.

    @function_tool
    async def current_time(context: ToolContext) -> str:
        \"\"\"The current time in ISO 8601 with the server's time zone.\"\"\"

Sync functions run in a worker thread. A return value that is not a string is sent as
JSON.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import typing
from collections.abc import Awaitable, Callable
from typing import Any, overload

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from parley.messages import ToolSpec
from parley.tools.protocol import ToolContext, ToolError, ToolOutput

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION_HEADER = re.compile(r"^\s*(Returns|Yields|Raises|Examples?|Notes?|Warnings?):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


class FunctionTool:
    """A server tool made from a function."""

    def __init__(self, function: ToolFunction, *, name: str | None = None, pinned: bool = False):
        self.function = function
        self._pinned = pinned
        self._is_async = inspect.iscoroutinefunction(function)
        description, arg_docs = _parse_docstring(inspect.getdoc(function) or "")
        hints = typing.get_type_hints(function, include_extras=True)
        self._context_param: str | None = None
        fields: dict[str, Any] = {}
        for param in inspect.signature(function).parameters.values():
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext:
                self._context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {function.__name__}: *args and **kwargs are not allowed")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (
                annotation,
                Field(default=default, description=arg_docs.get(param.name)),
            )
        tool_name = name or function.__name__
        self._model: type[BaseModel] = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        self._spec = ToolSpec(tool_name, description, schema)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    @property
    def pinned(self) -> bool:
        return self._pinned

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        name = self._spec.name
        try:
            parsed = self._model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return ToolOutput(f"Invalid arguments for tool '{name}': {problems}", is_error=True)
        kwargs = {field: getattr(parsed, field) for field in type(parsed).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = context
        try:
            if self._is_async:
                value = await self.function(**kwargs)
            else:
                value = await asyncio.to_thread(self.function, **kwargs)
        except ToolError as exc:
            return ToolOutput(str(exc) or f"Tool '{name}' failed", is_error=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("tool %s failed", name)
            return ToolOutput(f"Tool '{name}' failed: {type(exc).__name__}: {exc}", is_error=True)
        if isinstance(value, ToolOutput):
            return value
        if isinstance(value, str):
            return ToolOutput(value)
        return ToolOutput(orjson.dumps(value, default=str).decode())


@overload
def function_tool(
    function: ToolFunction, /, *, name: str | None = None, pinned: bool = False
) -> FunctionTool: ...


@overload
def function_tool(
    *, name: str | None = None, pinned: bool = False
) -> Callable[[ToolFunction], FunctionTool]: ...


def function_tool(
    function: ToolFunction | None = None, /, *, name: str | None = None, pinned: bool = False
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Make a server tool of a typed function (usable bare or with options)."""
    if function is not None:
        return FunctionTool(function, name=name, pinned=pinned)

    def wrap(fn: ToolFunction) -> FunctionTool:
        return FunctionTool(fn, name=name, pinned=pinned)

    return wrap


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a Google-style docstring."""
    lines = doc.splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    current: str | None = None
    arg_indent: int | None = None  # continuation lines are indented deeper than this
    in_args = False
    in_description = True
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
            in_description = False
            continue
        if _SECTION_HEADER.match(line):
            in_args = in_description = False
            continue
        if in_args:
            indent = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                args[current] = match.group(2).strip()
            elif line.strip() and current is not None and line.startswith((" ", "\t")):
                args[current] = f"{args[current]} {line.strip()}".strip()
            elif line.strip():
                in_args = False  # another section starts
                current = None
            continue
        if in_description:
            description.append(line)
    text = "\n".join(description).strip()
    return text, args
