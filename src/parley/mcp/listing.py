"""The tools a server lists, as Parley keeps them, and the checks each must pass first.

``vet`` turns one page of a server's ``tools/list`` into ``ToolInfo`` (what the model may
be offered) and ``SkippedTool`` (what it may not, and why). A tool is left out, with a
warning in the log, when its input schema is something a model could not use:

- its top-level ``type`` is not ``"object"`` (an absent one is taken as an object);
- ``properties``, if any, is not an object;
- it is not valid against its JSON Schema meta-schema (the one its ``$schema`` names,
  or 2020-12; ``format`` is not checked, since a pattern written for JavaScript's
  regular expressions need not compile in Python's);
- it is larger than ``MAX_SCHEMA_BYTES`` as compact JSON, or nested too deep to read.

Providers refuse a whole request over one invalid tool schema, so without this one bad
tool would fail every chat offered the server's tools. A description longer than
``MAX_DESCRIPTION_CHARS`` is cut (the tool stays): it is paid for in every request.

What does not belong here: fetching the listing (``client.py``), offering tools to the
model and running them (``tools.py``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
from jsonschema.validators import Draft202012Validator, validator_for  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

MAX_DESCRIPTION_CHARS = 2_000
MAX_SCHEMA_BYTES = 64 * 1024
_REASON_CHARS = 300


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as the server lists it (its description cut to ``MAX_DESCRIPTION_CHARS``)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    title: str | None = None


@dataclass(frozen=True, slots=True)
class SkippedTool:
    """A tool the server listed that the model is not offered, and why."""

    name: str
    reason: str


def vet(server: str, tools: list[types.Tool]) -> tuple[list[ToolInfo], list[SkippedTool]]:
    """The tools that pass, and those that do not (each logged as a warning)."""
    kept: list[ToolInfo] = []
    skipped: list[SkippedTool] = []
    for tool in tools:
        schema = dict(tool.input_schema)
        problem = schema_problem(schema)
        if problem is not None:
            log.warning("MCP server %r: tool %r is left out: %s", server, tool.name, problem)
            skipped.append(SkippedTool(tool.name, problem))
            continue
        description = tool.description or tool.title or tool.name
        kept.append(ToolInfo(tool.name, cut(description), schema, tool.title))
    return kept, skipped


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be a tool's input schema, or None when it can."""
    try:
        size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode())
    except (RecursionError, TypeError, ValueError):
        return "its input schema cannot be read (nested too deep?)"
    if size > MAX_SCHEMA_BYTES:
        return f"its input schema is {size:,} bytes, over the {MAX_SCHEMA_BYTES:,} allowed"
    kind = schema.get("type", "object")
    if kind != "object":
        return _short(f"its input schema's type is {kind!r}, not 'object'")
    if not isinstance(schema.get("properties", {}), dict):
        return "its input schema's properties are not an object"
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):
        return "its input schema's $schema is not a string"
    try:
        validator = validator_for(schema, default=Draft202012Validator)
        error = best_match(validator(validator.META_SCHEMA).iter_errors(schema))
    except Exception as exc:  # nested too deep, say: whatever it is, not offered
        return f"its input schema could not be checked ({type(exc).__name__})"
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top"
    return _short(f"its input schema is not valid JSON Schema (at {where}: {error.message})")


def cut(description: str) -> str:
    """``description`` cut to ``MAX_DESCRIPTION_CHARS`` characters, marked as cut."""
    if len(description) <= MAX_DESCRIPTION_CHARS:
        return description
    return description[: MAX_DESCRIPTION_CHARS - 1] + "…"


def _short(text: str) -> str:
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"
