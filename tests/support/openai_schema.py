"""OpenAI's own schemas (``openai_spec/chat.json``, vendored with its source and licence
in ``openai_spec/NOTICE.md``) as validators for what Parley answers."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SPEC = Path(__file__).parent / "openai_spec" / "chat.json"


@functools.cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SPEC.read_text())
    return document


@functools.cache
def validator(name: str) -> Draft202012Validator:
    """A validator for the schema ``name`` of the document's components."""
    document = _document()
    root = {"components": document["components"], "$ref": f"#/components/schemas/{name}"}
    return Draft202012Validator(root)


def check(name: str, instance: Any) -> None:
    """Fail, listing every difference, unless ``instance`` is a valid ``name``."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    assert not errors, f"not a valid {name}:\n" + "\n".join(
        f"- at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}" for e in errors
    )


def request_fields() -> set[str]:
    """Every field of ``CreateChatCompletionRequest``, those it takes from the schemas
    it is made of (``allOf``) included."""
    return set(_properties("CreateChatCompletionRequest"))


def _properties(name: str) -> dict[str, Any]:
    schema = _document()["components"]["schemas"][name]
    found: dict[str, Any] = dict(schema.get("properties") or {})
    for part in schema.get("allOf") or ():
        if "$ref" in part:
            found.update(_properties(part["$ref"].rsplit("/", 1)[-1]))
        else:
            found.update(part.get("properties") or {})
    return found
