"""The local-model worker process: ``python -m parley.providers.local.worker``.

It reads ``protocol`` frames on stdin and writes them on the stdout it was given. The
first frame is ``Load``: the worker loads the model with its backend, runs a one-token
generation to check that the runtime really works on this CPU, and answers ``Ready``
(or ``LoadFailed``, then exits 3). Then generations run one at a time on the main
thread while a reader thread takes ``Cancel`` frames, so a cancellation stops the
generation at its next token. When stdin closes (the server stopped, or died) the
worker exits at once.

Native code may print to file descriptor 1: before anything is loaded, the protocol
moves to a private copy of it and fd 1 is pointed at stderr, so stray output can never
corrupt a frame. A crash here (a segfault in llama.cpp) ends this process only; the
supervisor answers the affected request and starts a new worker.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import BinaryIO

from parley.providers.local.backend import LocalModel, load_backend
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
    decode_request,
    encode,
)

LOAD_FAILED_EXIT = 3
CHECK_PROMPT = [{"role": "user", "content": "Hi"}]


class _Out:
    """The protocol's output: whole frames, flushed as written, one writer at a time."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, frame: Reply) -> None:
        data = encode(frame)
        with self._lock:
            try:
                self._stream.write(data)
                self._stream.flush()
            except OSError:  # the server is gone
                os._exit(0)


def _protocol_streams() -> tuple[BinaryIO, _Out]:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # native prints (and print()) now land on stderr
    return sys.stdin.buffer, _Out(out)


def _load(request: Load, out: _Out) -> LocalModel:
    started = time.perf_counter()
    try:
        model = load_backend(request.backend)(request)
    except Exception as exc:  # a bad file, a missing package: say why, then exit
        out.send(LoadFailed(f"{type(exc).__name__}: {exc}"))
        sys.exit(LOAD_FAILED_EXIT)
    loaded = time.perf_counter()
    if request.check:  # a crash here is a runtime that cannot run on this machine
        try:
            model.generate(CHECK_PROMPT, {"temperature": 0.0}, 1, threading.Event(), _ignore)
        except Exception as exc:
            out.send(LoadFailed(f"the one-token check failed: {type(exc).__name__}: {exc}"))
            sys.exit(LOAD_FAILED_EXIT)
    checked = time.perf_counter()
    out.send(
        Ready(
            model=model.name,
            context_tokens=model.context_tokens,
            system_info=model.system_info,
            load_seconds=round(loaded - started, 4),
            check_seconds=round(checked - loaded, 4),
            pid=os.getpid(),
        )
    )
    return model


def _ignore(_: str) -> None:
    pass


class _Inbox:
    """Reads frames on a thread of its own: generations are queued, cancellations take
    effect at once. End of input or a broken frame ends the process."""

    def __init__(self, stream: BinaryIO) -> None:
        self.jobs: queue.Queue[Generate] = queue.Queue()
        self._stream = stream
        self._flags: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._read, name="inbox", daemon=True).start()

    def flag(self, job_id: int) -> threading.Event:
        with self._lock:
            return self._flags.setdefault(job_id, threading.Event())

    def done(self, job_id: int) -> None:
        with self._lock:
            self._flags.pop(job_id, None)

    def _read(self) -> None:
        for line in self._stream:
            try:
                frame = decode_request(line)
            except ProtocolError as exc:
                print(f"parley local worker: {exc}", file=sys.stderr, flush=True)
                break
            if isinstance(frame, Generate):
                self.flag(frame.id)
                self.jobs.put(frame)
            elif isinstance(frame, Cancel):
                self.flag(frame.id).set()
        os._exit(0)  # stdin closed: nobody is listening any more


def _run(model: LocalModel, inbox: _Inbox, out: _Out) -> None:
    while True:
        job = inbox.jobs.get()
        flag = inbox.flag(job.id)
        try:
            if flag.is_set():  # cancelled while queued
                out.send(Finished(job.id, None, 0, 0, 0, cancelled=True))
                continue

            def emit(text: str, job_id: int = job.id) -> None:
                out.send(Piece(job_id, text))

            outcome = model.generate(job.messages, job.options, job.max_tokens, flag, emit)
            out.send(
                Finished(
                    job.id,
                    outcome.finish_reason,
                    outcome.prompt_tokens,
                    outcome.completion_tokens,
                    outcome.kept_messages,
                    cancelled=flag.is_set(),
                )
            )
        except Exception as exc:  # the model refused this request; the next may work
            out.send(Failed(job.id, f"{type(exc).__name__}: {exc}"))
        finally:
            inbox.done(job.id)


def main() -> None:
    stream, out = _protocol_streams()
    try:
        first = decode_request(stream.readline())
    except ProtocolError as exc:
        print(f"parley local worker: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    if not isinstance(first, Load):
        print("parley local worker: the first frame must be load", file=sys.stderr, flush=True)
        sys.exit(2)
    model = _load(first, out)
    inbox = _Inbox(stream)
    inbox.start()
    _run(model, inbox, out)


if __name__ == "__main__":
    main()
