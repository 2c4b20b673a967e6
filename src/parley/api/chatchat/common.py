"""What the ``/knowledge_base/*`` modules share: Chatchat's answer envelope and its stock
refusals, the caller and base lookup, Chatchat's defaults, listing a base's documents,
and the pace of the waits for indexing.

It serves ``api/chatchat/kb.py`` (the router, the knowledge-base routes and search,
and the notes on Chatchat compatibility and deviations), ``api/chatchat/docs.py`` (the
file routes) and ``api/chatchat/recreate.py`` (``recreate_vector_store``). A helper
used by one of them only stays in that module; no route is defined here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from parley.api.state import AppState
from parley.knowledge.service import KnowledgeService
from parley.store.knowledge import ID_PREFIX, Document, KnowledgeBase

CHUNK_SIZE = 750
"""Chatchat's ``kb_settings.CHUNK_SIZE``: the chunk size of bases made here."""
OVERLAP_SIZE = 150
"""Chatchat's ``kb_settings.OVERLAP_SIZE``."""
LIST_PAGE = 200
MAX_NAME = 100
PENDING = ("queued", "indexing")
"""The statuses of a document not yet done indexing."""
POLL_SECONDS = 0.2
"""How often a wait looks at the documents' status."""


# --- answers -----------------------------------------------------------------------------


def reply(code: int = 200, msg: str = "success", data: Any = None) -> dict[str, Any]:
    """Chatchat's ``BaseResponse``."""
    return {"code": code, "msg": msg, "data": data}


def missing_base(name: str) -> dict[str, Any]:
    return reply(404, f"knowledge base {name} not found")


def disabled() -> dict[str, Any]:
    return reply(404, "knowledge bases are turned off on this server (knowledge.enabled)")


def bad_name() -> dict[str, Any]:
    """Chatchat's ``validate_kb_name`` refusal."""
    return reply(403, "invalid knowledge base name")


def chatchat_time(stamp: float) -> str:
    """A time as Chatchat's ``create_time`` (ISO 8601, UTC, no zone)."""
    return datetime.fromtimestamp(stamp, UTC).replace(tzinfo=None).isoformat(timespec="seconds")


# --- caller and bases --------------------------------------------------------------------


async def caller(request: Request) -> tuple[KnowledgeService | None, str]:
    """The service (None: knowledge bases are off) and the caller's owner."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    return state.knowledge, owner


def valid_name(name: str) -> bool:
    """Chatchat's ``validate_kb_name``: no ``../``."""
    return "../" not in name


async def find_base(service: KnowledgeService, owner: str, name: str) -> KnowledgeBase | None:
    """The owner's base by name (or id); None when it is missing or another owner's."""
    if not name.strip():
        return None
    try:
        return await service.store.get(owner, name)
    except LookupError:
        return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new base (Parley's rules), or None."""
    if not name:
        return "the knowledge base name must not be empty"
    if len(name) > MAX_NAME:
        return f"the knowledge base name must be at most {MAX_NAME} characters"
    if name.startswith(ID_PREFIX):
        return f"a knowledge base name may not start with {ID_PREFIX!r} (ids do)"
    if "/" in name or any(ord(char) < 32 or ord(char) == 127 for char in name):
        return "a knowledge base name may not hold '/' or control characters"
    return None


async def all_documents(service: KnowledgeService, owner: str, kb_id: str) -> list[Document]:
    """Every document of the base, oldest first."""
    found: list[Document] = []
    after: str | None = None
    while True:
        page = await service.store.documents(owner, kb_id, limit=LIST_PAGE, after=after)
        found.extend(page)
        if len(page) < LIST_PAGE:
            return found
        after = page[-1].id


@dataclass(frozen=True, slots=True)
class OpenBase:
    service: KnowledgeService
    owner: str
    base: KnowledgeBase


async def open_base(request: Request, name: str) -> OpenBase | dict[str, Any]:
    """The caller's base named ``name``, or the Chatchat reply that says why not
    (knowledge bases are off, the name is invalid, there is no such base)."""
    service, owner = await caller(request)
    if service is None:
        return disabled()
    if not valid_name(name):
        return bad_name()
    base = await find_base(service, owner, name)
    if base is None:
        return missing_base(name)
    return OpenBase(service, owner, base)
