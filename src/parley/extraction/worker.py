"""A document reader process: ``python -m parley.extraction.worker``.

Arguments: ``--memory-mb`` (its address-space limit, RLIMIT_AS), ``--nice`` (how much
to lower its CPU priority, so that the server's event loop is served first when every
core is busy) and ``--reader`` (``module:function``, see ``readers.py``). It sets its
limits before it imports any parser, answers ``Ready``, then reads jobs on stdin, one
at a time, and writes each job's frames on the stdout it was given. It exits when stdin
closes (the server stopped, or died).

A job that raises is a ``Failed`` frame, not the end of the process; but running out of
memory (``MemoryError``) ends the process after saying so (``retire``), as its heap may
be left fragmented. The server kills the process, never asks it, when a job runs past
its deadline or is cancelled: nothing here watches the time. If the server itself dies,
the kernel kills the reader too (Linux's parent-death signal), so an orphaned reader
never runs a document on to its end.

Native code may print to file descriptor 1: before anything is imported, the protocol
moves to a private copy of it and fd 1 is pointed at stderr, so stray output can never
corrupt a frame.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING, BinaryIO

from parley.extraction.protocol import (
    Failed,
    ProtocolError,
    ReadAttachment,
    Ready,
    Reply,
    Request,
    decode_request,
    encode,
)

if TYPE_CHECKING:
    from parley.extraction.readers import Reader


PR_SET_PDEATHSIG = 1


class _Out:
    """Whole frames, written as they come."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def send(self, frame: Reply) -> None:
        try:
            self._stream.write(encode(frame))
        except OSError:  # the server is gone
            os._exit(0)


def _limit(memory_mb: int, nice: int) -> None:
    for kind, value in ((resource.RLIMIT_AS, memory_mb * 1024 * 1024), (resource.RLIMIT_CORE, 0)):
        _, ceiling = resource.getrlimit(kind)
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
        resource.setrlimit(kind, (value, value))
    with contextlib.suppress(OSError):
        os.nice(nice)


def _die_with_parent() -> None:
    """SIGKILL when the server dies (Linux; elsewhere the reader exits at end of input,
    once its document is done)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(0)


def _protocol_streams() -> tuple[BinaryIO, _Out]:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # native prints (and print()) now land on stderr
    return sys.stdin.buffer, _Out(out)


def _run(job: Request, reader: Reader, memory_mb: int, out: _Out) -> None:
    name = job.name if isinstance(job, ReadAttachment) else "the document"
    try:
        for frame in reader(job):
            out.send(frame)
    except MemoryError:
        message = f"{name} needs more than {memory_mb} MB of memory to read"
        out.send(Failed(job.id, "too_large", message, retire=True))
        os._exit(0)
    except RecursionError:
        out.send(Failed(job.id, "corrupt", f"{name} is nested too deeply to read"))
    except Exception as exc:  # a reader's bug: this job fails, the process lives on
        out.send(Failed(job.id, "internal", f"{type(exc).__name__}: {exc}"))


def main() -> None:
    parser = argparse.ArgumentParser(prog="parley.extraction.worker")
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--reader", required=True)
    args = parser.parse_args()
    _die_with_parent()
    _limit(args.memory_mb, args.nice)
    stream, out = _protocol_streams()
    try:  # imported after the limits are set; a bad name fails here, before Ready
        from parley.extraction.readers import load_reader

        reader = load_reader(args.reader)
    except Exception as exc:
        print(f"parley document reader: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)
    out.send(Ready(os.getpid()))
    for line in stream:
        try:
            job = decode_request(line)
        except ProtocolError as exc:
            print(f"parley document reader: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)
        _run(job, reader, args.memory_mb, out)


if __name__ == "__main__":
    main()
