"""A document reader for the reader processes that misbehaves on request.

Named in the settings as ``documents: {reader: "tests.support.document_readers:read"}``.
The document's file name chooses what happens (an attachment's name, or a knowledge
upload's file name):

- ``abort...``: ``os.abort()`` (SIGABRT, as a failed assertion in native code);
- ``segv...``: SIGSEGV sent to itself (as a crash in native code);
- ``hang...``: a sleep that never ends (a parser stuck in a loop);
- ``memory...``: allocates until the address-space limit says no (MemoryError);
- ``raise...``: a Python error in the reader;
- ``environment...``: the names of its environment variables, as the text;
- anything else: Parley's own reader.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

from parley.extraction.protocol import ReadAttachment, Reply, Request, Text
from parley.extraction.readers import read as parley_read


def read(job: Request) -> Iterator[Reply]:
    name = job.name if isinstance(job, ReadAttachment) else job.filename
    if name.startswith("abort"):
        os.abort()
    if name.startswith("segv"):
        os.kill(os.getpid(), signal.SIGSEGV)
    if name.startswith("hang"):
        while True:
            time.sleep(3600)
    if name.startswith("memory"):
        hoard = [bytearray(64 * 1024 * 1024) for _ in range(1024)]
        raise AssertionError(f"{len(hoard)} blocks fitted in the memory limit")
    if name.startswith("raise"):
        raise RuntimeError("a bug in the reader")
    if name.startswith("environment"):
        yield Text(job.id, " ".join(sorted(os.environ)), None, "text", False)
        return
    yield from parley_read(job)
