"""The document reader processes: a pool of long-lived workers, one job each at a time.

A job first takes a slot (``slots.py``: a bound in all, a smaller one per owner), then
an idle reader, or a new one when none is idle. The reader runs the job under its
deadline; the frames it answers are the job's result. The reader is killed (SIGKILL to
its process group) when the deadline passes or the job is cancelled (its request was
cancelled, its client left and ``server.on_disconnect`` cancels it, the server stops):
what it was doing cannot cost anything more. When a reader dies (a crash in native
code, the memory limit, a kill from outside) only its job fails, with
``ReaderCrashed``; the next job gets a new reader.

Pool or process per document: measured on the 2-core machine this was written on,
starting ``python -m parley.extraction.worker`` (Python, pypdf, python-docx, lxml,
BeautifulSoup and Parley's readers imported) takes 0.6-0.7 s of CPU and 70 MB, against
2-5 ms a page of an ordinary PDF. A process per document would pay that start for
every attachment and every knowledge upload (a thousand small files: ten minutes of
CPU), so readers are kept: started on demand, idle ones exit after
``documents.idle_seconds``, and one is replaced after ``MAX_JOBS`` jobs or once its
memory has grown past ``RETIRE_RSS_MB`` (a big document leaves a big heap behind). A
stuck or dying reader costs its own job and a new start, nothing else.

What does not belong here: what a job is read into (``clients.py``), what a reader
runs (``worker.py``, ``readers.py``), the frames (``protocol.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from parley.extraction.protocol import (
    Extracted,
    Failed,
    ProtocolError,
    Ready,
    Reply,
    Request,
    Text,
    decode_reply,
    encode,
)
from parley.extraction.slots import Slots
from parley.settings.extraction import DocumentSettings

log = logging.getLogger(__name__)

FRAME_LIMIT = 16 * 1024 * 1024
STDERR_TAIL_BYTES = 16 * 1024
START_SECONDS = 30.0
"""How long a new reader may take to say ``Ready``."""
MAX_JOBS = 200
RETIRE_RSS_MB = 300
NICE = 10
"""How much lower a reader's CPU priority is than the server's."""


class ReadFailed(Exception):
    """The job has no answer: see the subclasses."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ReadTimedOut(ReadFailed):
    """The job ran past its deadline; its reader was killed."""


class ReaderCrashed(ReadFailed):
    """The reader died (or broke the protocol) before the job was answered."""


class _Exited:
    def __init__(self, description: str) -> None:
        self.description = description


class _Reader:
    """One reader process: its frames in ``inbox``, the tail of its stderr kept."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.inbox: asyncio.Queue[Reply | _Exited] = asyncio.Queue()
        self.exit: _Exited | None = None
        self.broken: str | None = None
        self.jobs = 0
        self.expiry: asyncio.TimerHandle | None = None
        self._tail: deque[bytes] = deque()
        self._tasks = [
            asyncio.create_task(self._read_frames(), name="document-reader-frames"),
            asyncio.create_task(self._read_stderr(), name="document-reader-stderr"),
        ]

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.exit is None and self.proc.returncode is None

    async def send(self, frame: Request) -> bool:
        stdin = self.proc.stdin
        if stdin is None or not self.alive:
            return False
        try:
            stdin.write(encode(frame))
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self, grace: float = 2.0) -> None:
        """End of input (the reader exits at once), then SIGKILL."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            self.kill()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def describe_exit(self) -> str:
        assert self.exit is not None
        tail = b"".join(self._tail).decode("utf-8", "replace").strip().splitlines()[-3:]
        return self.exit.description + (f" ({' / '.join(tail)})" if tail else "")

    async def _read_frames(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                self.inbox.put_nowait(decode_reply(line))
        except (ProtocolError, ValueError) as exc:  # junk, or a line over FRAME_LIMIT
            self.broken = f"it wrote something that is not a frame ({exc})"
            self.kill()
        returncode = await self.proc.wait()
        self.exit = _Exited(self.broken or _describe(returncode))
        self.inbox.put_nowait(self.exit)

    async def _read_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        size = 0
        while chunk := await stderr.read(4096):
            self._tail.append(chunk)
            size += len(chunk)
            while size > STDERR_TAIL_BYTES and len(self._tail) > 1:
                size -= len(self._tail.popleft())


class ReaderPool:
    """Reader processes and the slots that bound them; see the module docstring."""

    def __init__(self, settings: DocumentSettings, *, python: str = sys.executable) -> None:
        self.settings = settings
        self._python = python
        self.slots = Slots(settings.workers, settings.per_owner)
        self._idle: list[_Reader] = []
        self._all: set[_Reader] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self.started = 0
        self.killed = 0

    def pids(self) -> list[int]:
        """The live reader processes, busy or idle."""
        return sorted(reader.pid for reader in self._all if reader.alive)

    async def run(
        self,
        job: Callable[[int], Request],
        *,
        owner: str,
        deadline: float,
        background: bool = False,
        wait: float | None = None,
    ) -> list[Reply]:
        """The frames answering ``job(id)``, the last one ``Text``, ``Extracted`` or
        ``Failed``. ``Overloaded`` when no slot came free within ``wait``;
        ``ReadTimedOut`` past ``deadline`` seconds; ``ReaderCrashed``."""
        await self.slots.acquire(owner, background=background, wait=wait)
        try:
            reader = await self._reader()
            return await self._exchange(reader, job(next(self._ids)), deadline)
        finally:
            self.slots.release(owner)

    async def aclose(self) -> None:
        self._closed = True
        for reader in list(self._all):
            reader.kill()
            await reader.close(0)
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def _exchange(self, reader: _Reader, job: Request, deadline: float) -> list[Reply]:
        frames: list[Reply] = []
        keep = False
        try:
            async with asyncio.timeout(deadline):
                await reader.send(job)
                while not frames or not isinstance(frames[-1], Text | Extracted | Failed):
                    frames.append(await self._next(reader, job.id))
            last = frames[-1]
            keep = not (isinstance(last, Failed) and last.retire)
            return frames
        except TimeoutError:
            self._kill(reader, f"it ran past its deadline of {deadline:g} s")
            raise ReadTimedOut(f"reading it took longer than {deadline:g} s") from None
        except asyncio.CancelledError:
            self._kill(reader, "its request was cancelled", level=logging.INFO)
            raise
        finally:
            reader.jobs += 1
            if keep:
                self._park(reader)
            else:
                self._retire(reader, kill=True)

    async def _next(self, reader: _Reader, job_id: int) -> Reply:
        frame = await reader.inbox.get()
        if isinstance(frame, _Exited):
            description = reader.describe_exit()
            log.warning("document reader %d %s while reading", reader.pid, description)
            raise ReaderCrashed(f"the process reading it {description}")
        if isinstance(frame, Ready) or frame.id != job_id:
            reader.kill()
            raise ReaderCrashed("the process reading it broke the protocol")
        return frame

    def _kill(self, reader: _Reader, why: str, *, level: int = logging.WARNING) -> None:
        if reader.alive:
            log.log(level, "document reader %d killed: %s", reader.pid, why)
            self.killed += 1
            reader.kill()

    # --- readers ----------------------------------------------------------------------

    async def _reader(self) -> _Reader:
        while self._idle:
            reader = self._idle.pop()
            if reader.expiry is not None:
                reader.expiry.cancel()
            if reader.alive:
                return reader
            self._retire(reader)
        return await self._spawn()

    async def _spawn(self) -> _Reader:
        if self._closed:
            raise ReaderCrashed("the server is shutting down")
        proc = await asyncio.create_subprocess_exec(
            *self._argv(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=FRAME_LIMIT,
            env=_environment(),
            start_new_session=True,  # its own process group, killed whole
        )
        reader = _Reader(proc)
        self._all.add(reader)
        self.started += 1
        try:
            async with asyncio.timeout(START_SECONDS):
                frame = await reader.inbox.get()
        except BaseException:
            self._retire(reader, kill=True)
            raise
        if isinstance(frame, Ready):
            return reader
        self._retire(reader, kill=True)
        why = reader.describe_exit() if isinstance(frame, _Exited) else "broke the protocol"
        log.error("a document reader could not start: it %s", why)
        raise ReaderCrashed(f"no document reader could start (it {why})")

    def _argv(self) -> list[str]:
        return [
            self._python,
            "-m",
            "parley.extraction.worker",
            "--memory-mb",
            str(self.settings.max_memory_mb),
            "--nice",
            str(NICE),
            "--reader",
            self.settings.reader,
        ]

    def _park(self, reader: _Reader) -> None:
        if (
            not reader.alive
            or self._closed
            or reader.jobs >= MAX_JOBS
            or _rss_mb(reader.pid) > RETIRE_RSS_MB
        ):
            self._retire(reader)
            return
        loop = asyncio.get_running_loop()
        reader.expiry = loop.call_later(self.settings.idle_seconds, self._expire, reader)
        self._idle.append(reader)

    def _expire(self, reader: _Reader) -> None:
        if reader in self._idle:
            self._idle.remove(reader)
            self._retire(reader)

    def _retire(self, reader: _Reader, *, kill: bool = False) -> None:
        """Stop the reader (at once with ``kill``) and forget it."""
        self._all.discard(reader)
        if kill:
            reader.kill()
        task = asyncio.create_task(reader.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def _environment() -> dict[str, str]:
    """None of the server's variables (its keys) but what Python needs to start."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def _rss_mb(pid: int) -> float:
    try:
        resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return resident * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"
