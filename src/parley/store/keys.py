"""API keys: the only SQL for them (``parley keys`` and ``/v1/keys`` write, the
authenticator reads)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, delete, select, update

from parley.identity import Caller
from parley.ids import new_id
from parley.store.database import Database
from parley.store.schema import api_keys, web_sessions


@dataclass(frozen=True, slots=True)
class StoredKey:
    id: str
    owner: str
    name: str
    prefix: str
    created_at: float
    revoked_at: float | None
    admin: bool = False


class KeyStore:
    """API keys, stored as SHA-256 hashes (keys are random, so a slow hash adds nothing)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def create(
        self, owner: str, name: str, key_hash: str, prefix: str, *, admin: bool = False
    ) -> StoredKey:
        key = StoredKey(new_id("key"), owner, name, prefix, time.time(), None, admin)
        await self._db.write(
            lambda conn: conn.execute(
                api_keys.insert().values(
                    id=key.id,
                    owner=owner,
                    name=name,
                    key_hash=key_hash,
                    prefix=prefix,
                    created_at=key.created_at,
                    admin=admin,
                )
            )
        )
        return key

    async def list(self) -> list[StoredKey]:
        def query(conn: Connection) -> list[StoredKey]:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at)).all()
            return [
                StoredKey(r.id, r.owner, r.name, r.prefix, r.created_at, r.revoked_at, r.admin)
                for r in rows
            ]

        return await self._db.read(query)

    async def revoke(self, key_id_or_prefix: str) -> int:
        """Revoke the active key with this id or prefix (how many were), and end the
        browser sessions of the keys it names."""
        named = (api_keys.c.id == key_id_or_prefix) | (api_keys.c.prefix == key_id_or_prefix)

        def transaction(conn: Connection) -> int:
            result = conn.execute(
                update(api_keys)
                .where(named, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
            conn.execute(
                delete(web_sessions).where(
                    web_sessions.c.key_id.in_(select(api_keys.c.id).where(named))
                )
            )
            return int(result.rowcount or 0)

        return await self._db.write(transaction)

    async def revoked_since(self, since: float) -> tuple[set[str], float]:
        """Ids of the keys revoked at ``since`` or later, and the latest revocation time
        seen (``since`` when there is none), for the next call."""

        def query(conn: Connection) -> tuple[set[str], float]:
            rows = conn.execute(
                select(api_keys.c.id, api_keys.c.revoked_at).where(api_keys.c.revoked_at >= since)
            ).all()
            return {row.id for row in rows}, max((row.revoked_at for row in rows), default=since)

        return await self._db.read(query)

    async def active(self) -> dict[str, Caller]:
        """Every active key: hash -> who it makes the caller."""

        def query(conn: Connection) -> dict[str, Caller]:
            table = api_keys.c
            rows = conn.execute(
                select(table.key_hash, table.owner, table.id, table.name, table.admin).where(
                    table.revoked_at.is_(None)
                )
            ).all()
            return {
                row.key_hash: Caller(row.owner, row.id, row.name, bool(row.admin)) for row in rows
            }

        return await self._db.read(query)
