"""Who may read a document now: a bound in all, a share per owner, the last slot kept
from background reads, first come first served among those who may start."""

from __future__ import annotations

import asyncio

import pytest

from parley.errors import Overloaded
from parley.extraction.slots import Slots

pytestmark = pytest.mark.anyio


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_owner_cannot_take_every_slot() -> None:
    slots = Slots(capacity=3, per_owner=2)
    await slots.acquire("alice", background=False, wait=1)
    await slots.acquire("alice", background=False, wait=1)
    third = asyncio.create_task(slots.acquire("alice", background=False, wait=None))
    await settle()
    assert not third.done()
    await asyncio.wait_for(slots.acquire("bob", background=False, wait=1), 1)
    assert slots.running == {"alice": 2, "bob": 1}
    slots.release("alice")
    await asyncio.wait_for(third, 1)
    assert slots.running == {"alice": 2, "bob": 1}


async def test_a_waiting_owner_does_not_hold_back_others() -> None:
    slots = Slots(capacity=2, per_owner=1)
    await slots.acquire("alice", background=False, wait=1)
    alice_again = asyncio.create_task(slots.acquire("alice", background=False, wait=None))
    await settle()
    # alice waits first, but bob may start: he is under his share and a slot is free
    await asyncio.wait_for(slots.acquire("bob", background=False, wait=1), 1)
    assert not alice_again.done()
    slots.release("alice")
    await asyncio.wait_for(alice_again, 1)


async def test_the_line_is_first_come_first_served() -> None:
    slots = Slots(capacity=1, per_owner=1)
    await slots.acquire("alice", background=False, wait=1)
    order: list[str] = []

    async def take(owner: str) -> None:
        await slots.acquire(owner, background=False, wait=None)
        order.append(owner)

    tasks = [asyncio.create_task(take(owner)) for owner in ("bob", "carol", "dave")]
    await settle()
    for _ in range(3):
        slots.release(order[-1] if order else "alice")
        await settle()
    await asyncio.gather(*tasks)
    assert order == ["bob", "carol", "dave"]


async def test_background_reads_leave_the_last_slot_free() -> None:
    slots = Slots(capacity=2, per_owner=2)
    await slots.acquire("indexer", background=True, wait=1)
    second = asyncio.create_task(slots.acquire("indexer", background=True, wait=None))
    await settle()
    assert not second.done()
    await asyncio.wait_for(slots.acquire("alice", background=False, wait=1), 1)
    slots.release("indexer")
    await settle()
    assert not second.done()  # alice holds one of two: the other is the last one
    slots.release("alice")
    await asyncio.wait_for(second, 1)


async def test_waiting_too_long_is_503_and_an_owner_at_its_share_429() -> None:
    slots = Slots(capacity=2, per_owner=1)
    await slots.acquire("alice", background=False, wait=1)
    await slots.acquire("bob", background=False, wait=1)
    with pytest.raises(Overloaded) as busy:
        await slots.acquire("carol", background=False, wait=0.05)
    assert busy.value.status == 503
    assert busy.value.retry_after
    with pytest.raises(Overloaded) as share:
        await slots.acquire("alice", background=False, wait=0.05)
    assert share.value.status == 429
    assert slots.running == {"alice": 1, "bob": 1}
    slots.release("bob")
    await asyncio.wait_for(slots.acquire("carol", background=False, wait=1), 1)


async def test_a_cancelled_waiter_leaves_the_line() -> None:
    slots = Slots(capacity=1, per_owner=1)
    await slots.acquire("alice", background=False, wait=1)
    waiter = asyncio.create_task(slots.acquire("bob", background=False, wait=None))
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    slots.release("alice")
    assert slots.busy == 0
    await asyncio.wait_for(slots.acquire("carol", background=False, wait=1), 1)
