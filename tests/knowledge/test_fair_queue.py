"""The order of indexing (``knowledge/fair_queue.py``): turns round-robin across owners,
in upload order within an owner, started documents resumed before an owner's later
ones, and the bounds on started documents."""

from __future__ import annotations

import asyncio

import pytest

from parley.knowledge.fair_queue import FairQueue, Resume, Start

pytestmark = pytest.mark.anyio


def take_now(queue: FairQueue[str]) -> Start | Resume[str] | None:
    """The turn ``take`` would give at once, or None when it would wait."""
    return queue._next()


async def test_owners_take_turns_and_each_owner_keeps_its_order() -> None:
    queue: FairQueue[str] = FairQueue(per_owner=10, started=100)
    for n in range(1, 5):
        queue.add("alice", f"a{n}")
    queue.add("bob", "b1")
    queue.add("bob", "b2")
    queue.add("carol", "c1")
    order = []
    while (turn := take_now(queue)) is not None:
        assert isinstance(turn, Start)
        order.append(turn.document_id)
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]


async def test_a_started_document_goes_slice_by_slice_between_other_owners_turns() -> None:
    queue: FairQueue[str] = FairQueue(per_owner=1, started=10)
    queue.add("alice", "huge")
    queue.add("alice", "a2")
    assert take_now(queue) == Start("alice", "huge")
    queue.resume("alice", "huge-job")  # read and chunked: ready for its first slice
    queue.add("bob", "b1")
    turns = []
    for _ in range(3):
        turn = take_now(queue)
        assert turn is not None
        turns.append(turn)
        if isinstance(turn, Resume):
            queue.resume(turn.owner, turn.job)  # one slice done, more to go
        else:
            queue.resume(turn.owner, f"{turn.document_id}-job")
    assert turns == [
        Resume("alice", "huge-job"),
        Start("bob", "b1"),
        Resume("alice", "huge-job"),  # a2 waits: alice has one document started at most
    ]
    assert take_now(queue) == Resume("bob", "b1-job")


async def test_an_owner_at_its_bound_keeps_its_place() -> None:
    queue: FairQueue[str] = FairQueue(per_owner=1, started=2)
    queue.add("alice", "a1")
    queue.add("alice", "a2")
    queue.add("bob", "b1")
    queue.add("carol", "c1")
    assert take_now(queue) == Start("alice", "a1")
    assert take_now(queue) == Start("bob", "b1")
    assert take_now(queue) is None  # two started in all: carol waits, alice's a1 is read
    queue.finished("bob")
    assert take_now(queue) == Start("carol", "c1")  # carol was ahead of alice's a2
    queue.finished("alice")
    assert take_now(queue) == Start("alice", "a2")


async def test_take_waits_for_a_turn_and_idle_says_when_all_is_done() -> None:
    queue: FairQueue[str] = FairQueue(per_owner=1, started=1)
    assert queue.idle.is_set()
    waiting = asyncio.create_task(queue.take())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    queue.add("alice", "a1")
    assert not queue.idle.is_set()
    assert await asyncio.wait_for(waiting, 5) == Start("alice", "a1")
    assert queue.queued("alice") == 0
    assert not queue.idle.is_set()  # started, not finished
    queue.finished("alice")
    assert queue.idle.is_set()
