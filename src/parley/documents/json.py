"""JSON for a knowledge base: one block per top-level key or array item, labelled with
its key or index and pretty-printed (short lists and objects on one line); a value whose
compact text is longer than ``JSON_BLOCK_CHARS`` is split into its own keys or items,
each labelled with its path (``users[3].name: ...``). Invalid JSON, and JSON nested too
deeply for the parser, is refused.

An attached JSON file is plain text (``text.plain_text``); telling JSON from other text
is ``kinds.py``'s.

What does not belong here: decoding (``text.py``).
"""

from __future__ import annotations

import json

from parley.documents.blocks import finish
from parley.documents.text import clean
from parley.documents.types import Block, ExtractedDocument, UnreadableDocument

JSON_BLOCK_CHARS = 1000
"""A JSON value whose compact text is longer than this is split into its keys or items."""
JSON_LINE_CHARS = 80
"""A JSON list or object whose compact text fits in this stays on one line."""


def read_json(text: str) -> ExtractedDocument:
    try:
        value = json.loads(text)
        blocks: list[Block] = []
        if isinstance(value, dict):
            for key, item in value.items():
                _json_blocks(item, str(key), blocks)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                _json_blocks(item, f"[{index}]", blocks)
        elif value is not None and value != "":
            _json_blocks(value, "", blocks)
    except ValueError as exc:
        raise UnreadableDocument(f"the file is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise UnreadableDocument("the JSON is nested too deeply to read") from exc
    return finish(blocks, title=None)


def _json_blocks(value: object, path: str, blocks: list[Block]) -> None:
    if isinstance(value, str):
        text = value
    elif (
        isinstance(value, dict | list)
        and value
        and len(json.dumps(value, ensure_ascii=False)) > JSON_BLOCK_CHARS
    ):
        if isinstance(value, dict):
            for key, item in value.items():
                _json_blocks(item, f"{path}.{key}" if path else str(key), blocks)
        else:
            for index, item in enumerate(value):
                _json_blocks(item, f"{path}[{index}]", blocks)
        return
    else:
        text = _pretty(value, 0)
    text = clean(f"{path}: {text}" if path else text).strip()
    if text:
        blocks.append(Block(text))


def _pretty(value: object, depth: int) -> str:
    """``value`` as JSON indented by two spaces, with a list or object that fits in
    ``JSON_LINE_CHARS`` kept on one line. (``json.dumps(indent=2)`` runs in Python and
    is several times slower.)"""
    compact = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or len(compact) + 2 * depth <= JSON_LINE_CHARS:
        return compact
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(key, ensure_ascii=False)}: {_pretty(item, depth + 1)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    items = [pad + _pretty(item, depth + 1) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + "  " * depth + "]"
