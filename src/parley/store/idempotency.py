"""Requests sent with an ``Idempotency-Key``: who holds each key, and the response to
give again.

One row per key of one API key (its ``scope``). ``claim`` gives a key to a new request
(a ``running`` row) unless a live row holds it already, which it returns instead;
``finish`` keeps the response, ``release`` forgets the key (the request may run again).
At start-up, rows still ``running`` were being answered by a process that is gone: they
become ``interrupted``. Rows leave ``ttl`` seconds after their request arrived.

What does not belong here: reading requests and recording responses, and which responses
are kept (``api/idempotency.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.exc import IntegrityError

from parley.store.database import Database
from parley.store.schema import idempotency_keys as table

State = Literal["running", "done", "interrupted"]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True, slots=True)
class Record:
    """A live key: the fingerprint of the request that holds it, and how that request
    went (``response`` once it is ``done``)."""

    fingerprint: str
    state: State
    response: StoredResponse | None = None
    message_id: str | None = None
    """While it runs: the reply it streams, if it streams one."""


class IdempotencyStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def claim(self, scope: str, key: str, fingerprint: str, ttl: float) -> Record | None:
        """``None`` when the key is now this request's (a ``running`` row), else the
        record of the live row that holds it. An expired row is replaced."""
        now = time.time()
        row = {
            "scope": scope,
            "key": key,
            "fingerprint": fingerprint,
            "state": "running",
            "created_at": now,
            "expires_at": now + ttl,
        }
        where = (table.c.scope == scope, table.c.key == key)

        def transaction(conn: Connection) -> Record | None:
            found = conn.execute(select(table).where(*where)).first()
            if found is not None and found.expires_at > now:
                return _record(found._mapping)
            if found is not None:
                conn.execute(delete(table).where(*where))
            conn.execute(table.insert().values(row))
            return None

        try:
            return await self._db.write(transaction)
        except IntegrityError:  # another instance claimed it between our read and write
            return await self.get(scope, key)

    async def get(self, scope: str, key: str) -> Record | None:
        """The live record of the key, if any."""
        statement = select(table).where(
            table.c.scope == scope, table.c.key == key, table.c.expires_at > time.time()
        )

        def query(conn: Connection) -> Record | None:
            found = conn.execute(statement).first()
            return None if found is None else _record(found._mapping)

        return await self._db.read(query)

    async def finish(self, scope: str, key: str, response: StoredResponse) -> None:
        """Keep the response of the request that holds the key."""
        statement = (
            update(table)
            .where(table.c.scope == scope, table.c.key == key, table.c.state == "running")
            .values(
                state="done",
                status=response.status,
                headers=[list(pair) for pair in response.headers],
                body=response.body,
            )
        )
        await self._db.write(lambda conn: conn.execute(statement))

    async def streaming(self, scope: str, key: str, message_id: str) -> None:
        """The request holding the key streams the reply ``message_id``."""
        statement = (
            update(table)
            .where(table.c.scope == scope, table.c.key == key, table.c.state == "running")
            .values(message_id=message_id)
        )
        await self._db.write(lambda conn: conn.execute(statement))

    async def release(self, scope: str, key: str) -> None:
        """Forget the key: a request sent with it again runs again."""
        statement = delete(table).where(
            table.c.scope == scope, table.c.key == key, table.c.state == "running"
        )
        await self._db.write(lambda conn: conn.execute(statement))

    async def interrupt_running(self) -> int:
        """At start-up: keys whose request was still running when the process ended."""
        statement = update(table).where(table.c.state == "running").values(state="interrupted")

        def transaction(conn: Connection) -> int:
            return int(conn.execute(statement).rowcount or 0)

        return await self._db.write(transaction)

    async def purge(self) -> int:
        """Drop expired rows; how many went."""
        statement = delete(table).where(table.c.expires_at <= time.time())

        def transaction(conn: Connection) -> int:
            return int(conn.execute(statement).rowcount or 0)

        return await self._db.write(transaction)


def _record(row: Any) -> Record:
    response = None
    if row["state"] == "done":
        headers = tuple((str(name), str(value)) for name, value in row["headers"] or ())
        response = StoredResponse(int(row["status"]), headers, bytes(row["body"] or b""))
    return Record(row["fingerprint"], row["state"], response, row["message_id"])
