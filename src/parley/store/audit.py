"""The audit log: one row per model call, tool call and content detection.

Rows are queued in memory and written in batches (every ``flush_seconds``, and at
shutdown), so a call never waits for the database: auditing costs a list append on the
hot path. A row's ``request_hash`` may be given as the request itself; it is hashed
when the batch is written, off the caller's path (or at once when the writer is far
behind, so that requests are not held in memory). If the database lags, at most
``max_pending`` rows wait; beyond that the oldest are dropped and the loss is logged.
A batch the database refuses is written row by row: a row it still refuses is dropped
and logged, so one bad row never blocks the log; text longer than its column is cut. A
request is hashed from its canonical JSON, or, when orjson cannot write it (nested past
254 levels, an integer past 64 bits), by a walk of its own that cannot fail: a row whose
hash raised was put back with its batch, and no audit row was written after it.

What does not belong here: deciding what to record (``interceptors/builtins/audit.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import deque
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

import orjson
from sqlalchemy import Connection, String, delete, desc, insert, select

from parley.store.database import Database
from parley.store.schema import audit_log

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    owner: str
    key_id: str
    kind: str
    """``model``, ``tool`` or ``detection``."""
    name: str
    outcome: str
    at: float = 0.0
    """Unix time the call started (0: now)."""
    purpose: str | None = None
    source: str | None = None
    conversation_id: str | None = None
    message_id: str | None = None
    call_id: str | None = None
    provider: str | None = None
    upstream_model: str | None = None
    attempt: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    error_code: str | None = None
    latency_ms: float | None = None
    request_hash: str | None = None
    detail: dict[str, Any] | None = None
    hash_of: Any = None
    """Something to hash into ``request_hash`` when the row is written (a request
    dataclass, a dict); never stored itself."""


EAGER_HASH_BACKLOG = 1000
"""Queued rows beyond which a request is hashed as its row is added, not kept."""

COLUMNS = tuple(f.name for f in fields(AuditRecord) if f.name != "hash_of")


def request_hash(value: Any) -> str:
    """SHA-256 of a canonical JSON form (keys sorted; dataclasses as their fields). What
    orjson cannot write (an integer past 64 bits, nesting past 254 levels, a value whose
    ``str`` raises) is hashed by ``_walked_hash`` instead, which never fails: a row that
    could not be hashed would hold up every row after it."""
    try:
        data = orjson.dumps(
            value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str
        )
    except Exception:  # orjson.JSONEncodeError, or what a default=str raised
        return _walked_hash(value)
    return hashlib.sha256(data).hexdigest()


class _Mark:
    """A piece of structure (``{``, ``]`` ...) on ``_walked_hash``'s stack."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text


_OPEN_DICT, _CLOSE_DICT = _Mark(b"{"), _Mark(b"}")
_OPEN_LIST, _CLOSE_LIST = _Mark(b"["), _Mark(b"]")


def _walked_hash(value: Any) -> str:
    """SHA-256 of ``value`` walked with a stack of its own (any depth): containers as
    their pieces in order (dicts by sorted key), anything else as its JSON, else its
    ``repr``, else its type's name."""
    digest = hashlib.sha256(b"walked:")
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Mark):
            digest.update(item.text)
            continue
        if is_dataclass(item) and not isinstance(item, type):
            item = {f.name: getattr(item, f.name) for f in fields(item)}
        if isinstance(item, dict):
            pairs = sorted(((_leaf(k), v) for k, v in item.items()), key=lambda kv: kv[0])
            stack.append(_CLOSE_DICT)
            for key, child in reversed(pairs):
                stack += (child, _Mark(key + b":"))
            stack.append(_OPEN_DICT)
        elif isinstance(item, list | tuple):
            stack.append(_CLOSE_LIST)
            stack += reversed(item)
            stack.append(_OPEN_LIST)
        else:
            digest.update(_leaf(item) + b",")
    return digest.hexdigest()


def _leaf(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except Exception:
        try:
            return repr(value).encode("utf-8", "replace")
        except Exception:
            return f"<{type(value).__qualname__}>".encode()


class AuditLog:
    def __init__(
        self,
        database: Database,
        *,
        flush_seconds: float = 1.0,
        max_pending: int = 100_000,
        retention_days: float | None = None,
    ) -> None:
        self._db = database
        self._flush_seconds = flush_seconds
        self._pending: deque[AuditRecord] = deque()
        self._max_pending = max_pending
        self._retention = retention_days
        self._dropped = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()

    def add(self, record: AuditRecord) -> None:
        """Queue a row (never blocks)."""
        if record.hash_of is not None and len(self._pending) >= EAGER_HASH_BACKLOG:
            # The writer is behind: hash now rather than keep whole requests in memory.
            record = replace(record, request_hash=request_hash(record.hash_of), hash_of=None)
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self._dropped += 1
        self._pending.append(record)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="parley audit writer")

    async def close(self) -> None:
        """Stop the writer and write what is queued."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()

    async def _run(self) -> None:
        last_prune = 0.0
        while True:
            await asyncio.sleep(self._flush_seconds)
            try:
                await self.flush()
                if self._retention is not None and time.time() - last_prune > 86_400:
                    last_prune = time.time()
                    removed = await self.prune(time.time() - self._retention * 86_400)
                    if removed:
                        log.info("audit log: %d row(s) past retention deleted", removed)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("audit log: writing a batch failed; it will be retried")

    async def flush(self) -> int:
        """Write every queued row now; returns how many were written."""
        async with self._flushing:
            if self._dropped:
                log.error("audit log: %d row(s) dropped while the database lagged", self._dropped)
                self._dropped = 0
            if not self._pending:
                return 0
            batch = list(self._pending)
            self._pending.clear()
            try:
                rows = await asyncio.to_thread(_rows, batch)
                if not rows:
                    return len(batch)
                try:
                    await self._db.write(lambda conn: conn.execute(insert(audit_log), rows))
                except Exception:
                    await self._one_by_one(rows)
            except BaseException:
                self._pending.extendleft(reversed(batch))  # retried with the next batch
                raise
            return len(batch)

    async def _one_by_one(self, rows: list[dict[str, Any]]) -> None:
        """After a failed batch: write each row alone and drop the ones the database
        refuses, so one bad row never blocks the log. If every row fails, the database
        itself is failing: the batch is kept for later (the exception propagates)."""
        refused: list[Exception] = []
        for row in rows:

            def one(conn: Connection, row: dict[str, Any] = row) -> None:
                conn.execute(insert(audit_log), [row])

            try:
                await self._db.write(one)
            except Exception as exc:
                refused.append(exc)
        if len(refused) == len(rows):
            raise refused[0]
        for problem in refused:
            log.error("audit log: a row the database refused was dropped: %r", problem)

    async def query(
        self,
        *,
        owner: str | None,
        kind: str | None = None,
        name: str | None = None,
        conversation_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Rows, newest first. ``owner`` None means everyone's (admins only)."""
        try:
            await self.flush()  # a row of a call that just ended is visible at once
        except Exception:
            log.warning("audit log: queued rows could not be written yet", exc_info=True)
        table = audit_log.c
        query = select(audit_log).order_by(desc(table.id)).limit(limit)
        if owner is not None:
            query = query.where(table.owner == owner)
        if kind is not None:
            query = query.where(table.kind == kind)
        if name is not None:
            query = query.where(table.name == name)
        if conversation_id is not None:
            query = query.where(table.conversation_id == conversation_id)
        if since is not None:
            query = query.where(table.at >= since)
        if until is not None:
            query = query.where(table.at < until)
        if before_id is not None:
            query = query.where(table.id < before_id)

        def run(conn: Connection) -> list[dict[str, Any]]:
            return [dict(row._mapping) for row in conn.execute(query)]

        return await self._db.read(run)

    async def prune(self, older_than: float) -> int:
        def run(conn: Connection) -> int:
            result = conn.execute(delete(audit_log).where(audit_log.c.at < older_than))
            return int(result.rowcount or 0)

        return await self._db.write(run)


_LENGTHS = {
    column.name: column.type.length
    for column in audit_log.columns
    if isinstance(column.type, String) and column.type.length
}
"""Text columns' sizes: longer values are cut (PostgreSQL would refuse the row)."""


def _rows(batch: list[AuditRecord]) -> list[dict[str, Any]]:
    """The rows of a batch; a record that cannot be made a row is dropped and logged
    (alone: the rest of the batch is written)."""
    now = time.time()
    rows = []
    for record in batch:
        try:
            rows.append(_row(record, now))
        except Exception:
            log.exception("audit log: a row that could not be prepared was dropped")
    return rows


def _row(record: AuditRecord, now: float) -> dict[str, Any]:
    row = {name: getattr(record, name) for name in COLUMNS}
    for name, length in _LENGTHS.items():
        value = row[name]
        if isinstance(value, str) and len(value) > length:
            row[name] = value[:length]
    if not row["at"]:
        row["at"] = now
    if record.hash_of is not None and row["request_hash"] is None:
        row["request_hash"] = request_hash(record.hash_of)
    return row
