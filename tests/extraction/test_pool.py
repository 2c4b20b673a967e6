"""The reader processes under supervision, with real processes and a reader that
misbehaves on request (``tests/support/document_readers.py``): a reader that aborts,
segfaults, hangs, runs out of memory or raises costs only its own document; a
cancelled read kills its reader; readers are kept for the next document, and see none
of the server's environment. The hostile documents are read only in reader processes,
never in pytest's."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.documents.types import DocumentError, DocumentLimits, UnreadableDocument
from parley.extraction.clients import AttachmentReader, KnowledgeExtractor
from parley.extraction.pool import ReaderCrashed, ReaderPool, ReadTimedOut
from parley.extraction.protocol import ReadAttachment, Text
from parley.messages import FilePart
from parley.settings.extraction import DocumentSettings

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
READER = "tests.support.document_readers:read"


@pytest.fixture(autouse=True)
def _importable_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reader processes import the misbehaving reader from this checkout."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


@pytest.fixture
async def pool() -> AsyncIterator[ReaderPool]:
    readers = ReaderPool(DocumentSettings(reader=READER, timeout_seconds=20, max_memory_mb=512))
    try:
        yield readers
    finally:
        await readers.aclose()


def part(name: str, data: bytes = b"some text") -> FilePart:
    return FilePart(name, base64.b64encode(data).decode(), "text/plain")


async def read(pool: ReaderPool, name: str, owner: str = "alice") -> Any:
    return await AttachmentReader(pool).read(part(name), DocumentLimits(), owner)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


async def gone(pid: int, seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_reader_is_kept_for_the_next_document(pool: ReaderPool) -> None:
    first = await read(pool, "a.txt")
    [pid] = pool.pids()
    second = await read(pool, "b.txt")
    assert first.text == second.text == "some text"
    assert pool.pids() == [pid]
    assert pool.started == 1


@pytest.mark.parametrize(
    ("name", "signal_name"), [("abort.txt", "SIGABRT"), ("segv.txt", "SIGSEGV")]
)
async def test_a_crash_costs_only_its_own_document(
    pool: ReaderPool, name: str, signal_name: str
) -> None:
    await read(pool, "warm.txt")
    [pid] = pool.pids()
    with pytest.raises(DocumentError) as caught:
        await read(pool, name)
    assert caught.value.reason == "crashed"
    assert not caught.value.lasting
    assert f"killed by {signal_name}" in caught.value.message
    assert name in caught.value.message
    assert await gone(pid)
    after = await read(pool, "after.txt")
    assert after.text == "some text"
    assert pool.pids() != [pid]


async def test_a_reader_past_its_deadline_is_killed(pool: ReaderPool) -> None:
    await read(pool, "warm.txt")
    [pid] = pool.pids()

    def job(job_id: int) -> ReadAttachment:
        return ReadAttachment(job_id, "hang.txt", part("hang.txt").data, "text/plain")

    with pytest.raises(ReadTimedOut):
        await pool.run(job, owner="alice", deadline=0.5)
    assert await gone(pid)
    assert pool.killed == 1
    assert (await read(pool, "next.txt")).text == "some text"


async def test_a_cancelled_read_kills_its_reader(pool: ReaderPool) -> None:
    await read(pool, "warm.txt")
    [pid] = pool.pids()
    task = asyncio.create_task(read(pool, "hang.txt"))
    await asyncio.sleep(0.5)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(pid)
    assert pool.slots.busy == 0


async def test_running_out_of_memory_is_too_large_and_retires_the_reader(
    pool: ReaderPool,
) -> None:
    await read(pool, "warm.txt")
    [pid] = pool.pids()
    with pytest.raises(DocumentError) as caught:
        await read(pool, "memory.txt")
    assert caught.value.reason == "too_large"
    assert "512 MB" in caught.value.message
    assert await gone(pid)
    assert (await read(pool, "next.txt")).text == "some text"


async def test_a_reader_bug_fails_the_document_and_the_reader_lives_on(pool: ReaderPool) -> None:
    await read(pool, "warm.txt")
    [pid] = pool.pids()
    with pytest.raises(DocumentError) as caught:
        await read(pool, "raise.txt")
    assert "RuntimeError: a bug in the reader" in caught.value.message
    assert pool.pids() == [pid]


async def test_readers_see_none_of_the_servers_environment(
    pool: ReaderPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    names = (await read(pool, "environment.txt")).text.split()
    assert "OPENAI_API_KEY" not in names
    assert set(names) <= {"PATH", "LANG", "PYTHONPATH", "LC_CTYPE"}


async def test_a_reader_that_cannot_start_fails_the_document(tmp_path: Path) -> None:
    readers = ReaderPool(DocumentSettings(reader="no.such.module:read"))
    try:
        with pytest.raises(ReaderCrashed, match=r"no document reader could start .*No module"):
            await readers.run(
                lambda job_id: ReadAttachment(job_id, "a.txt", "", None),
                owner="alice",
                deadline=5,
            )
    finally:
        await readers.aclose()


async def test_knowledge_uploads_come_back_as_chunks(pool: ReaderPool, tmp_path: Path) -> None:
    path = tmp_path / "doc"
    path.write_text("\n\n".join(f"Paragraph {n} of the harbour log." * 20 for n in range(300)))
    extractor = KnowledgeExtractor(pool, timeout_seconds=20, max_pdf_pages=10)
    chunks, pages, title = await extractor.extract(
        path,
        owner="alice",
        filename="log.txt",
        content_type="text/plain",
        chunk_size=1000,
        chunk_overlap=100,
    )
    assert len(chunks) > 100
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert chunks[0].text.startswith("Paragraph 0 of the harbour log.")
    assert pages is None
    assert title is None
    with pytest.raises(OSError, match="FileNotFoundError"):
        await extractor.extract(
            tmp_path / "missing",
            owner="alice",
            filename="x.txt",
            content_type=None,
            chunk_size=1000,
            chunk_overlap=100,
        )


async def test_a_knowledge_upload_past_its_deadline_is_unreadable(
    pool: ReaderPool, tmp_path: Path
) -> None:
    path = tmp_path / "doc"
    path.write_text("text")
    extractor = KnowledgeExtractor(pool, timeout_seconds=0.5, max_pdf_pages=10)
    with pytest.raises(UnreadableDocument, match=r"longer than 0.5 s \(knowledge"):
        await extractor.extract(
            path,
            owner="alice",
            filename="hang.txt",
            content_type=None,
            chunk_size=1000,
            chunk_overlap=100,
        )


async def test_an_answer_from_the_reader_is_a_text_frame(pool: ReaderPool) -> None:
    frames = await pool.run(
        lambda job_id: ReadAttachment(job_id, "a.md", part("a.md", b"# Title").data, None),
        owner="alice",
        deadline=20,
    )
    assert len(frames) == 1
    assert isinstance(frames[0], Text)
    assert frames[0].text == "# Title"


async def test_an_idle_reader_exits_and_a_worn_one_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readers = ReaderPool(DocumentSettings(reader=READER, idle_seconds=0.3))
    try:
        await read(readers, "a.txt")
        [idle] = readers.pids()
        assert await gone(idle, 5)
        assert readers.pids() == []
        monkeypatch.setattr("parley.extraction.pool.MAX_JOBS", 2)
        await read(readers, "b.txt")
        [first] = readers.pids()
        await read(readers, "c.txt")  # its second job: retired after it
        assert await gone(first, 5)
        await read(readers, "d.txt")
        assert readers.pids() != [first]
        assert readers.started == 3
    finally:
        await readers.aclose()


ORPHAN = """
import asyncio, sys
from parley.extraction.pool import ReaderPool
from parley.extraction.protocol import ReadAttachment
from parley.settings.extraction import DocumentSettings

async def main() -> None:
    pool = ReaderPool(DocumentSettings(reader=sys.argv[1]))
    job = asyncio.ensure_future(
        pool.run(lambda n: ReadAttachment(n, "hang.txt", "eA==", None), owner="a", deadline=600)
    )
    while not pool.pids():
        await asyncio.sleep(0.01)
    print(pool.pids()[0], flush=True)
    await job

asyncio.run(main())
"""


async def test_a_reader_dies_with_the_server() -> None:
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ORPHAN, READER, stdout=asyncio.subprocess.PIPE
    )
    assert server.stdout is not None
    pid = int(await server.stdout.readline())
    try:
        await asyncio.sleep(1.5)  # started, and stuck in its document
        assert alive(pid)
        server.kill()  # as a crash would: nothing closes the pool
        await server.wait()
        assert await gone(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
