"""The browser-session cache: a sign-out that lands while a request is reading the
session must not leave the deleted session cached (a full run once saw a signed-out
cookie still accepted, the page's own requests racing its sign-out)."""

from __future__ import annotations

import asyncio
import time
from typing import cast

import pytest

from parley.api.cookies import SessionCache
from parley.store.sessions import SessionStore, StoredSession


class SlowStore:
    """A session store whose reads wait until released; ``delete`` is immediate."""

    def __init__(self) -> None:
        self.rows = {"h": StoredSession("key_1", time.time(), time.time() + 3600)}
        self.release = asyncio.Event()
        self.reads = 0

    async def get(self, token_hash: str) -> StoredSession | None:
        row = self.rows.get(token_hash)  # read before the sign-out deletes it
        self.reads += 1
        if self.reads == 1:
            await self.release.wait()
        return row

    def delete(self, token_hash: str) -> None:
        self.rows.pop(token_hash, None)


@pytest.mark.anyio
async def test_a_sign_out_during_a_read_is_not_undone_by_the_cache() -> None:
    store = SlowStore()
    cache = SessionCache(cast(SessionStore, store), seconds=60)
    reading = asyncio.create_task(cache.get("h"))
    await asyncio.sleep(0)  # the read has the row, and waits
    store.delete("h")
    cache.forget("h")  # the sign-out: row deleted, cache told
    store.release.set()
    await reading  # whatever the overlapping read answers, it must not be kept
    assert await cache.get("h") is None
    assert store.reads >= 2  # the session was read again after the sign-out


@pytest.mark.anyio
async def test_reads_are_cached_when_nothing_ends() -> None:
    store = SlowStore()
    store.release.set()
    cache = SessionCache(cast(SessionStore, store), seconds=60)
    assert await cache.get("h") is not None
    assert await cache.get("h") is not None
    assert store.reads == 1
