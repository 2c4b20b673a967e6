"""Assistants under ids a test chose (memories of an assistant need one that exists)."""

from __future__ import annotations

from sqlalchemy import update

from parley.store.assistants import AssistantStore
from parley.store.database import Database
from parley.store.schema import assistants


async def own_assistants(database: Database, owner: str, *ids: str) -> None:
    """Give ``owner`` an assistant under each of ``ids`` (named after its id)."""
    store = AssistantStore(database)
    for assistant_id in ids:
        made = await store.create(owner, {"name": assistant_id})
        statement = update(assistants).where(assistants.c.id == made.id).values(id=assistant_id)
        await database.write(lambda conn, s=statement: conn.execute(s))
