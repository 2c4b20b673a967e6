"""Memories in the database: the only SQL for the ``memories`` table.

A memory belongs to an owner and to a scope: an assistant (``assistant_id``, the scope is
the assistant's id) or no assistant (``assistant_id`` NULL, the scope ``"global"``).
Every public method is one transaction, and the owner (and the scope, where one is
given) is a condition inside the query itself: another owner's memory, or one outside
the scope asked for, is missing (``LookupError``), exactly like one that does not exist.

The ``terms`` column (``knowledge.lexical.index_terms`` of the text) feeds the lexical
index: on SQLite the external-content FTS5 table ``memories_fts``, kept in step by the
triggers of migration 0005 on insert, update of ``terms`` and delete; on PostgreSQL a GIN
index on ``to_tsvector('simple', terms)``. A memory's vector (float32 bytes, little
endian, unit length) sits in its own row with the name of the model that made it, so
deleting a memory deletes its vector and its index entry in the same transaction.

A memory of an assistant is written only while the assistant exists, checked in the
transaction that writes it (``ScopeGone``): a memory embedded while its assistant was
being deleted is not left behind, out of every scope.

Limits: ``MAX_TEXT_CHARS`` per memory, ``MAX_MEMORIES`` per owner (``MemoryLimitReached``
when full; on PostgreSQL two writers racing at the limit may pass it by one each), and
``MAX_VECTORS`` vectors read for one vector search (the newest; older memories are then
found lexically only). Memories per scope are expected to number in the thousands at
most: vectors are searched exactly, in memory, by the caller (``service.py``).

The PostgreSQL branch of ``search`` is written to match the migration's index but is
not exercised by the test suite (which runs on SQLite).

What does not belong here: embedding and ranking (``service.py``), the API's wire
format (``api/memories.py``).
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, Connection, and_, delete, func, or_, select, text, update

from parley.errors import Conflict, InvalidRequest, NotFound
from parley.ids import new_id
from parley.knowledge.lexical import (
    fts5_expression,
    index_terms,
    query_terms,
    tsquery_expression,
)
from parley.store.assistants import ID_PREFIX as ASSISTANT_PREFIX
from parley.store.database import Database
from parley.store.schema import assistants, memories

log = logging.getLogger(__name__)

GLOBAL = "global"
"""The scope of memories that belong to no assistant."""
MAX_TEXT_CHARS = 2_000
MAX_MEMORIES = 10_000
"""Per owner, all scopes together."""
MAX_VECTORS = 5_000
"""The most vectors one vector search reads (the newest memories of the scope)."""

Source = Literal["api", "tool"]
Vector = npt.NDArray[np.float32]

_FIELDS = (
    "id",
    "owner",
    "assistant_id",
    "text",
    "source",
    "conversation_id",
    "embedding_model",
    "created_at",
    "updated_at",
)
_COLUMNS = tuple(memories.c[name] for name in _FIELDS)


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    owner: str
    assistant_id: str | None
    """None: a global memory."""
    text: str
    source: Source
    conversation_id: str | None
    """The conversation a memory tool saved it from (None: made over the API)."""
    embedding_model: str | None
    """The model of the stored vector; None: no vector (found lexically only)."""
    created_at: float
    updated_at: float

    @property
    def scope(self) -> str:
        return self.assistant_id or GLOBAL


class MemoryLimitReached(Conflict):
    code = "memory_limit_reached"


class ScopeGone(NotFound):
    """The assistant a memory was for was deleted (while its text was embedded)."""

    code = "assistant_not_found"


def assistant_of(scope: str) -> str | None:
    """The ``assistant_id`` of a scope: None for ``"global"``, else the assistant's id.
    ``ValueError`` for anything else (a name is not a scope)."""
    if scope == GLOBAL:
        return None
    if not scope.startswith(ASSISTANT_PREFIX) or len(scope) > 40:
        raise ValueError(f"not a memory scope: {scope!r}")
    return scope


def clean_text(value: str) -> str:
    """The text as stored: stripped, not empty, at most ``MAX_TEXT_CHARS``;
    ``InvalidRequest`` otherwise."""
    stripped = value.strip()
    if not stripped:
        raise InvalidRequest("a memory's text must not be empty", param="text")
    if len(stripped) > MAX_TEXT_CHARS:
        raise InvalidRequest(
            f"a memory's text is limited to {MAX_TEXT_CHARS} characters "
            f"(this one has {len(stripped)})",
            param="text",
            code="memory_too_long",
        )
    return stripped


class MemoryStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def create(
        self,
        owner: str,
        text: str,
        *,
        assistant_id: str | None,
        source: Source,
        conversation_id: str | None = None,
        embedding_model: str | None = None,
        vector: Vector | None = None,
    ) -> Memory:
        """A new memory (its text cleaned by ``clean_text``), or the one the scope
        already holds with exactly this text (unchanged: remembering twice keeps one).
        ``MemoryLimitReached`` when the owner already has ``MAX_MEMORIES``; ``ScopeGone``
        when the assistant is not (or no longer) the owner's."""
        body = clean_text(text)
        if assistant_id is not None:
            assistant_of(assistant_id)
        model, blob = _embedding(embedding_model, vector)
        now = time.time()
        memory = Memory(
            id=new_id("mem"),
            owner=owner,
            assistant_id=assistant_id,
            text=body,
            source=source,
            conversation_id=conversation_id,
            embedding_model=model,
            created_at=now,
            updated_at=now,
        )
        row = {name: getattr(memory, name) for name in _FIELDS}
        row.update(terms=index_terms(body), embedding=blob)
        count = select(func.count()).select_from(memories).where(memories.c.owner == owner)
        same = select(*_COLUMNS).where(
            memories.c.owner == owner, *_in_scope(memory.scope), memories.c.text == body
        )

        def transaction(conn: Connection) -> Memory:
            if assistant_id is not None and not _assistant_exists(conn, owner, assistant_id):
                raise ScopeGone(f"assistant {assistant_id!r} not found", param="assistant_id")
            existing = conn.execute(same.limit(1)).first()
            if existing is not None:
                return _memory(existing._mapping)
            if conn.execute(count).scalar_one() >= MAX_MEMORIES:
                raise MemoryLimitReached(
                    f"the memory is full ({MAX_MEMORIES} memories): forget some first"
                )
            conn.execute(memories.insert().values(row))
            return memory

        return await self._db.write(transaction)

    async def get(self, owner: str, memory_id: str, *, scope: str | None = None) -> Memory:
        """The owner's memory (in ``scope``, when given); ``LookupError`` when missing."""
        statement = select(*_COLUMNS).where(
            memories.c.id == memory_id, memories.c.owner == owner, *_in_scope(scope)
        )

        def query(conn: Connection) -> Memory:
            row = conn.execute(statement).first()
            if row is None:
                raise LookupError(memory_id)
            return _memory(row._mapping)

        return await self._db.read(query)

    async def list(
        self, owner: str, *, limit: int, after: str | None = None, scope: str | None = None
    ) -> list[Memory]:
        """Newest first; ``after`` is the id of the last memory of the previous page;
        ``scope`` keeps one scope's memories (None: every scope)."""
        table = memories.c
        statement = select(*_COLUMNS).where(table.owner == owner, *_in_scope(scope))
        if after is not None:
            pivot = (
                select(table.created_at)
                .where(table.id == after, table.owner == owner)
                .scalar_subquery()
            )
            statement = statement.where(
                or_(table.created_at < pivot, and_(table.created_at == pivot, table.id < after))
            )
        statement = statement.order_by(table.created_at.desc(), table.id.desc()).limit(limit)
        return await self._db.read(
            lambda conn: [_memory(row._mapping) for row in conn.execute(statement).all()]
        )

    async def update(
        self,
        owner: str,
        memory_id: str,
        text: str,
        *,
        embedding_model: str | None = None,
        vector: Vector | None = None,
    ) -> Memory:
        """New text (and terms). The old vector is dropped: the new one is stored when
        given, else the memory waits to be embedded again. ``LookupError`` when missing."""
        body = clean_text(text)
        model, blob = _embedding(embedding_model, vector)
        values = {
            "text": body,
            "terms": index_terms(body),
            "embedding_model": model,
            "embedding": blob,
            "updated_at": time.time(),
        }
        mine = and_(memories.c.id == memory_id, memories.c.owner == owner)

        def transaction(conn: Connection) -> Memory:
            if conn.execute(update(memories).where(mine).values(values)).rowcount == 0:
                raise LookupError(memory_id)
            return _memory(conn.execute(select(*_COLUMNS).where(mine)).one()._mapping)

        return await self._db.write(transaction)

    async def delete(self, owner: str, memory_id: str, *, scope: str | None = None) -> str:
        """Delete the memory (in ``scope``, when given) with its vector and index entry;
        returns its id. ``LookupError`` when missing."""
        statement = delete(memories).where(
            memories.c.id == memory_id, memories.c.owner == owner, *_in_scope(scope)
        )

        def transaction(conn: Connection) -> str:
            if conn.execute(statement).rowcount == 0:
                raise LookupError(memory_id)
            return memory_id

        return await self._db.write(transaction)

    async def delete_all(self, owner: str, scope: str) -> int:
        """Delete every memory of the owner in ``scope``; returns how many."""
        statement = delete(memories).where(memories.c.owner == owner, *_in_scope(scope))
        return await self._db.write(lambda conn: int(conn.execute(statement).rowcount))

    async def search(
        self, owner: str, scope: str, query: str, *, limit: int
    ) -> builtins.list[tuple[Memory, float]]:
        """The owner's memories in ``scope`` holding any term of ``query``, best first,
        with their lexical score (higher is better: -BM25 on SQLite, ts_rank on
        PostgreSQL). Owner and scope are conditions of the search query itself."""
        terms = query_terms(query)
        if not terms or limit < 1:
            return []
        assistant_id = assistant_of(scope)
        scope_sql = "m.assistant_id IS NULL" if assistant_id is None else "m.assistant_id = :aid"
        columns = ", ".join(f"m.{name}" for name in _FIELDS)
        params: dict[str, Any] = {"owner": owner, "limit": limit}
        if assistant_id is not None:
            params["aid"] = assistant_id

        def run(conn: Connection) -> list[tuple[Memory, float]]:
            if conn.dialect.name == "sqlite":
                statement = text(
                    f"SELECT {columns}, -bm25(memories_fts) AS score "
                    "FROM memories_fts JOIN memories AS m ON m.rowid = memories_fts.rowid "
                    f"WHERE memories_fts MATCH :expression AND m.owner = :owner AND {scope_sql} "
                    "ORDER BY score DESC, m.created_at DESC, m.id DESC LIMIT :limit"
                )
                expression = fts5_expression(terms)
            else:  # PostgreSQL: the expression matches the GIN index of migration 0005
                statement = text(
                    f"SELECT {columns}, ts_rank(to_tsvector('simple', m.terms), q) AS score "
                    "FROM memories AS m, to_tsquery('simple', :expression) AS q "
                    f"WHERE m.owner = :owner AND {scope_sql} "
                    "AND to_tsvector('simple', m.terms) @@ q "
                    "ORDER BY score DESC, m.created_at DESC, m.id DESC LIMIT :limit"
                )
                expression = tsquery_expression(terms)
            rows = conn.execute(statement, {**params, "expression": expression}).all()
            return [(_memory(row._mapping), float(row.score)) for row in rows]

        return await self._db.read(run, heavy=True)

    async def vectors(
        self, owner: str, scope: str, model: str, *, limit: int = MAX_VECTORS
    ) -> tuple[builtins.list[Memory], Vector]:
        """The newest ``limit`` memories of ``scope`` with a vector of ``model``, and
        their vectors as one (n, d) float32 matrix, row i for memory i. Vectors whose
        size differs from the newest one's are left out."""
        statement = (
            select(*_COLUMNS, memories.c.embedding)
            .where(
                memories.c.owner == owner,
                *_in_scope(scope),
                memories.c.embedding_model == model,
                memories.c.embedding.is_not(None),
            )
            .order_by(memories.c.created_at.desc(), memories.c.id.desc())
            .limit(limit)
        )

        def query(conn: Connection) -> tuple[list[Memory], Vector]:
            found: list[Memory] = []
            blobs: list[bytes] = []
            for row in conn.execute(statement):
                blob = bytes(row.embedding)
                if blobs and len(blob) != len(blobs[0]):
                    log.warning("memory %s: vector of another size, left out", row.id)
                    continue
                found.append(_memory(row._mapping))
                blobs.append(blob)
            if not blobs:
                return [], np.zeros((0, 0), dtype=np.float32)
            matrix = np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32)
            return found, matrix.reshape(len(blobs), -1)

        return await self._db.read(query)

    async def unembedded(
        self, owner: str, scope: str, model: str, *, limit: int
    ) -> builtins.list[Memory]:
        """The newest ``limit`` memories of ``scope`` without a vector of ``model`` (none
        at all, or another model's)."""
        statement = (
            select(*_COLUMNS)
            .where(
                memories.c.owner == owner,
                *_in_scope(scope),
                or_(
                    memories.c.embedding.is_(None),
                    memories.c.embedding_model.is_(None),
                    memories.c.embedding_model != model,
                ),
            )
            .order_by(memories.c.created_at.desc(), memories.c.id.desc())
            .limit(limit)
        )
        return await self._db.read(
            lambda conn: [_memory(row._mapping) for row in conn.execute(statement).all()]
        )

    async def set_vectors(
        self, owner: str, model: str, items: Sequence[tuple[Memory, Vector]]
    ) -> int:
        """Store vectors of ``model`` for memories whose text is still the one embedded
        (a memory edited meanwhile is left for the next time); ``updated_at`` stays.
        Returns how many were stored."""
        rows = [(memory.id, memory.text, _embedding(model, vector)[1]) for memory, vector in items]

        def transaction(conn: Connection) -> int:
            stored = 0
            for memory_id, body, blob in rows:
                stored += conn.execute(
                    update(memories)
                    .where(
                        memories.c.id == memory_id,
                        memories.c.owner == owner,
                        memories.c.text == body,
                    )
                    .values(embedding_model=model, embedding=blob)
                ).rowcount
            return stored

        return await self._db.write(transaction) if rows else 0


def _assistant_exists(conn: Connection, owner: str, assistant_id: str) -> bool:
    found = conn.execute(
        select(assistants.c.id).where(assistants.c.id == assistant_id, assistants.c.owner == owner)
    )
    return found.first() is not None


def _in_scope(scope: str | None) -> list[ColumnElement[bool]]:
    if scope is None:
        return []
    assistant_id = assistant_of(scope)
    if assistant_id is None:
        return [memories.c.assistant_id.is_(None)]
    return [memories.c.assistant_id == assistant_id]


def _embedding(model: str | None, vector: Vector | None) -> tuple[str | None, bytes | None]:
    """(embedding_model, embedding) column values: both or neither."""
    if vector is None or model is None:
        return None, None
    flat = np.asarray(vector, dtype=np.float32)
    if flat.ndim != 1 or flat.size == 0:
        raise ValueError(f"a memory's vector must be one non-empty row, not {flat.shape}")
    return model, flat.astype("<f4").tobytes()


def _memory(row: Any) -> Memory:
    return Memory(
        id=row["id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        text=row["text"],
        source=row["source"],
        conversation_id=row["conversation_id"],
        embedding_model=row["embedding_model"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
