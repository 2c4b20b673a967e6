"""What several Parley instances on one database share: Redis (``redis.url``), or
nothing when an instance runs alone.

- **Reply leases.** A conversation's reply runs under a lease, a Redis key holding the
  running instance's token with an expiry (``redis.lease_seconds``) that the instance
  renews while the reply runs (``conversations/sessions.py``). Another instance sees
  the conversation busy; a dead instance's lease lapses, and its replies left
  ``streaming`` are then found and marked interrupted (``app.py``'s sweep).
- **Signals.** Supersede and cancel go to every instance on one channel; the instance
  running that conversation's reply ends it. Publishing is fire-and-forget: whoever
  sent one waits for the lease to go (``Sessions``), so a lost message shows as a
  lease that stays, never as a second reply.

``Alone`` is the single instance's: every lease is granted, nothing is sent. Without
``redis.url`` Parley behaves exactly as before.

What does not belong here: what a lease or a signal means for a conversation
(``conversations/sessions.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from parley.settings import RedisSettings

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(owner, conversation id)."""

RECONNECT_SECONDS = 0.5

# Only the holder renews or releases: a lease that lapsed and was taken by another
# instance is never extended or deleted by its former holder.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RETAG = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
end
return false
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True, slots=True)
class Signal:
    """Ask the instance running a conversation's reply to end it."""

    kind: Literal["supersede", "cancel"]
    owner: str
    conversation_id: str


class Cluster(Protocol):
    instance: str
    """This instance's name in lease tokens (host, process and a random part)."""
    shared: bool
    """Whether other instances may exist (False: ``Alone``)."""
    lease_seconds: float

    async def start(self, on_signal: Callable[[Signal], None]) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise when the shared store cannot be reached."""
        ...

    async def claim(self, key: Key, token: str) -> bool:
        """Take the conversation's lease for ``token`` unless someone holds it."""
        ...

    async def holder(self, key: Key) -> str | None: ...

    async def retag(self, key: Key, token: str, new: str) -> bool:
        """The lease held by ``token`` is now held by ``new`` (with the reply's id)."""
        ...

    async def renew(self, key: Key, token: str) -> bool:
        """Extend the lease while ``token`` holds it; False once it does not."""
        ...

    async def release(self, key: Key, token: str) -> None: ...

    async def send(self, signal: Signal) -> None: ...

    async def leased(self, keys: Sequence[Key]) -> set[Key]:
        """Those of ``keys`` whose lease is held now."""
        ...


def instance_name() -> str:
    return f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"


class Alone:
    """One instance: every lease is granted, no signal has anyone to reach."""

    shared = False

    def __init__(self, lease_seconds: float = 10.0) -> None:
        self.instance = instance_name()
        self.lease_seconds = lease_seconds

    async def start(self, on_signal: Callable[[Signal], None]) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def claim(self, key: Key, token: str) -> bool:
        return True

    async def holder(self, key: Key) -> str | None:
        return None

    async def retag(self, key: Key, token: str, new: str) -> bool:
        return True

    async def renew(self, key: Key, token: str) -> bool:
        return True

    async def release(self, key: Key, token: str) -> None:
        return None

    async def send(self, signal: Signal) -> None:
        return None

    async def leased(self, keys: Sequence[Key]) -> set[Key]:
        return set()


class RedisCluster:
    """Leases and signals in Redis (redis-py's asyncio client)."""

    shared = True

    def __init__(self, settings: RedisSettings, client: Redis | None = None) -> None:
        from redis.asyncio import Redis

        assert settings.url is not None
        self.instance = instance_name()
        self.lease_seconds = settings.lease_seconds
        self.prefix = settings.key_prefix
        self.redis: Redis = client or Redis.from_url(settings.url)
        self._prefix = self.prefix
        self._redis = self.redis
        self._channel = f"{self._prefix}:signals"
        self._renew = self._redis.register_script(_RENEW)
        self._release = self._redis.register_script(_RELEASE)
        self._retag = self._redis.register_script(_RETAG)
        self._listening: asyncio.Task[None] | None = None

    def _key(self, key: Key) -> str:
        owner, conversation_id = key
        return f"{self._prefix}:lease:{len(owner)}:{owner}:{conversation_id}"

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease_seconds * 1000))

    async def start(self, on_signal: Callable[[Signal], None]) -> None:
        await self._redis.ping()  # a wrong url fails the start-up, not the first reply
        ready = asyncio.Event()
        self._listening = asyncio.create_task(self._listen(on_signal, ready))
        await ready.wait()

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            await asyncio.gather(self._listening, return_exceptions=True)
        await self._redis.aclose()

    async def ping(self) -> None:
        await self._redis.ping()

    async def claim(self, key: Key, token: str) -> bool:
        return bool(await self._redis.set(self._key(key), token, nx=True, px=self._lease_ms))

    async def holder(self, key: Key) -> str | None:
        found = await self._redis.get(self._key(key))
        return found.decode() if isinstance(found, bytes) else found

    async def retag(self, key: Key, token: str, new: str) -> bool:
        return bool(await self._retag(keys=[self._key(key)], args=[token, new]))

    async def renew(self, key: Key, token: str) -> bool:
        return bool(await self._renew(keys=[self._key(key)], args=[token, self._lease_ms]))

    async def release(self, key: Key, token: str) -> None:
        await self._release(keys=[self._key(key)], args=[token])

    async def send(self, signal: Signal) -> None:
        body = {"kind": signal.kind, "owner": signal.owner, "conversation": signal.conversation_id}
        await self._redis.publish(self._channel, json.dumps(body))

    async def leased(self, keys: Sequence[Key]) -> set[Key]:
        if not keys:
            return set()
        found = await self._redis.mget([self._key(key) for key in keys])
        return {key for key, value in zip(keys, found, strict=True) if value is not None}

    async def _listen(self, on_signal: Callable[[Signal], None], ready: asyncio.Event) -> None:
        """Hand every signal to ``on_signal``; subscribe again after a lost connection."""
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                ready.set()
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        _dispatch(message["data"], on_signal)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("the Redis signal channel was lost; subscribing again", exc_info=True)
                await asyncio.sleep(RECONNECT_SECONDS)
            finally:
                await pubsub.aclose()


def _dispatch(data: Any, on_signal: Callable[[Signal], None]) -> None:
    try:
        body = json.loads(data)
        kind = body["kind"]
        if kind not in ("supersede", "cancel"):
            raise ValueError(kind)
        signal = Signal(kind, str(body["owner"]), str(body["conversation"]))
    except (ValueError, KeyError, TypeError):
        log.warning("an unreadable signal on the Redis channel was ignored: %r", data)
        return
    on_signal(signal)


def cluster_for(settings: RedisSettings) -> Cluster:
    """Redis when ``redis.url`` is set, else ``Alone``."""
    if settings.url is None:
        return Alone(settings.lease_seconds)
    return RedisCluster(settings)
