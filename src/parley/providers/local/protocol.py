"""The frames between the server and its local-model worker: one JSON object per line.

The server writes ``Load`` once, then ``Generate`` and ``Cancel``; the worker answers
``Ready`` (or ``LoadFailed``) once, then for each generation its ``Piece`` frames and one
``Finished`` or ``Failed``. The line format and ``ProtocolError`` are ``parley.frames``':
a worker writing junk is treated as broken, never trusted.

What does not belong here: processes, pipes and their timing (``supervisor``, ``worker``).
Only the standard library, orjson and ``parley.frames`` are imported: the worker starts
with this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from parley.frames import ProtocolError as ProtocolError  # the protocol's, re-exported
from parley.frames import by_kind, decode
from parley.frames import encode as encode


@dataclass(frozen=True, slots=True)
class Load:
    """Load this model file; check it with a one-token generation when ``check``."""

    kind: ClassVar[str] = "load"
    path: str
    context_tokens: int
    threads: int
    backend: str = "llama"
    check: bool = True


@dataclass(frozen=True, slots=True)
class Generate:
    kind: ClassVar[str] = "generate"
    id: int
    messages: list[dict[str, str]]
    """Plain ``{"role", "content"}`` messages; the worker fits them to its context."""
    options: dict[str, Any] = field(default_factory=dict)
    """Sampling options in llama-cpp-python's names (temperature, top_p, stop, seed ...)."""
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    kind: ClassVar[str] = "cancel"
    id: int


@dataclass(frozen=True, slots=True)
class Ready:
    kind: ClassVar[str] = "ready"
    model: str
    context_tokens: int
    system_info: str
    """What the runtime says it was built with (llama.cpp's CPU features)."""
    load_seconds: float
    check_seconds: float
    pid: int


@dataclass(frozen=True, slots=True)
class LoadFailed:
    """The model could not be loaded (a Python error: a bad file, a missing package)."""

    kind: ClassVar[str] = "load_failed"
    message: str


@dataclass(frozen=True, slots=True)
class Piece:
    kind: ClassVar[str] = "piece"
    id: int
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    kind: ClassVar[str] = "finished"
    id: int
    finish_reason: str | None
    """``stop``, ``length`` (max_tokens reached) or None."""
    prompt_tokens: int
    completion_tokens: int
    kept_messages: int
    """How many of the request's messages fitted the context (the newest are kept)."""
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """The generation raised; the worker lives on and takes the next one."""

    kind: ClassVar[str] = "failed"
    id: int
    message: str


Request = Load | Generate | Cancel
Reply = Ready | LoadFailed | Piece | Finished | Failed

_REQUESTS: dict[str, type[Request]] = by_kind((Load, Generate, Cancel))
_REPLIES: dict[str, type[Reply]] = by_kind((Ready, LoadFailed, Piece, Finished, Failed))


def decode_request(line: bytes) -> Request:
    return decode(line, _REQUESTS)


def decode_reply(line: bytes) -> Reply:
    return decode(line, _REPLIES)
