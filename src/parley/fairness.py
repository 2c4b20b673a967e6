"""Fair shares of one server among the keys that use it: whose work a task does, how
much of the event loop each key's streams used lately, and the pauses and queues that
keep one key from taking the loop or the database's readers from the others.

Admission control (``api/admission.py``) decides who gets in; what is here shares out
the work already admitted. It imports nothing of Parley's, so any layer may use it.

- **Whose work.** Each request runs with its caller's *bucket* in a context variable:
  the presented key, hashed, or "" (keyless loopback use, the machine's one user, and
  requests without a key). Tasks a request starts inherit it, so a generation goes on
  in its key's name after its client left, and counts as its key's until it ends
  (``working``). ``bucket()`` reads it.
- **The event loop.** Long work (a stream's events, ``providers/sse.py``) runs under a
  ``Meter``: it gives the loop back after every ``SLICE`` of work, so that no task holds
  it for a whole burst of buffered chunks, and charges the time to its key in the
  ``Ledger``. Every ``TICK`` the ledger looks back: when two or more buckets had
  requests in flight lately (within ``REMEMBER`` ticks) and the metered work took more
  than ``BUSY`` of the tick (or a key was held back in it), the next tick gives the
  metered keys ``BUSY`` of it between them, water-filled (a key using less than an
  equal part leaves the rest to the others); a key past its part pauses before its
  next unit of work until the tick ends. So one key's streams, however fast, leave the
  loop to everyone else's requests (a burst of their checkpoints is spread over ticks).
  A key alone (keyless loopback use included) runs flat out, in turns of at most a
  tick. The ledger's smoothed loop lag is what admission control reads.
- **Slots.** ``FairSlots`` is a semaphore that, when full, hands the next free slot to
  the waiting keys in turn (round robin), not in arrival order: the database's heavy
  reads (searches) queue through one, so one key's many searches delay another key's
  search by about one search.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar

TICK = 0.05
"""Seconds between the ledger's looks back (and the lag monitor's timer)."""
SLICE = 0.002
"""Loop seconds a metered task may run before it gives the loop back."""
BUSY = 0.5
"""The part of the loop metered work may have while other keys are waiting."""
REMEMBER = 20
"""Ticks a key counts as waiting after its last request began."""

_whose: ContextVar[tuple[str, Ledger | None]] = ContextVar("parley_bucket", default=("", None))


def bucket() -> str:
    """The bucket of the request whose work this task does ("" outside any)."""
    return _whose.get()[0]


def working() -> Callable[[object], None]:
    """Count a piece of work (a generation) against the current request's key until the
    returned callback is called (once; a task's done callback): work that outlives its
    request, a reply whose client left, still counts as the key's."""
    who, ledger = _whose.get()
    if ledger is None:
        return _nothing
    ledger.working[who] += 1
    done = False

    def release(_: object) -> None:
        nonlocal done
        if not done:
            done = True
            ledger.working[who] -= 1
            if ledger.working[who] <= 0:
                del ledger.working[who]

    return release


def _nothing(_: object) -> None:
    pass


def meter() -> Meter:
    """A meter for one stream's work, charged to the current request's key."""
    who, ledger = _whose.get()
    return Meter(ledger, who)


class Ledger:
    """Per server: requests in flight per bucket, and each key's use of the loop."""

    def __init__(self) -> None:
        self.lag = 0.0
        """How late a ``TICK`` timer fires, smoothed over a few ticks (seconds)."""
        self.active: Counter[str] = Counter()
        """Requests in flight per bucket (all routes)."""
        self.working: Counter[str] = Counter()
        """Generations running per bucket, whether or not their client is still there."""
        self.paused: set[str] = set()
        """Keys past their part of this tick: their metered work waits for the next."""
        self._seen: dict[str, int] = {}
        self._ticks = 0
        self._used: dict[str, float] = {}
        self._limit = TICK
        self._turn: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the periodic look back (once; from within the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    @contextlib.contextmanager
    def serving(self, who: str) -> Iterator[None]:
        """Count a request of ``who`` in flight, and run it in ``who``'s name."""
        self.active[who] += 1
        self._seen[who] = self._ticks
        token = _whose.set((who, self))
        try:
            yield
        finally:
            _whose.reset(token)
            self.active[who] -= 1
            if self.active[who] <= 0:
                del self.active[who]

    def serving_any(self) -> bool:
        """Whether any request is in flight now (background work then yields more)."""
        return bool(self.active)

    def charge(self, who: str, seconds: float) -> None:
        used = self._used.get(who, 0.0) + seconds
        self._used[who] = used
        if used > self._limit:
            self.paused.add(who)

    async def next_turn(self) -> None:
        """Wait for the next tick."""
        if self._turn is None or self._turn.done():
            self._turn = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._turn)

    async def _watch(self) -> None:
        clock = time.perf_counter
        while True:
            began = clock()
            await asyncio.sleep(TICK)
            elapsed = clock() - began
            self.lag = 0.7 * self.lag + 0.3 * max(0.0, elapsed - TICK)
            self._look_back(elapsed)

    def _look_back(self, elapsed: float) -> None:
        """End a tick: set the next tick's part per key, and wake the paused keys."""
        busy = sum(self._used.values())
        contended = busy > BUSY * elapsed or bool(self.paused)
        self._ticks += 1
        recent = self._ticks - REMEMBER
        self._seen = {who: tick for who, tick in self._seen.items() if tick > recent}
        waiting = len(self._seen.keys() | self.active.keys()) >= 2
        level = water_level(self._used, BUSY * TICK) if contended and waiting else None
        self._limit = TICK if level is None else level
        self._used = {}
        self.paused = set()
        if self._turn is not None and not self._turn.done():
            self._turn.set_result(None)


def water_level(used: dict[str, float], pool: float) -> float | None:
    """The most each key may use so that together they use ``pool`` (max-min fair,
    by what each used last time); None when they all fit."""
    uses = sorted(used.values())
    for index, use in enumerate(uses):
        level = pool / (len(uses) - index)
        if use >= level:
            return level
        pool -= use
    return None


class Meter:
    """Meters one stream's work: ``start`` when a burst of work begins (data arrived),
    ``due`` before each unit (cheap: a clock read), ``pause`` when it says so, ``stop``
    when the burst ends. Bursts with no wait between them (data that was buffered
    already) add up to one slice."""

    __slots__ = ("_ledger", "_ran", "_since", "_stopped", "_who")

    def __init__(self, ledger: Ledger | None, who: str) -> None:
        self._ledger = ledger
        self._who = who
        self._since = self._stopped = time.perf_counter()
        self._ran = 0.0

    def start(self) -> None:
        now = time.perf_counter()
        if now - self._stopped > SLICE / 2:  # it waited: the others had the loop
            self._ran = 0.0
        self._since = now

    def due(self) -> bool:
        if time.perf_counter() - self._since + self._ran >= SLICE:
            return True
        return self._ledger is not None and self._who in self._ledger.paused

    async def pause(self) -> None:
        """Give the loop back: until the next tick when this key is past its part."""
        self.stop()
        ledger = self._ledger
        if ledger is not None and self._who in ledger.paused:
            await ledger.next_turn()
        else:
            await asyncio.sleep(0)
        self._ran = 0.0
        self.start()

    def stop(self) -> None:
        now = time.perf_counter()
        spent = now - self._since
        self._ran += spent
        self._since = self._stopped = now
        if self._ledger is not None:
            self._ledger.charge(self._who, spent)


class FairSlots:
    """At most ``size`` holders at once; when full, the waiting keys get the next free
    slot in turn, each key's own waiters in arrival order."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, who: str | None = None) -> AsyncIterator[None]:
        """Hold a slot for ``who`` (default: the current request's bucket)."""
        if self._free > 0:
            self._free -= 1
        else:
            await self._wait(bucket() if who is None else who)
        try:
            yield
        finally:
            self._release()

    async def _wait(self, who: str) -> None:
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(who, deque()).append(handed)
        try:
            await handed
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():
                self._release()  # the slot came as the waiter was cancelled: pass it on
            else:
                queue = self._waiting.get(who)
                if queue is not None and handed in queue:
                    queue.remove(handed)
                    if not queue:
                        del self._waiting[who]
            raise

    def _release(self) -> None:
        while self._waiting:
            who = next(iter(self._waiting))
            queue = self._waiting.pop(who)
            handed = queue.popleft()
            if queue:
                self._waiting[who] = queue  # to the back of the line
            if not handed.done():
                handed.set_result(None)
                return
        self._free += 1
