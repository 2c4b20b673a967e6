"""The Idempotency-Key rows: one holder per key and scope, a kept response round-trips
byte for byte, a released key can be claimed again, rows left running become
interrupted at start-up, and expired rows are replaced and purged."""

from __future__ import annotations

import asyncio

import pytest

from parley.store.database import Database
from parley.store.idempotency import IdempotencyStore, Record, StoredResponse

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(database: Database) -> IdempotencyStore:
    return IdempotencyStore(database)


async def test_one_holder_per_key_and_scope(store: IdempotencyStore) -> None:
    assert await store.claim("key_a", "k1", "fp1", 60) is None
    assert await store.claim("key_a", "k1", "fp2", 60) == Record("fp1", "running")
    assert await store.claim("key_b", "k1", "fp2", 60) is None  # another API key's


async def test_a_kept_response_round_trips(store: IdempotencyStore) -> None:
    response = StoredResponse(201, (("content-type", "application/json"),), b"\x00{\xff}")
    await store.claim("s", "k", "fp", 60)
    await store.finish("s", "k", response)
    assert await store.get("s", "k") == Record("fp", "done", response)
    assert await store.claim("s", "k", "fp", 60) == Record("fp", "done", response)


async def test_a_released_key_runs_again(store: IdempotencyStore) -> None:
    await store.claim("s", "k", "fp", 60)
    await store.release("s", "k")
    assert await store.get("s", "k") is None
    assert await store.claim("s", "k", "other", 60) is None


async def test_running_rows_are_interrupted_at_start_up(store: IdempotencyStore) -> None:
    await store.claim("s", "running", "fp", 60)
    await store.claim("s", "done", "fp", 60)
    await store.finish("s", "done", StoredResponse(200, (), b""))
    assert await store.interrupt_running() == 1
    assert await store.get("s", "running") == Record("fp", "interrupted")
    await store.release("s", "running")  # only a running row is released
    assert await store.get("s", "running") == Record("fp", "interrupted")
    assert (await store.get("s", "done")) is not None


async def test_expired_rows_are_replaced_and_purged(store: IdempotencyStore) -> None:
    await store.claim("s", "old", "fp", 0.05)
    await store.claim("s", "new", "fp", 60)
    await asyncio.sleep(0.1)
    assert await store.get("s", "old") is None
    assert await store.claim("s", "old", "fp2", 60) is None  # replaced
    await store.claim("s", "gone", "fp", 0.05)
    await asyncio.sleep(0.1)
    assert await store.purge() == 1
    assert await store.get("s", "new") is not None
