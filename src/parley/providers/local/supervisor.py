"""Supervising the local-model worker: start it, stream from it, stop it, restart it.

``WorkerSupervisor`` owns at most one worker process (``worker.py``) and runs one
generation at a time on it. It starts the worker on first use and waits for its
``Ready`` (the model loaded and checked by a one-token generation) under a deadline.
A generation whose consumer stops early is cancelled by a ``Cancel`` frame; a worker
that does not stop within the grace period, or does not load in time, is killed.

When the worker dies (a segfault in native code, an abort, a kill) only the generation
it was running fails, with ``WorkerCrashed``; the next request starts a new worker.
Failures in a row back off (none after the first, then 1 s doubling up to a cap), so a
model that crashes at every load is not restarted in a tight loop; a request arriving
during a long backoff is refused at once with the time left as ``retry_after``.

What does not belong here: what the frames mean to a chat (``provider.py``), the model
runtime itself (``llama.py``, in the worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from parley.providers.local.protocol import (
    Cancel,
    Failed,
    Finished,
    Generate,
    Load,
    LoadFailed,
    Piece,
    ProtocolError,
    Ready,
    Reply,
    decode_reply,
    encode,
)

log = logging.getLogger(__name__)

FRAME_LIMIT = 8 * 1024 * 1024
STDERR_TAIL_BYTES = 16 * 1024
WAIT_OUT_BACKOFF_SECONDS = 2.0
"""A request arriving with at most this much backoff left waits; later ones are refused."""


class WorkerError(Exception):
    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class WorkerUnavailable(WorkerError):
    """The model cannot be loaded: no file, no runtime, a file the runtime refuses."""


class WorkerCrashed(WorkerError):
    """The worker process died (or broke the protocol) before the generation ended."""


class GenerationFailed(WorkerError):
    """The runtime raised for this request; the worker lives on."""


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    load_timeout_seconds: float = 120.0
    cancel_grace_seconds: float = 5.0
    max_backoff_seconds: float = 30.0
    python: str = sys.executable


@dataclass(slots=True)
class WorkerStats:
    """Counters since the supervisor was made; read by ``parley doctor`` and tests."""

    started: int = 0
    crashes: int = 0
    killed: int = 0
    generations: int = 0
    cancelled: int = 0
    last_exit: str | None = None
    ready: Ready | None = None


@dataclass(frozen=True, slots=True)
class _Exited:
    description: str


class _Process:
    """One worker process: its frames in ``inbox``, the tail of its stderr kept."""

    def __init__(self, proc: asyncio.subprocess.Process, on_exit: Callable[[_Process], None]):
        self.proc = proc
        self.inbox: asyncio.Queue[Reply | _Exited] = asyncio.Queue()
        self.exit: _Exited | None = None
        self.stopping = False  # killed or closed on purpose: not a crash
        self.broken: str | None = None
        self.tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self._on_exit = on_exit
        self._tasks = [
            asyncio.create_task(self._read_frames(), name="local-worker-frames"),
            asyncio.create_task(self._read_stderr(), name="local-worker-stderr"),
        ]

    @classmethod
    async def spawn(cls, python: str, on_exit: Callable[[_Process], None]) -> _Process:
        proc = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "parley.providers.local.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=FRAME_LIMIT,
            start_new_session=True,  # a Ctrl-C at the terminal is the server's to handle
        )
        return cls(proc, on_exit)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.exit is None and self.proc.returncode is None

    async def send(self, frame: Load | Generate | Cancel) -> bool:
        """Write a frame; False when the worker is gone (its exit reaches the inbox)."""
        stdin = self.proc.stdin
        if stdin is None or not self.alive:
            return False
        try:
            stdin.write(encode(frame))
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def kill(self, *, stopping: bool = True) -> None:
        self.stopping = self.stopping or stopping
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self, grace: float = 2.0) -> None:
        """Stop: end of input first (the worker exits at once), then SIGKILL."""
        self.stopping = True
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            self.kill()
            await self.proc.wait()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def stderr_tail(self, lines: int = 20) -> str:
        text = b"".join(self.tail).decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    async def _read_frames(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                self.inbox.put_nowait(decode_reply(line))
        except (ProtocolError, ValueError) as exc:  # junk, or a line over FRAME_LIMIT
            self.broken = f"it wrote something that is not a frame ({exc})"
            self.kill(stopping=False)
        returncode = await self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the last open pipe: the transport closes with it
        self.exit = _Exited(self.broken or describe_exit(returncode))
        self.inbox.put_nowait(self.exit)
        self._on_exit(self)

    async def _read_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        while line := await stderr.readline():
            log.debug("local model worker %d: %s", self.pid, line.rstrip().decode(errors="replace"))
            self.tail.append(line)
            self._tail_bytes += len(line)
            while self._tail_bytes > STDERR_TAIL_BYTES and len(self.tail) > 1:
                self._tail_bytes -= len(self.tail.popleft())


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


@dataclass(slots=True)
class _Failures:
    """Failures in a row and when the next start may happen."""

    count: int = 0
    retry_at: float = 0.0
    last: WorkerError | None = field(default=None)

    def record(self, error: WorkerError, now: float, cap: float) -> None:
        self.count += 1
        self.last = error
        self.retry_at = now + (0.0 if self.count == 1 else min(2.0 ** (self.count - 2), cap))

    def clear(self) -> None:
        self.count, self.retry_at, self.last = 0, 0.0, None


class WorkerSupervisor:
    """One worker process, one generation at a time; see the module docstring."""

    def __init__(
        self,
        load_request: Callable[[], Load],
        settings: SupervisorSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load_request = load_request  # may raise WorkerUnavailable
        self._settings = settings or SupervisorSettings()
        self._clock = clock
        self._lock = asyncio.Lock()
        self._process: _Process | None = None
        self._failures = _Failures()
        self._ids = itertools.count(1)
        self._stopping: set[asyncio.Task[None]] = set()
        self._spawned: set[_Process] = set()  # until their exit is seen
        self._closed = False
        self.stats = WorkerStats()

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.alive else None

    async def generate(
        self, messages: list[dict[str, str]], options: dict[str, Any], max_tokens: int | None
    ) -> AsyncGenerator[Piece | Finished]:
        """The pieces of one generation, then its ``Finished``; raises ``WorkerError``."""
        await self._lock.acquire()
        process: _Process | None = None
        job = 0
        running = False
        try:
            process = await self._ready_process()
            job = next(self._ids)
            self.stats.generations += 1
            running = True
            await process.send(Generate(job, messages, options, max_tokens))
            while True:
                frame = await process.inbox.get()
                if isinstance(frame, Piece) and frame.id == job:
                    yield frame
                elif isinstance(frame, Finished) and frame.id == job:
                    running = False
                    self._failures.clear()
                    yield frame
                    return
                elif isinstance(frame, Failed) and frame.id == job:
                    running = False
                    raise GenerationFailed(frame.message)
                elif isinstance(frame, _Exited):
                    running = False
                    raise self._crash_error(frame, "while generating")
                else:  # a frame out of turn: the worker is not following the protocol
                    running = False
                    process.broken = f"it sent {type(frame).__name__} out of turn"
                    process.kill(stopping=False)
                    raise WorkerCrashed("the local model's worker broke the protocol")
        finally:
            if running and process is not None and process.alive:
                # stopped early: the lock passes to the task that stops the generation
                task = asyncio.create_task(self._stop_generation(process, job))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
            else:
                self._lock.release()

    async def check(self) -> Ready:
        """Start the worker if needed (loading and checking the model); its ``Ready``."""
        async with self._lock:
            process = await self._ready_process()
            assert process is not None
            assert self.stats.ready is not None
            return self.stats.ready

    async def aclose(self) -> None:
        self._closed = True
        self._process = None
        for process in list(self._spawned):
            await process.close()
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- starting -------------------------------------------------------------------

    async def _ready_process(self) -> _Process:
        if self._closed:
            raise WorkerUnavailable("the local model is shutting down")
        process = self._process
        if process is not None and process.alive:
            return process
        self._process = None
        await self._wait_out_backoff()
        load = self._load_request()
        process = await _Process.spawn(self._settings.python, self._exited)
        self._spawned.add(process)
        self.stats.started += 1
        await process.send(load)
        try:
            frame = await asyncio.wait_for(process.inbox.get(), self._settings.load_timeout_seconds)
        except BaseException as exc:  # a timeout, or the caller went away mid-load
            process.kill()
            if not isinstance(exc, TimeoutError):
                raise
            error = WorkerUnavailable(
                f"the local model did not load within {self._settings.load_timeout_seconds:g} s"
            )
            self._failures.record(error, self._clock(), self._settings.max_backoff_seconds)
            self.stats.killed += 1
            raise error from None
        if isinstance(frame, Ready):
            self.stats.ready = frame
            self._process = process
            log.info(
                "local model %s ready in worker %d (load %.2f s, check %.2f s)",
                frame.model,
                frame.pid,
                frame.load_seconds,
                frame.check_seconds,
            )
            return process
        if isinstance(frame, _Exited):
            raise self._crash_error(frame, "while loading")
        process.kill()
        message = frame.message if isinstance(frame, LoadFailed) else "it broke the protocol"
        error = WorkerUnavailable(f"could not load the local model: {message}")
        self._failures.record(error, self._clock(), self._settings.max_backoff_seconds)
        raise error

    async def _wait_out_backoff(self) -> None:
        wait = self._failures.retry_at - self._clock()
        if wait <= 0:
            return
        last = self._failures.last
        if wait > WAIT_OUT_BACKOFF_SECONDS and last is not None:
            raise type(last)(
                f"{last.message} (failed {self._failures.count} times in a row; "
                f"next try in {wait:.0f} s)",
                retry_after=wait,
            )
        await asyncio.sleep(wait)

    # --- stopping and dying ---------------------------------------------------------

    async def _stop_generation(self, process: _Process, job: int) -> None:
        """Cancel ``job`` and wait for its end; kill the worker if it does not stop."""
        try:
            self.stats.cancelled += 1
            if await process.send(Cancel(job)) and await self._ended(process, job):
                return
            if process.alive:
                log.warning(
                    "local model worker %d did not stop within %g s of a cancel: killed",
                    process.pid,
                    self._settings.cancel_grace_seconds,
                )
                self.stats.killed += 1
                process.kill()
                if self._process is process:
                    self._process = None
        finally:
            self._lock.release()

    async def _ended(self, process: _Process, job: int) -> bool:
        """Wait out the cancelled ``job``'s last frame; False after the grace period."""
        try:
            async with asyncio.timeout(self._settings.cancel_grace_seconds):
                while True:
                    frame = await process.inbox.get()
                    if isinstance(frame, _Exited):
                        return True
                    if isinstance(frame, Finished | Failed) and frame.id == job:
                        return True
        except TimeoutError:
            return False

    def _exited(self, process: _Process) -> None:
        """The reader saw ``process`` end: a crash unless it was stopped on purpose."""
        assert process.exit is not None
        self._spawned.discard(process)
        self.stats.last_exit = process.exit.description
        if self._process is process:
            self._process = None
        if process.stopping:
            return
        self.stats.crashes += 1
        tail = process.stderr_tail()
        log.warning(
            "local model worker %d %s%s",
            process.pid,
            process.exit.description,
            f"; its last output:\n{tail}" if tail else "",
        )
        error = WorkerCrashed(f"the local model's worker process {process.exit.description}")
        self._failures.record(error, self._clock(), self._settings.max_backoff_seconds)

    def _crash_error(self, exit: _Exited, when: str) -> WorkerCrashed:
        return WorkerCrashed(
            f"the local model's worker process {exit.description} {when}; this request "
            "could not be completed and the model restarts for the next one "
            "(`parley doctor` checks the local model)"
        )
