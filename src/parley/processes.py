"""Child processes under limits: the ``workspace_shell`` tool and command hooks.

A child runs in a new session (its own process group), which is killed whole when it
times out, is cancelled, or exits leaving background processes behind. ``run_shell``
adds ``/bin/sh -c`` in a folder with a minimal environment (none of the server's
variables, so no keys), CPU, memory, file-size and process limits, and output captured
up to a cap (head and tail kept); with a ``Sandbox`` (``sandbox.py``) the shell runs
inside bubblewrap, which sees only the folder.

What does not belong here: what may be run (the shell tool's and the hooks' settings).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from parley.sandbox import Sandbox

SHELL_PATH = "/usr/local/bin:/usr/bin:/bin"
SHELL_MAX_FILE_BYTES = 100 * 1024 * 1024
SHELL_MAX_OPEN_FILES = 256
SHELL_MAX_PROCESSES = 64
"""Processes (threads count) a command may add to those its user already runs."""


@dataclass(frozen=True, slots=True)
class ShellResult:
    returncode: int | None
    timed_out: bool
    output: str
    seconds: float

    @property
    def failed(self) -> bool:
        return self.timed_out or self.returncode != 0

    def describe(self) -> str:
        if self.timed_out:
            status = (
                f"timed out after {self.seconds:.1f} s: the command and every process it "
                "started were killed"
            )
        elif self.returncode is not None and self.returncode < 0:
            status = f"killed by signal {_signal_name(-self.returncode)} ({self.seconds:.2f} s)"
        else:
            status = f"exit code {self.returncode} ({self.seconds:.2f} s)"
        return f"[{status}]\n{self.output or '(no output)'}"


async def run_shell(
    command: str,
    *,
    cwd: Path,
    timeout_seconds: float,
    max_output_chars: int,
    max_memory_mb: int,
    sandbox: Sandbox | None = None,
) -> ShellResult:
    """Run ``command`` with ``/bin/sh -c`` under limits (inside ``sandbox`` when given,
    with ``cwd`` as its /workspace); the process group dies after it."""
    env = {"PATH": SHELL_PATH, "HOME": str(cwd), "LANG": "C.UTF-8", "TERM": "dumb"}
    argv = ["/bin/sh", "-c", command]
    if sandbox is not None:
        argv = replace(sandbox, env={**env, **sandbox.env}).wrap(argv, cwd)
    limits = _limits(max_memory_mb, timeout_seconds, await asyncio.to_thread(_user_task_count))
    capture = _Capture(max_output_chars)
    started = time.monotonic()
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_apply_limits(limits),
        )
    )
    try:
        process = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while the process was being set up: it may already run (and have
        # started children). Closing its transport would kill the shell alone, leaving
        # its children orphaned: the whole group goes instead.
        with contextlib.suppress(Exception):
            orphaned = await spawn
            kill_group(orphaned.pid)
            await wait_exited(orphaned, 5.0)
        raise
    assert process.stdout is not None
    reader = asyncio.create_task(capture.drain(process.stdout))
    timed_out = False
    try:
        timed_out = not await wait_exited(process, timeout_seconds)
    finally:
        kill_group(process.pid)  # on timeout, cancellation, and leftovers after a normal exit
        await wait_exited(process, 5.0)
        done, _ = await asyncio.wait({reader}, timeout=2.0)
        if not done:
            reader.cancel()  # a process that left the group still holds the pipe
    returncode = process.returncode
    if sandbox is not None and returncode is not None and 128 < returncode < 160:
        returncode = 128 - returncode  # bubblewrap exits 128 + N when N killed its child
    return ShellResult(returncode, timed_out, capture.text(), time.monotonic() - started)


async def wait_exited(process: asyncio.subprocess.Process, seconds: float) -> bool:
    """Wait up to ``seconds`` for the shell itself to exit.

    Polled, because ``Process.wait()`` also waits for the output pipe to close, which a
    background child holds open.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pause = 0.005
    while process.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(pause, remaining))
        pause = min(pause * 2, 0.1)
    return True


Limits = list[tuple[int, tuple[int, int]]]


def _limits(max_memory_mb: int, timeout: float, tasks: int | None) -> Limits:
    cpu = math.ceil(timeout) + 1
    wanted = [
        (resource.RLIMIT_AS, max_memory_mb * 1024 * 1024),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, SHELL_MAX_FILE_BYTES),
        (resource.RLIMIT_NOFILE, SHELL_MAX_OPEN_FILES),
        (resource.RLIMIT_CORE, 0),
    ]
    if tasks is not None:
        wanted.append((resource.RLIMIT_NPROC, tasks + SHELL_MAX_PROCESSES))
    limits: Limits = []
    for kind, value in wanted:
        _, ceiling = resource.getrlimit(kind)

        def capped(number: int, ceiling: int = ceiling) -> int:
            return number if ceiling == resource.RLIM_INFINITY else min(number, ceiling)

        soft = capped(value)
        hard = capped(value + 1) if kind == resource.RLIMIT_CPU else soft  # SIGXCPU, then KILL
        limits.append((kind, (soft, hard)))
    return limits


def _apply_limits(limits: Limits) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec: keep it minimal
        for kind, values in limits:
            resource.setrlimit(kind, values)

    return apply


def _user_task_count() -> int | None:
    """Processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid = os.getuid()
    count = 0
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return count


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class _Capture:
    """Output kept within a cap: the head (70%) and the tail (30%) of what was written."""

    def __init__(self, max_chars: int) -> None:
        room = max(0, max_chars - 80)  # the marker line fits in what is left
        self.head_limit = int(room * 0.7)
        self.tail_limit = room - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.max_chars = max_chars

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted <= 0:
            return (head + self.tail.decode("utf-8", errors="replace"))[: self.max_chars]
        tail = self.tail.decode("utf-8", errors="replace")
        marker = f"\n[... {omitted} bytes of output omitted ...]\n"
        return (head + marker + tail)[: self.max_chars]
