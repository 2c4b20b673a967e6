"""Fair shares among keys: the water level, the pacing of a key that takes the loop
while another waits, and slots handed out in turn."""

from __future__ import annotations

import asyncio
import time

import pytest

from parley import fairness
from parley.fairness import FairSlots, Ledger, water_level

pytestmark = pytest.mark.anyio


def test_the_water_level_fills_the_light_keys_first() -> None:
    assert water_level({"a": 0.040}, 0.025) == pytest.approx(0.025)
    # b used 5 ms and keeps it; a gets the rest of the pool
    assert water_level({"a": 0.040, "b": 0.005}, 0.025) == pytest.approx(0.020)
    assert water_level({"a": 0.040, "b": 0.030}, 0.025) == pytest.approx(0.0125)
    assert water_level({"a": 0.010, "b": 0.005}, 0.025) is None  # they all fit
    assert water_level({}, 0.025) is None


async def _busy(seconds: float) -> float:
    """Metered work of the current request for ``seconds``: the loop time it got."""
    meter = fairness.meter()
    used = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        meter.start()
        began = time.perf_counter()
        while time.perf_counter() - began < 0.0005:  # a unit of work: 0.5 ms
            pass
        used += time.perf_counter() - began
        while meter.due():
            await meter.pause()
        meter.stop()
    return used


async def _lateness(seconds: float) -> float:
    """The worst lateness of a 10 ms timer over ``seconds``."""
    worst = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        due = time.perf_counter() + 0.01
        await asyncio.sleep(0.01)
        worst = max(worst, time.perf_counter() - due)
    return worst


async def test_a_key_alone_runs_flat_out_in_turns() -> None:
    ledger = Ledger()
    ledger.start()
    with ledger.serving("a"):
        used = await _busy(1.0)
    assert used > 0.8  # nobody else: it gets the loop (less the tick's own work)


async def test_a_key_taking_the_loop_is_held_to_its_part_while_another_waits() -> None:
    ledger = Ledger()
    ledger.start()

    async def other() -> float:
        with ledger.serving("b"):  # a request of another key, waiting for the loop
            return await _lateness(1.0)

    with ledger.serving("a"):
        waiting = asyncio.ensure_future(other())
        used = await _busy(1.0)
    late = await waiting
    assert used < 0.75  # about fairness.BUSY of the loop, once the ledger saw b waiting
    assert late < 0.3  # b's timers fire about on time (the slices)


async def test_the_bucket_follows_the_request_into_its_tasks() -> None:
    ledger = Ledger()
    assert fairness.bucket() == ""
    with ledger.serving("a"):
        assert await asyncio.ensure_future(_bucket_later()) == "a"
    assert fairness.bucket() == ""


async def _bucket_later() -> str:
    await asyncio.sleep(0)
    return fairness.bucket()


async def test_slots_go_to_the_waiting_keys_in_turn() -> None:
    slots = FairSlots(1)
    order: list[str] = []
    gate = asyncio.Event()

    async def hold(who: str, name: str) -> None:
        async with slots.hold(who):
            order.append(name)
            await gate.wait()

    first = asyncio.ensure_future(hold("a", "a0"))
    await asyncio.sleep(0)
    waiters = [asyncio.ensure_future(hold("a", f"a{n}")) for n in range(1, 4)]
    await asyncio.sleep(0)
    waiters.append(asyncio.ensure_future(hold("b", "b0")))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *waiters)
    assert order == ["a0", "a1", "b0", "a2", "a3"]


async def test_a_cancelled_waiter_gives_its_turn_on() -> None:
    slots = FairSlots(1)
    gate = asyncio.Event()
    served: list[str] = []

    async def hold(who: str) -> None:
        async with slots.hold(who):
            served.append(who)
            await gate.wait()

    first = asyncio.ensure_future(hold("a"))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(hold("b"))
    then = asyncio.ensure_future(hold("c"))
    await asyncio.sleep(0)
    gone.cancel()
    gate.set()
    await asyncio.gather(first, then)
    assert served == ["a", "c"]
    async with slots.hold("d"):  # and the slot is free again
        pass
