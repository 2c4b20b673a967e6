"""``parley.holds``: calls in flight held on a key, in memory and in a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from parley import holds as holds_module
from parley.cluster import RedisCluster
from parley.holds import Held, Holds, LocalHolds, RedisHolds
from parley.settings import RedisSettings
from tests.support.redis import running_redis

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["memory", "redis"])
async def holds(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Holds]:
    if request.param == "memory":
        yield LocalHolds()
        return
    cluster = RedisCluster(RedisSettings(url=redis_url, key_prefix=f"t{id(request)}"))
    yield RedisHolds(cluster.redis, cluster.prefix)
    await cluster.close()


async def test_holds_add_up_and_go(holds: Holds) -> None:
    await holds.hold("k", "a", 10, 0.5)
    await holds.hold("k", "b", 5, 0.25)
    await holds.hold("other", "c", 99, 9.0)
    assert await holds.held("k") == Held(15, 0.75, 2)
    await holds.release("k", "a")
    await holds.release("k", "a")  # twice: nothing more
    assert await holds.held("k") == Held(5, 0.25, 1)
    await holds.release("k", "b")
    assert await holds.held("k") == Held()


async def test_the_lock_lets_one_in_at_a_time(holds: Holds) -> None:
    inside, most = 0, 0

    async def enter() -> None:
        nonlocal inside, most
        async with holds.locked("k"):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(enter() for _ in range(8)))
    assert most == 1


async def test_a_dead_instances_hold_lapses_while_others_stay(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = RedisCluster(RedisSettings(url=redis_url, key_prefix="lapse"))
    holds = RedisHolds(cluster.redis, cluster.prefix)
    monkeypatch.setattr(holds_module, "HOLD_SECONDS", 0.2)
    await holds.hold("k", "dead", 10, 0.5)  # its instance never lets it go
    monkeypatch.setattr(holds_module, "HOLD_SECONDS", 3600.0)
    await holds.hold("k", "live", 5, 0.25)  # keeps the key itself alive
    await asyncio.sleep(0.3)
    assert await holds.held("k") == Held(5, 0.25, 1)
    await cluster.close()
