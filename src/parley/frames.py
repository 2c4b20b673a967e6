"""Frames between the server and a child process: one JSON object a line, tagged by
``kind``.

Each protocol (``providers/local/protocol.py``, ``extraction/protocol.py``) declares its
frames as frozen dataclasses with a ``kind`` class variable and decodes with
``decode(line, by_kind(...))``. Anything that is not one of the expected frames is a
``ProtocolError``, so a child that writes junk is treated as broken, never trusted
(frames are plain JSON, never pickles).

Only the standard library and orjson are imported: child processes start with this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol, TypeVar

import orjson


class ProtocolError(ValueError):
    """A line that is not a frame of the protocol."""


class Frame(Protocol):
    kind: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Any]]


F = TypeVar("F", bound=Frame)


def by_kind(frames: Iterable[type[F]]) -> dict[str, type[F]]:
    """The frame classes by their ``kind``."""
    return {cls.kind: cls for cls in frames}


def encode(frame: Frame) -> bytes:
    fields = {f.name: getattr(frame, f.name) for f in dataclasses.fields(frame)}
    return orjson.dumps({"kind": frame.kind, **fields}) + b"\n"


def decode(line: bytes, kinds: dict[str, type[F]]) -> F:
    """The frame on ``line``, of one of ``kinds``."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {line[:80]!r}") from exc
    if not isinstance(data, dict):
        raise ProtocolError(f"not an object: {line[:80]!r}")
    cls = kinds.get(data.pop("kind", None))
    if cls is None:
        raise ProtocolError(f"unknown frame: {line[:80]!r}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ProtocolError(f"bad {cls.__name__} frame: {exc}") from exc
