"""The garbage-collection pacer."""

from __future__ import annotations

import asyncio
import gc

import pytest

from parley import pacer as app_module
from tests.support.waiting import until

pytestmark = pytest.mark.anyio


async def test_gc_pacer_takes_over_and_gives_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "YOUNG_GC_SECONDS", 0.01)
    monkeypatch.setattr(app_module, "FULL_GC_SECONDS", 0.03)
    calls: list[int] = []

    def counting(generation: int = 2) -> int:
        calls.append(generation)  # no real collection: other tests' garbage is theirs
        return 0

    monkeypatch.setattr(gc, "collect", counting)
    assert gc.isenabled()
    pacer = asyncio.ensure_future(app_module.pace_garbage_collection())
    await until(lambda: 1 in calls and 2 in calls)  # each kind of collection came due
    assert not gc.isenabled()  # automatic collection is off while the pacer runs
    assert 1 in calls  # young generations, often
    assert 2 in calls  # and now and then a full collection
    pacer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pacer
    assert gc.isenabled()
