"""Temporary knowledge bases: the storage behind Langchain-Chatchat's file chat
(``/knowledge_base/upload_temp_docs``, ``search_temp_docs`` and the chat at
``/knowledge_base/temp_kb/{id}/chat/completions``).

A temporary base is a real knowledge base of its owner, indexed, searched and deleted
like any other, with an expiry (``knowledge_bases.expires_at``): it lives
``knowledge.temporary_ttl_seconds`` after its last upload. Its id (``kb_...``) is the
"temporary knowledge base id" Chatchat's clients keep; its name is made up
(``temporary-<hex>``) and never shown, as the listings leave temporary bases out
(``KnowledgeStore.bases``). Another owner's temporary base, a permanent base and an
expired one are all simply missing to ``find``.

Expired bases are deleted through ``KnowledgeService.delete`` (documents, chunks,
vectors and files) by a sweep that runs lazily, on temporary uploads and lookups, at
most once per ``SWEEP_SECONDS`` per service; one sweep covers every owner. Between
sweeps an expired base is already missing: ``find`` deletes it on the spot.

What does not belong here: HTTP (``api/chatchat/temp.py``), the SQL
(``store/knowledge.py``).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from weakref import WeakKeyDictionary

from parley.errors import InvalidRequest
from parley.knowledge.service import KnowledgeService
from parley.settings.knowledge import MIN_CHUNK_SIZE
from parley.store.knowledge import ID_PREFIX, KnowledgeBase

log = logging.getLogger(__name__)

NAME_PREFIX = "temporary-"
DESCRIPTION = "Temporary knowledge base (file chat)"
MAX_CHUNK_SIZE = 20_000
"""As ``knowledge.chunk_size`` allows at most."""
SWEEP_SECONDS = 60.0
"""The least time between two sweeps of one service: a sweep is a query on every
temporary upload and lookup otherwise."""
SWEEP_BATCH = 200
"""The most bases one sweep deletes; more wait for the next sweep (deletion itself is
quick: the rows and files are purged in the background)."""


class TemporaryBases:
    """The temporary bases of one ``KnowledgeService``, on a clock: ``time.time``, the
    clock of the expiries stored, unless a test gives its own."""

    def __init__(
        self, service: KnowledgeService, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.service = service
        self._clock = clock
        self._swept_at = -math.inf

    @property
    def ttl(self) -> float:
        return float(self.service.settings.temporary_ttl_seconds)

    async def create(self, owner: str, *, chunk_size: int, chunk_overlap: int) -> KnowledgeBase:
        """A new, empty temporary base of ``owner``'s, expiring a full TTL from now.
        ``InvalidRequest`` for chunking the service would refuse."""
        problem = chunking_problem(chunk_size, chunk_overlap)
        if problem is not None:
            raise InvalidRequest(problem[1], param=problem[0], code=f"invalid_{problem[0]}")
        return await self.service.store.create(
            owner,
            f"{NAME_PREFIX}{uuid.uuid4().hex}",
            description=DESCRIPTION,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            expires_at=self._clock() + self.ttl,
        )

    async def find(self, owner: str, knowledge_id: str) -> KnowledgeBase | None:
        """The owner's live temporary base of this id; None when it is missing, another
        owner's, permanent or expired (an expired one is deleted now)."""
        await self.sweep()
        if not knowledge_id.startswith(ID_PREFIX):
            return None
        try:
            base = await self.service.store.get(owner, knowledge_id)
        except LookupError:
            return None
        if base.expires_at is None:
            return None
        if base.expires_at <= self._clock():
            await self._delete(owner, base.id)
            return None
        return base

    async def renew(self, owner: str, kb_id: str) -> float:
        """Move the base's expiry a full TTL from now (after an upload to it); the new
        expiry. ``LookupError``: it was deleted meanwhile."""
        expires_at = self._clock() + self.ttl
        await self.service.store.set_expiry(owner, kb_id, expires_at)
        return expires_at

    async def sweep(self, *, force: bool = False) -> int:
        """Delete expired bases unless a sweep ran less than ``SWEEP_SECONDS`` ago
        (``force``: whatever the last); how many were deleted. A failure is logged, not
        raised: the request that triggered the sweep has its own work to do."""
        now = self._clock()
        if not force and now - self._swept_at < SWEEP_SECONDS:
            return 0
        self._swept_at = now  # before any await: concurrent callers skip this sweep
        try:
            expired = await self.service.store.expired(now, limit=SWEEP_BATCH)
        except Exception:
            log.exception("could not list the expired temporary knowledge bases")
            return 0
        deleted = 0
        for owner, kb_id in expired:
            deleted += await self._delete(owner, kb_id)
        if deleted:
            log.info("deleted %d expired temporary knowledge bases", deleted)
        return deleted

    async def _delete(self, owner: str, kb_id: str) -> int:
        """1 when this call deleted the base; 0 when it was gone already (another
        request or instance deleted it) or could not be deleted (logged; swept again)."""
        try:
            await self.service.delete(owner, kb_id)
        except LookupError:
            return 0
        except Exception:
            log.exception("could not delete the expired temporary knowledge base %s", kb_id)
            return 0
        return 1


def chunking_problem(chunk_size: int, chunk_overlap: int) -> tuple[str, str] | None:
    """(the field, why) when the chunking is one ``KnowledgeService.create`` refuses,
    or larger than the server's settings allow."""
    if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
        return "chunk_size", f"chunk_size must be {MIN_CHUNK_SIZE} to {MAX_CHUNK_SIZE}"
    if chunk_overlap < 0 or chunk_overlap * 2 >= chunk_size:
        return "chunk_overlap", "chunk_overlap must be at least 0 and less than half of chunk_size"
    return None


_by_service: WeakKeyDictionary[KnowledgeService, TemporaryBases] = WeakKeyDictionary()


def temporary_bases(service: KnowledgeService) -> TemporaryBases:
    """The service's ``TemporaryBases`` (one per service, so that the sweep's pace is
    kept across requests)."""
    found = _by_service.get(service)
    if found is None:
        found = _by_service[service] = TemporaryBases(service)
    return found


async def find_temp_base(
    service: KnowledgeService, owner: str, knowledge_id: str
) -> KnowledgeBase | None:
    """The owner's temporary base ``knowledge_id`` (as ``upload_temp_docs`` answered
    it); None when it is missing, expired or another owner's. Sweeps expired bases
    first (at most once a minute)."""
    return await temporary_bases(service).find(owner, knowledge_id)
