"""``parley.cluster.RedisCluster`` against a real Redis: leases and signals."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from parley.cluster import Alone, RedisCluster, Signal
from parley.settings import RedisSettings
from tests.support.redis import running_redis
from tests.support.waiting import until

pytestmark = pytest.mark.anyio
KEY = ("alice", "conv_1")
Pair = tuple[RedisCluster, RedisCluster, list[Signal]]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


async def started(url: str, received: list[Signal], lease: float = 0.5) -> RedisCluster:
    cluster = RedisCluster(RedisSettings(url=url, lease_seconds=lease, key_prefix="t"))
    await cluster.start(received.append)
    return cluster


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[Pair]:
    await _flush(redis_url)
    received: list[Signal] = []
    a, b = await started(redis_url, []), await started(redis_url, received)
    yield a, b, received
    await a.close()
    await b.close()


async def _flush(url: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    await client.flushdb()
    await client.aclose()


async def test_one_instance_holds_a_lease_until_it_lets_go(pair: Pair) -> None:
    a, b, _ = pair
    assert await a.claim(KEY, "a|1")
    assert not await b.claim(KEY, "b|1")
    assert await b.holder(KEY) == "a|1"
    await b.release(KEY, "b|1")  # not the holder: nothing happens
    assert await a.holder(KEY) == "a|1"
    await a.release(KEY, "a|1")
    assert await b.holder(KEY) is None
    assert await b.claim(KEY, "b|1")


async def test_a_lease_not_renewed_lapses_and_its_old_holder_cannot_extend_it(
    pair: Pair,
) -> None:
    a, b, _ = pair
    assert await a.claim(KEY, "a|1")
    assert await a.renew(KEY, "a|1")

    async def lapsed() -> bool:
        return await b.holder(KEY) is None

    await until(lapsed, timeout=3, what="the lease lapsed")
    assert await b.claim(KEY, "b|1")
    assert not await a.renew(KEY, "a|1")
    assert not await a.retag(KEY, "a|1", "a|1|msg")
    assert await b.retag(KEY, "b|1", "b|1|msg_1")
    assert await a.holder(KEY) == "b|1|msg_1"
    assert await a.leased([KEY, ("alice", "other")]) == {KEY}


async def test_signals_reach_the_other_instance(pair: Pair) -> None:
    a, _, received = pair
    await a.send(Signal("supersede", "alice", "conv_1"))
    await a.send(Signal("cancel", "bob", "conv_2"))
    await until(lambda: len(received) == 2, timeout=3, what="both signals arrived")
    assert received == [
        Signal("supersede", "alice", "conv_1"),
        Signal("cancel", "bob", "conv_2"),
    ]


async def test_a_wrong_url_fails_at_start(tmp_path: Path) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    cluster = RedisCluster(RedisSettings(url="redis://127.0.0.1:9/0"))
    with pytest.raises(RedisConnectionError):
        await cluster.start(lambda _: None)
    await cluster.close()


async def test_alone_grants_every_lease_and_sends_nothing() -> None:
    alone = Alone()
    assert not alone.shared
    assert await alone.claim(KEY, "x")
    assert await alone.claim(KEY, "y")
    assert await alone.holder(KEY) is None
    assert await alone.leased([KEY]) == set()
