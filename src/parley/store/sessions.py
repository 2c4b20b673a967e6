"""Browser sessions: a signed-in browser's cookie, kept as the SHA-256 of its token.

A row names the API key the session stands for, and when it ends. ``get`` finds a live
row only (``expires_at`` still ahead); whether the key is still active is the caller's
to check, on every request (``api/auth.py``), so a revoked key's sessions end with it.
Creating a session clears the rows that have expired; revoking a key
(``KeyStore.revoke``) deletes its sessions in the same transaction.

What does not belong here: making tokens, cookies and the same-origin rule
(``api/cookies.py``), the routes (``api/session.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, delete, select

from parley.store.database import Database
from parley.store.schema import web_sessions as table


@dataclass(frozen=True, slots=True)
class StoredSession:
    key_id: str
    created_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at


class SessionStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def create(self, token_hash: str, key_id: str, ttl_seconds: float) -> StoredSession:
        """A session of ``key_id`` for ``ttl_seconds``; expired rows leave meanwhile."""
        now = time.time()
        session = StoredSession(key_id, now, now + ttl_seconds)

        def transaction(conn: Connection) -> None:
            conn.execute(delete(table).where(table.c.expires_at <= now))
            conn.execute(
                table.insert().values(
                    token_hash=token_hash,
                    key_id=key_id,
                    created_at=session.created_at,
                    expires_at=session.expires_at,
                )
            )

        await self._db.write(transaction)
        return session

    async def get(self, token_hash: str) -> StoredSession | None:
        """The live session of this token hash, if any."""
        statement = select(table.c.key_id, table.c.created_at, table.c.expires_at).where(
            table.c.token_hash == token_hash, table.c.expires_at > time.time()
        )

        def query(conn: Connection) -> StoredSession | None:
            row = conn.execute(statement).first()
            return None if row is None else StoredSession(*row)

        return await self._db.read(query)

    async def delete(self, token_hash: str) -> bool:
        """End a session (signing out); False when there was none."""
        statement = delete(table).where(table.c.token_hash == token_hash)

        def transaction(conn: Connection) -> bool:
            return bool(conn.execute(statement).rowcount)

        return await self._db.write(transaction)
