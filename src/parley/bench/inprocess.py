"""The in-process rig of figures 9 and 10: the agent engine itself, without HTTP.

Both figures run the real ``ConversationService`` -> ``Generation`` -> ``AgentLoop`` with
real SQLite (WAL, in a temporary folder), a scripted provider that answers at once (the
time spent inside its ``stream`` is measured and subtracted as "model time"), and one
registered function tool, ``work``, that waits ``ms`` milliseconds (``asyncio.sleep``).
Garbage collection is paced as in the server (``parley.pacer``). What reaches SQLite is
read from SQLite itself (``sqlite3`` trace callback on every connection), labelled by
the store call that ran it.

The figures themselves: ``agent.py`` (9) and ``database.py`` (10).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from sqlalchemy import event

from parley.conversations.service import ConversationService
from parley.conversations.turns import ChatTurn
from parley.events import (
    Done,
    Event,
    Status,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolStarted,
    UsageEvent,
)
from parley.messages import Part, Usage, text_message
from parley.pacer import pace_garbage_collection
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ProviderRegistry
from parley.providers.scripted import ScriptedProvider, Step
from parley.settings import ModelAlias, ProviderSettings, Settings
from parley.store.database import Database
from parley.store.repository import ConversationStore, NewTurn
from parley.tools.function import function_tool
from parley.tools.registry import ToolRegistry

OWNER = "bench"
TOOL = "work"
CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE")
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def to_ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def dist(seconds: list[float]) -> dict[str, float]:
    """Median, p90 and max of durations, in milliseconds."""
    if not seconds:
        return {"median": float("nan"), "p90": float("nan"), "max": float("nan")}
    return {
        "median": to_ms(statistics.median(seconds)),
        "p90": to_ms(pct(seconds, 90)),
        "max": to_ms(max(seconds)),
    }


# --- what reaches SQLite ------------------------------------------------------------------


class Recorder:
    """Every statement SQLite executes, labelled with the store call that ran it.

    Writes run inline on the event loop's thread, so the label set around a store call
    is the label of its statements; statements on any other thread are reads (the
    reader pool).
    """

    def __init__(self) -> None:
        self.label = "other"
        self.statements: list[tuple[str, str]] = []
        self.writes: list[tuple[str, float]] = []
        """(label, seconds) for each store write call, timed around the whole call."""
        self._loop_thread = threading.get_ident()

    def install(self, database: Database) -> None:
        engine = database._sync  # the SQLite engine: before any connection is made
        if engine is None:
            raise RuntimeError("figure 10 needs SQLite")

        def connected(dbapi_connection: Any, _record: Any) -> None:
            if isinstance(dbapi_connection, sqlite3.Connection):
                dbapi_connection.set_trace_callback(self._trace)

        event.listen(engine, "connect", connected)

    def _trace(self, sql: str) -> None:
        reading = threading.get_ident() != self._loop_thread
        self.statements.append(("read" if reading else self.label, sql))

    def reset(self) -> None:
        self.statements.clear()
        self.writes.clear()

    @contextlib.contextmanager
    def writing(self, label: str) -> Iterator[None]:
        self.label = label
        began = time.perf_counter()
        try:
            yield
        finally:
            self.writes.append((label, time.perf_counter() - began))
            self.label = "other"

    def counts(self, label: str) -> dict[str, int]:
        """Transactions and statements (all, and by kind) under ``label``."""
        sqls = [sql.lstrip().upper() for lab, sql in self.statements if lab == label]
        return {
            "transactions": sum(s.startswith("BEGIN") for s in sqls),
            "statements": len(sqls),
            "control": sum(s.startswith(CONTROL) for s in sqls),
            "selects": sum(s.startswith(("SELECT", "WITH")) for s in sqls),
            "writes": sum(s.startswith(WRITES) for s in sqls),
            "other": sum(not s.startswith((*CONTROL, "SELECT", "WITH", *WRITES)) for s in sqls),
        }

    def write_seconds(self, label: str) -> list[float]:
        return [seconds for lab, seconds in self.writes if lab == label]


class InstrumentedStore(ConversationStore):
    """The real store, with each write call labelled and timed for ``Recorder``."""

    def __init__(self, database: Database, recorder: Recorder) -> None:
        super().__init__(database)
        self.recorder = recorder

    async def start_turn(self, turn: NewTurn) -> None:
        with self.recorder.writing("start"):
            await super().start_turn(turn)

    async def checkpoint(self, message_id: str, parts: tuple[Part, ...]) -> None:
        # Who asked: Generation._commit_step (a finished step) or _save_checkpoint (the
        # timer). The awaiting coroutine is the calling frame.
        caller = sys._getframe(1).f_code.co_name
        label = {"_commit_step": "step", "_save_checkpoint": "timed"}.get(caller, caller)
        with self.recorder.writing(label):
            await super().checkpoint(message_id, parts)

    async def finish(self, *args: Any, **kwargs: Any) -> None:
        with self.recorder.writing("final"):
            await super().finish(*args, **kwargs)


# --- the engine under test ------------------------------------------------------------------


class TimedProvider(ScriptedProvider):
    """The scripted provider, timing what is spent inside its ``stream`` per call."""

    def __init__(self) -> None:
        super().__init__("bench")
        self.call_seconds: list[float] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        inner = super().stream(request)
        spent = 0.0
        try:
            while True:
                began = time.perf_counter()
                try:
                    item = await anext(inner)
                except StopAsyncIteration:
                    break
                finally:
                    spent += time.perf_counter() - began
                yield item
        finally:
            self.call_seconds.append(spent)


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    async def work(ms: float, n: int) -> str:
        """Wait a while: the benchmark's stand-in for a tool doing real work.

        Args:
            ms: how long to wait, in milliseconds (0: return at once)
            n: which call this is
        """
        if ms > 0:
            await asyncio.sleep(ms / 1000)
        return f"done {n}"

    registry.register(function_tool(name=TOOL)(work))
    return registry


@dataclass
class Engine:
    service: ConversationService
    store: InstrumentedStore
    provider: TimedProvider
    recorder: Recorder
    database: Database
    settings: Settings
    counter: int = 0

    def next_n(self) -> int:
        self.counter += 1
        return self.counter


@contextlib.asynccontextmanager
async def engine() -> AsyncIterator[Engine]:
    """A service over SQLite in a temporary folder, with GC paced as in the server."""
    with tempfile.TemporaryDirectory(prefix="parley-bench-") as folder:
        provider_settings = ProviderSettings(name="bench", kind="scripted", models=["m"])
        settings = Settings(
            data_dir=Path(folder),
            providers=[provider_settings],
            models={"agent": ModelAlias(provider="bench", model="m")},
        )
        database = Database(settings)
        recorder = Recorder()
        recorder.install(database)
        await database.migrate()
        store = InstrumentedStore(database, recorder)
        provider = TimedProvider()
        registry = ProviderRegistry([(provider_settings, provider)], settings.models, "agent")
        service = ConversationService(settings, store, registry, _tools())
        gc.collect()
        pacer = asyncio.create_task(pace_garbage_collection())
        try:
            yield Engine(service, store, provider, recorder, database, settings)
        finally:
            pacer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pacer
            await service.shutdown(1.0)
            await database.dispose()


def script(
    eng: Engine, *, steps: int, tools: int, tool_ms: float, tokens: int, pace: float = 0.0
) -> None:
    """Queue a turn: ``steps`` steps of ``tools`` distinct calls, then ``tokens`` deltas."""
    provider = eng.provider
    for _ in range(steps):
        items: list[Step] = []
        for index in range(tools):
            n = eng.next_n()
            items.append(
                ToolCallDelta(index, f"call_{n}", TOOL, f'{{"ms": {tool_ms:g}, "n": {n}}}')
            )
        items += [UsageEvent(Usage(input_tokens=100, output_tokens=20 * tools)), Done("tool_use")]
        provider.queue(*items)
    final: list[Step] = []
    for index in range(tokens):
        if pace:
            final.append(pace)
        final.append(TextDelta(f" w{index}"))
    final += [UsageEvent(Usage(input_tokens=100, output_tokens=tokens)), Done("end_turn")]
    provider.queue(*final)


@dataclass
class TurnTimes:
    prepare: float
    wall: float
    events: list[tuple[float, Event]]
    model: list[float]
    steps: list[StepTimes] = field(default_factory=list)


@dataclass
class StepTimes:
    interval: float
    """One "thinking" status to the next."""
    phase: float
    """First ToolStarted to last ToolFinished."""
    slowest_tool: float
    """The slowest call's own time (``ToolFinished.seconds``)."""
    model: float
    tools: int


async def run_turn(eng: Engine, conversation_id: str | None, *, expect_tools: int) -> TurnTimes:
    events: list[tuple[float, Event]] = []

    async def sink(item: Event) -> None:
        events.append((time.perf_counter(), item))

    turn = ChatTurn(
        owner=OWNER,
        model=None,
        messages=(text_message("user", "Please do the work."),),
        conversation_id=conversation_id,
        server_tools=(TOOL,),
    )
    first_call = len(eng.provider.call_seconds)
    began = time.perf_counter()
    generation = await eng.service.prepare(turn)
    prepared = time.perf_counter()
    eng.service.start(generation, sink)
    await generation.wait()
    ended = time.perf_counter()
    last = events[-1][1] if events else None
    if isinstance(last, StreamError):
        raise RuntimeError(f"bench turn failed: {last.error.message}")
    if not isinstance(last, Done) or last.stop_reason != "end_turn":
        raise RuntimeError(f"bench turn ended with {last!r}")
    finished = [e for _, e in events if isinstance(e, ToolFinished)]
    if len(finished) != expect_tools or any(e.is_error for e in finished):
        errors = [e.output for e in finished if e.is_error][:3]
        raise RuntimeError(f"bench turn ran {len(finished)} of {expect_tools} tools: {errors}")
    times = TurnTimes(
        prepared - began, ended - prepared, events, eng.provider.call_seconds[first_call:]
    )
    times.steps = steps_of(times)
    return times


def steps_of(times: TurnTimes) -> list[StepTimes]:
    marks = [
        i for i, (_, e) in enumerate(times.events) if isinstance(e, Status) and e.name == "thinking"
    ]
    steps: list[StepTimes] = []
    for number, (start, end) in enumerate(pairwise(marks)):
        window = times.events[start:end]
        started = [t for t, e in window if isinstance(e, ToolStarted)]
        finished = [(t, e) for t, e in window if isinstance(e, ToolFinished)]
        if not started or not finished:
            continue
        steps.append(
            StepTimes(
                interval=times.events[end][0] - times.events[start][0],
                phase=finished[-1][0] - started[0],
                slowest_tool=max(e.seconds for _, e in finished),
                model=times.model[number] if number < len(times.model) else 0.0,
                tools=len(started),
            )
        )
    return steps
