"""How deeply a JSON request body nests, refused past ``server.max_json_depth``.

A body nested 1,000 levels parses (orjson and the standard library take about that
many), but nothing after the edge does: orjson writes at most 254 levels, so the
upstream request of a chat whose tool ``parameters`` nested that deep failed with a 500,
and the audit row's hash raised ``RecursionError``. Every JSON body is therefore held
to a depth (``{}`` and ``[]`` are 1 deep, ``{"a": []}`` 2) before anything else reads
it: chat bodies where they are parsed (``api/chat.py``), FastAPI's bodies by the
dependency ``shallow_body`` that every other router has after authentication.

The depth is read from the bytes, not by walking the parsed value: the strings are cut
out (escapes first), then the brackets are counted, all of it in C but for one pass
over the closing brackets. Only for a body that is valid JSON, which is checked first.

What does not belong here: reading the body (``api/chat.py``), the limit's value
(``settings.py``).
"""

from __future__ import annotations

import itertools
import json
import operator

from fastapi import Request

from parley.errors import InvalidRequest

_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


def depth(raw: bytes) -> int:
    """How deeply the valid JSON ``raw`` (UTF-8, or any encoding ``json`` detects) nests."""
    encoding = json.detect_encoding(raw)
    if encoding != "utf-8":  # only ASCII matters, and only UTF-8 keeps it one byte
        raw = raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    # escapes first (a run of backslashes pairs from its left, as JSON reads it), then
    # every other quote opens a string and the next one closes it
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])
    brackets = outside.translate(_SQUARE, _NOT_BRACKETS)
    # between one "]" and the next, the depth rises by the "["s there and falls by one
    runs = map(len, brackets.split(b"]"))
    return max(map(operator.sub, itertools.accumulate(runs), itertools.count()), default=0)


def check_depth(raw: bytes, limit: int) -> None:
    """Raise ``InvalidRequest`` when the valid JSON ``raw`` nests deeper than ``limit``."""
    found = depth(raw)
    if found > limit:
        raise InvalidRequest(
            f"the body is nested {found} levels deep; this server takes at most {limit}",
            code="json_too_deep",
        )


async def shallow_body(request: Request) -> None:
    """A FastAPI dependency: a JSON body FastAPI parsed is refused (400) when it nests
    deeper than ``server.max_json_depth``, before it is validated or used."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type and "json" not in content_type:
        return  # a form or an upload: FastAPI parses no JSON there
    raw = await request.body()  # read already, when FastAPI parsed it
    if raw.strip():
        check_depth(raw, request.app.state.parley.settings.server.max_json_depth)
