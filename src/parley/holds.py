"""What calls in flight hold on a key's allowance (``interceptors/builtins/usage_limits``),
and the per-key lock its check and settling take: in this process's memory, or in Redis
when several instances share the keys (``redis.url``).

- ``LocalHolds``: one instance's; an ``asyncio.Lock`` per key.
- ``RedisHolds``: a hash per key (``<prefix>:holds:<key id>``), a field per call in
  flight holding its tokens, cost and expiry, so that a crashed instance's holds lapse
  (``HOLD_SECONDS``) instead of counting for ever; the lock is a Redis key taken with
  ``SET NX PX`` and let go only by its holder. Checking the settled usage in the
  database, then holding, happens under that lock on every instance, so concurrent
  calls on several instances cannot all slip under a limit.

What does not belong here: what a limit is and how usage is estimated and settled
(``usage_limits``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from parley.cluster import Cluster, RedisCluster

if TYPE_CHECKING:
    from redis.asyncio import Redis

HOLD_SECONDS = 3600.0
"""A hold its instance never let go (it died) lapses after this."""
LOCK_MS = 10_000
"""A key's lock lapses after this if its holder died holding it."""
LOCK_POLL_SECONDS = 0.005

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(slots=True)
class Held:
    """What a key's calls in flight hold, in all."""

    tokens: int = 0
    cost: float = 0.0
    calls: int = 0


class Holds(Protocol):
    def locked(self, key_id: str) -> Any:
        """An async context manager: the key's lock, on every instance."""
        ...

    async def held(self, key_id: str) -> Held: ...

    async def hold(self, key_id: str, hold_id: str, tokens: int, cost: float) -> None: ...

    async def release(self, key_id: str, hold_id: str) -> None: ...


class LocalHolds:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, tuple[int, float]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def locked(self, key_id: str) -> AsyncIterator[None]:
        lock = self._locks.get(key_id)
        if lock is None:
            lock = self._locks[key_id] = asyncio.Lock()
        async with lock:
            yield

    async def held(self, key_id: str) -> Held:
        holds = self._held.get(key_id, {})
        return Held(
            sum(tokens for tokens, _ in holds.values()),
            sum(cost for _, cost in holds.values()),  # summed afresh: no float drift
            len(holds),
        )

    async def hold(self, key_id: str, hold_id: str, tokens: int, cost: float) -> None:
        self._held.setdefault(key_id, {})[hold_id] = (tokens, cost)

    async def release(self, key_id: str, hold_id: str) -> None:
        holds = self._held.get(key_id)
        if holds is not None:
            holds.pop(hold_id, None)
            if not holds:
                del self._held[key_id]


class RedisHolds:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._unlock = redis.register_script(_UNLOCK)

    @asynccontextmanager
    async def locked(self, key_id: str) -> AsyncIterator[None]:
        name = f"{self._prefix}:holds-lock:{key_id}"
        token = secrets.token_hex(8)
        while not await self._redis.set(name, token, nx=True, px=LOCK_MS):  # noqa: ASYNC110 - polled: Redis tells no one when a key goes
            await asyncio.sleep(LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            await asyncio.shield(self._unlock(keys=[name], args=[token]))

    async def held(self, key_id: str) -> Held:
        name = f"{self._prefix}:holds:{key_id}"
        found: dict[Any, Any] = await self._redis.hgetall(name)
        now = time.time()
        held, lapsed = Held(), []
        for field, value in found.items():
            tokens, cost, until = value.decode().split()
            if float(until) < now:
                lapsed.append(field)
                continue
            held.tokens += int(tokens)
            held.cost += float(cost)
            held.calls += 1
        if lapsed:
            await self._redis.hdel(name, *lapsed)
        return held

    async def hold(self, key_id: str, hold_id: str, tokens: int, cost: float) -> None:
        name = f"{self._prefix}:holds:{key_id}"
        until = time.time() + HOLD_SECONDS
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(name, hold_id, f"{tokens} {cost!r} {until!r}")
        pipe.expire(name, int(HOLD_SECONDS))
        await pipe.execute()

    async def release(self, key_id: str, hold_id: str) -> None:
        await self._redis.hdel(f"{self._prefix}:holds:{key_id}", hold_id)


def holds_for(cluster: Cluster | None) -> Holds:
    if isinstance(cluster, RedisCluster):
        return RedisHolds(cluster.redis, cluster.prefix)
    return LocalHolds()
