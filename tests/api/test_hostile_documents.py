"""Hostile documents through a real server (issue 17: no key can make another's requests
wait): documents are read in reader processes with a deadline, a memory limit and a
share per owner, so a PDF whose pages cost seconds each, a DOCX that unpacks to 90 MB
of XML, a reader that crashes or a client that leaves cost their own request only,
while another owner's chats (with attachments) and /health keep answering.

Before, attachments were read in the default thread pool with no deadline: each of
these PDFs held a thread for minutes (six of them starved the server's file writes),
the DOCX for longer, and nothing stopped them when their client left.

The hostile documents are read only by the server's reader processes, never here.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import server_config
from tests.support.hostile_documents import paragraphs_docx, shared_stream_pdf
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI, Reply, text_frames

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 4.0
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(
        upstream,
        server={"on_disconnect": "cancel"},
        documents={
            "timeout_seconds": DEADLINE,
            "workers": 3,
            "per_owner": 2,
            "max_memory_mb": 512,
            "reader": "tests.support.document_readers:read",
        },
    )
    paths = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    folder = tmp_path_factory.mktemp("hostile")
    with ParleyServer(folder, config, env={"PYTHONPATH": paths}) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture(autouse=True)
def _answers(upstream: MockOpenAI) -> Iterator[None]:
    upstream.fallback = Reply(frames=text_frames(["Read it."]))
    yield
    upstream.fallback = None


def file_part(name: str, data: bytes, media_type: str) -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {
        "type": "file",
        "file": {"filename": name, "file_data": f"data:{media_type};base64,{encoded}"},
    }


def chat_body(*parts: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    content = [{"type": "text", "text": "What does it say?"}, *parts]
    return {"model": "fast", "stream": stream, "messages": [{"role": "user", "content": content}]}


def reader_pids(server: ParleyServer) -> set[int]:
    """The server's reader processes (its children running the reader module)."""
    assert server.process is not None
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server.process.pid and b"parley.extraction.worker" in command:
            found.add(int(entry.name))
    return found


class Probe(threading.Thread):
    """Bob's side while Alice attacks: /health every 50 ms and, every fourth time, a chat
    with a small attachment of its own (never the same twice: each is read anew)."""

    def __init__(self, server: ParleyServer, key: str) -> None:
        super().__init__(daemon=True)
        self.server, self.key = server, key
        self.health: list[float] = []
        self.chats: list[float] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as health, self.server.client(self.key, timeout=30) as chat:
            round_ = 0
            while not self.stopping.is_set():
                round_ += 1
                started = time.monotonic()
                answer = health.get(f"{self.server.url}/health")
                self.health.append(time.monotonic() - started)
                if answer.status_code != 200:
                    self.failures.append(f"/health {answer.status_code}")
                if round_ % 4 == 0:
                    self._chat(chat, round_)
                time.sleep(0.05)

    def _chat(self, chat: httpx.Client, round_: int) -> None:
        note = file_part(f"note{round_}.txt", f"Bob's note number {round_}.".encode(), "text/plain")
        started = time.monotonic()
        answer = chat.post("/chat/completions", json=chat_body(note))
        self.chats.append(time.monotonic() - started)
        if answer.status_code != 200 or answer.json().get("parley", {}).get("notes"):
            self.failures.append(f"chat {answer.status_code}: {answer.text[:300]}")

    def __enter__(self) -> Probe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.join(60)


def warm_up(server: ParleyServer, keys: dict[str, str]) -> None:
    """Three readers started (three attachments read at once), so that nothing measured
    waits for one to start."""

    def send(owner: str, number: int) -> int:
        memo = file_part(f"warm{number}.txt", f"warm-up {number}".encode(), "text/plain")
        with server.client(keys[owner], timeout=30) as client:
            return client.post("/chat/completions", json=chat_body(memo)).status_code

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(send, ["alice", "alice", "bob"], range(3))) == [200] * 3


def notes_of(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    notes: list[str] = answer.json()["parley"].get("notes", [])
    return "\n".join(notes)


def test_hostile_attachments_cost_only_their_own_requests(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    pdf = shared_stream_pdf(pages=300, operators=20_000)
    docx = paragraphs_docx(2_300_000)
    assert len(pdf) < 50_000
    assert len(docx) < 300_000
    warm_up(server, keys)

    def attack(part: dict[str, Any]) -> tuple[httpx.Response, float]:
        started = time.monotonic()
        with server.client(keys["alice"], timeout=DEADLINE + 30) as alice:
            answer = alice.post("/chat/completions", json=chat_body(part))
        return answer, time.monotonic() - started

    with Probe(server, keys["bob"]) as probe, ThreadPoolExecutor(2) as pool:
        attacks = [
            pool.submit(attack, file_part("slow.pdf", pdf, "application/pdf")),
            pool.submit(attack, file_part("huge.docx", docx, DOCX)),
        ]
        (pdf_answer, pdf_seconds), (docx_answer, docx_seconds) = [a.result() for a in attacks]
    # each attack ends within its deadline (plus starting a reader), with a note that
    # names its file and why; the model is told the same
    pdf_notes = notes_of(pdf_answer)
    assert "slow.pdf" in pdf_notes
    assert f"longer than {DEADLINE:g} s" in pdf_notes
    assert "huge.docx could not be read" in notes_of(docx_answer)
    assert max(pdf_seconds, docx_seconds) < DEADLINE + 10
    sent = str([r["messages"] for r in upstream.requests])
    assert "[The file could not be read: slow.pdf" in sent
    # meanwhile bob's chats, their attachments read too, and /health kept answering
    assert not probe.failures, probe.failures
    assert len(probe.chats) >= 3
    assert len(probe.health) >= 20
    assert max(probe.health) < 1.0, sorted(probe.health)[-5:]
    assert max(probe.chats) < 1.0, sorted(probe.chats)[-5:]


def test_a_crashing_reader_costs_one_request(server: ParleyServer, keys: dict[str, str]) -> None:
    with server.client(keys["alice"]) as alice, server.client(keys["bob"]) as bob:
        crashed = alice.post(
            "/chat/completions", json=chat_body(file_part("abort.txt", b"x", "text/plain"))
        )
        assert "abort.txt could not be read: the process reading it was killed by SIGABRT" in (
            notes_of(crashed)
        )
        fine = bob.post(
            "/chat/completions", json=chat_body(file_part("memo.txt", b"Room 4.", "text/plain"))
        )
        assert notes_of(fine) == ""
    assert server.process is not None
    assert server.process.poll() is None
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_stops_its_reading(
    server: ParleyServer, keys: dict[str, str], stream: bool
) -> None:
    slow = file_part("slow.pdf", shared_stream_pdf(300, 20_000), "application/pdf")
    body = chat_body(slow, stream=stream)

    def leave_early() -> str:
        with server.client(keys["alice"], timeout=2.0) as alice:  # gives up after 2 s
            try:
                alice.post("/chat/completions", json=body).read()
            except httpx.ReadTimeout:
                return "left"
        return "answered"

    with ThreadPoolExecutor(1) as pool:
        client = pool.submit(leave_early)
        time.sleep(1.0)  # well into reading it (20 s of work, a 4 s deadline)
        readers = reader_pids(server)
        ticks = {pid: _cpu_ticks(pid) for pid in readers}
        time.sleep(0.5)
        working = [pid for pid in readers if _cpu_ticks(pid) > ticks[pid]]
        assert len(working) == 1, f"readers {readers}, working {working}"
        [pid] = working
        assert client.result() == "left"
    # the client has left, well before the deadline: its reader is killed at once
    gone_by = time.monotonic() + 1.0
    while pid in reader_pids(server) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert pid not in reader_pids(server)
    assert f"document reader {pid} killed: its request was cancelled" in server.log()


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])
