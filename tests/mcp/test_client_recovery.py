"""The MCP client against servers that misbehave: restarted, crashing mid-call, killed or
stopped while idle, writing junk on stdout, failing to start again and again. Real SDK
servers over stdio, streamable HTTP and SSE, in processes of their own where the test
must kill or restart them; every bound on time is generous, every failure is checked to be
an ``McpClientError`` that names the server and says what happened."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

import pytest

from parley.mcp.client import (
    McpBackoff,
    McpConnectError,
    McpConnection,
    McpConnectionLost,
)
from parley.mcp.tools import to_output
from parley.mcp.transports import (
    STDERR_KEEP_BYTES,
    STDERR_TAIL,
    StderrTail,
    stdio_environment,
)
from tests.mcp.test_client import ROOT, SERVER_SCRIPT, free_port, stdio_config, url_config

pytestmark = pytest.mark.anyio


class ServerProcess:
    """The test MCPServer over HTTP or SSE in a process of its own, which a test can kill
    and start again on the same port (a new process, so a new session manager)."""

    def __init__(self, transport: Literal["http", "sse"] = "http", *, with_get: bool = True):
        self.transport = transport
        self.with_get = with_get
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'mcp' if self.transport == 'http' else 'sse'}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        args = [sys.executable, SERVER_SCRIPT, self.transport, str(self.port)]
        if not self.with_get:
            args.append("--no-get")
        env = stdio_environment({"PYTHONPATH": ROOT})
        self.process = subprocess.Popen(
            args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            assert self.process.poll() is None, "the server process exited"
            assert time.monotonic() < deadline, "the server did not start listening"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def pid_of(conn: McpConnection) -> int:
    result = await conn.call("pid", {})
    assert isinstance(result.structured_content, dict)
    return int(result.structured_content["result"])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- servers that go away -----------------------------------------------------------------


async def test_http_server_restarted_between_calls_is_transparent() -> None:
    """The new process does not know the session and answers 404: the call reconnects and
    is sent again, since the server provably did not run it. No GET stream and no ping, so
    the connection cannot have noticed the restart before the call."""
    with ServerProcess(with_get=False) as server:
        config = url_config("http", server.url, ping_interval_seconds=0)
        async with McpConnection(config) as conn:
            assert await pid_of(conn) == server.pid
            old = server.pid
            await asyncio.to_thread(server.restart)  # the loop runs on meanwhile
            assert conn.health().connected  # nothing noticed yet
            started = time.monotonic()
            assert await pid_of(conn) == server.pid != old
            assert time.monotonic() - started < 5
            assert conn.health().last_error is None
            assert to_output(await conn.call("echo", {"text": "again"})).content == "again"


async def test_sse_server_restarted_between_calls_is_transparent() -> None:
    with ServerProcess("sse") as server:
        async with McpConnection(url_config("sse", server.url, ping_interval_seconds=0)) as conn:
            old = await pid_of(conn)
            assert old == server.pid
            await asyncio.to_thread(server.restart)  # the loop runs on meanwhile
            started = time.monotonic()
            assert await pid_of(conn) == server.pid != old
            assert time.monotonic() - started < 5


async def test_http_server_dying_mid_call_is_a_clear_error_and_not_retried(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    with ServerProcess(with_get=False) as server:
        config = url_config("http", server.url, ping_interval_seconds=0, timeout_seconds=20)
        async with McpConnection(config) as conn:
            old = await pid_of(conn)
            started = time.monotonic()
            with pytest.raises(McpConnectionLost) as caught:
                await conn.call("crash", {"marker": str(marker)})
            assert time.monotonic() - started < 5  # not the 20 s timeout
            message = str(caught.value)
            assert "MCP server 'echo'" in message
            assert "the connection broke during the call to 'crash'" in message
            assert "not retried" in message
            assert marker.read_text().split() == [str(old)]
            assert not conn.health().connected
            await asyncio.to_thread(server.restart)  # the loop runs on meanwhile
            assert await pid_of(conn) == server.pid != old


async def test_stdio_server_exiting_mid_call_is_a_clear_error_and_not_retried(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    async with McpConnection(stdio_config(timeout_seconds=20)) as conn:
        old = await pid_of(conn)
        started = time.monotonic()
        with pytest.raises(McpConnectionLost) as caught:
            await conn.call("crash", {"marker": str(marker)})
        assert time.monotonic() - started < 5  # not the 20 s timeout
        assert "the connection broke during the call to 'crash'" in str(caught.value)
        assert "the server process exited" in str(caught.value)
        assert conn.health().last_error == str(caught.value)
        # A retry would have started a second process, which would have written its pid.
        assert marker.read_text().split() == [str(old)]
        new = await pid_of(conn)
        assert new != old
        assert not alive(old)
        assert conn.health().last_error is None


async def test_stdio_server_killed_while_idle_costs_the_next_call_nothing() -> None:
    async with McpConnection(stdio_config(ping_interval_seconds=0)) as conn:
        old = await pid_of(conn)
        os.kill(old, signal.SIGKILL)
        await asyncio.sleep(0.5)  # idle
        started = time.monotonic()
        new = await pid_of(conn)
        assert new != old
        assert time.monotonic() - started < 10  # a fresh process; no error, no timeout
        assert conn.health().last_error is None


async def test_ping_drops_a_stdio_server_that_stopped_answering() -> None:
    """A stopped process keeps its pipes open, so only a ping can tell; without it the
    next call would wait out its whole timeout."""
    config = stdio_config(ping_interval_seconds=0.3, timeout_seconds=4)
    async with McpConnection(config) as conn:
        old = await pid_of(conn)
        try:
            os.kill(old, signal.SIGSTOP)
            deadline = time.monotonic() + 10  # the ping's own timeout is 4 s
            while conn.health().connected:
                assert time.monotonic() < deadline, "the ping never noticed"
                await asyncio.sleep(0.05)
            assert "no answer to a ping" in (conn.health().last_error or "")
            new = await pid_of(conn)
            assert new != old
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old, signal.SIGKILL)


async def test_ping_notices_a_restarted_http_server_while_idle() -> None:
    with ServerProcess(with_get=False) as server:
        config = url_config("http", server.url, ping_interval_seconds=0.3)
        async with McpConnection(config) as conn:
            old = await pid_of(conn)
            await asyncio.to_thread(server.restart)  # the loop runs on meanwhile
            deadline = time.monotonic() + 5
            while conn.health().connected:
                assert time.monotonic() < deadline, "the ping never noticed"
                await asyncio.sleep(0.05)
            # No GET stream and no call: only the ping can have found the server gone.
            assert "the connection dropped" in (conn.health().last_error or "")
            assert await pid_of(conn) == server.pid != old


async def test_pings_keep_a_healthy_idle_session() -> None:
    """Pings on a healthy idle connection are answered: it stays on the same process."""
    async with McpConnection(stdio_config(ping_interval_seconds=0.1)) as conn:
        first = await pid_of(conn)
        await asyncio.sleep(1.0)  # several pings
        assert conn.health().connected
        assert await pid_of(conn) == first


async def test_garbage_on_stdout_during_a_call_does_not_cost_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with McpConnection(stdio_config()) as conn:
        first = await pid_of(conn)
        started = time.monotonic()
        result = await conn.call("garble", {"text": "the answer"})
        assert time.monotonic() - started < 4
        assert to_output(result).content == "the answer"
        # The junk did reach the client: five lines it could not parse (the sixth, an
        # answer to a request never made, parses and is dropped).
        unparsed = [r for r in caplog.records if "Failed to parse JSONRPC" in r.getMessage()]
        assert len(unparsed) == 5
        assert await pid_of(conn) == first  # the same process, still connected
        assert to_output(await conn.call("echo", {"text": "ok"})).content == "ok"


# -- reconnect backoff ---------------------------------------------------------------------


async def test_failed_connects_back_off_and_a_success_resets(tmp_path: Path) -> None:
    starts, up = tmp_path / "starts", tmp_path / "up"
    script = tmp_path / "server.py"
    script.write_text(
        f"import pathlib\n"
        f"with open({str(starts)!r}, 'a') as f:\n    f.write('x')\n"
        f"if not pathlib.Path({str(up)!r}).exists():\n    raise SystemExit(1)\n"
        f"from tests.mcp.servers import build\nbuild().run()\n"
    )
    clock = FakeClock()
    config = stdio_config(
        args=(str(script),), reconnect_backoff_seconds=0.5, max_reconnect_backoff_seconds=2
    )

    def attempts() -> int:
        return len(starts.read_text()) if starts.exists() else 0

    async def refused(retry_in: float) -> None:
        started = time.monotonic()
        before = attempts()
        with pytest.raises(McpBackoff) as caught:
            await conn.call("echo", {"text": "x"})
        assert time.monotonic() - started < 0.2
        assert attempts() == before
        assert caught.value.retry_in == pytest.approx(retry_in)
        assert f"will retry connecting in {retry_in:.1f} s" in str(caught.value)

    async def fails() -> None:
        before = attempts()
        with pytest.raises(McpConnectError) as caught:
            await conn.call("echo", {"text": "x"})
        assert not isinstance(caught.value, McpBackoff)
        assert attempts() == before + 1

    async with McpConnection(config, clock=clock) as conn:
        await fails()
        await fails()  # one quick second try
        await refused(0.5)
        clock.now += 0.6
        await fails()
        clock.now += 0.9
        await refused(0.1)
        clock.now += 0.2
        await fails()
        clock.now += 2.1
        await fails()
        await refused(2.0)  # capped at max_reconnect_backoff_seconds

        up.touch()
        clock.now += 2.1
        assert to_output(await conn.call("echo", {"text": "up"})).content == "up"

        # A success resets the backoff: the next failures start from the beginning.
        up.unlink()
        await conn.call("exit_soon", {})
        deadline = time.monotonic() + 5
        while conn.health().connected:
            assert time.monotonic() < deadline, "the exit was never noticed"
            await asyncio.sleep(0.05)
        await fails()
        await fails()
        await refused(0.5)


# -- stderr ---------------------------------------------------------------------------------

FLOOD_MB = 21
FLOOD = f"""\
import sys, time
line = "x" * 1023 + "\\n"
for _ in range({FLOOD_MB} * 1024):
    sys.stderr.write(line)
sys.stderr.write("the last words\\n")
sys.stderr.flush()
time.sleep(0.5)
sys.exit(3)
"""


def temporary_file_sizes() -> dict[int, int]:
    """Inode -> size of the temporary files this process has open (deleted ones
    included)."""
    sizes: dict[int, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            info = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and (
            target.startswith(tempfile.gettempdir()) or "(deleted)" in target
        ):
            sizes[info.st_ino] = info.st_size
    return sizes


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
async def test_a_flood_on_stderr_is_kept_to_a_bounded_tail() -> None:
    """A server that writes megabytes to stderr and then dies at startup: the error still
    ends with what it wrote last, and neither disk nor memory held the flood."""
    largest = 0
    done = asyncio.Event()
    before = set(temporary_file_sizes())  # other tests' files, open in this process

    async def watch() -> None:
        nonlocal largest
        while not done.is_set():
            sizes = temporary_file_sizes()
            largest = max([largest, *(size for ino, size in sizes.items() if ino not in before)])
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    try:
        async with McpConnection(stdio_config(args=("-c", FLOOD), timeout_seconds=20)) as conn:
            with pytest.raises(McpConnectError) as caught:
                await conn.list_tools()
    finally:
        done.set()
        await watcher
    assert time.monotonic() - started < 15
    message = str(caught.value)
    assert message.endswith("x\nthe last words")
    shown = message.partition("; stderr: ")[2]
    assert shown.startswith("xxxx")
    assert len(shown) < STDERR_TAIL
    assert largest < STDERR_KEEP_BYTES


async def test_the_stderr_tail_keeps_only_the_last_bytes() -> None:
    tail = StderrTail(limit=1000)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", FLOOD, stdin=subprocess.DEVNULL, stderr=tail.writer
        )
        tail.spawned()
        assert await process.wait() == 3
        assert tail.text(chars=50).endswith("x\nthe last words")
        assert tail.received > FLOOD_MB * 1024 * 1024
        assert len(tail) == 1000
    finally:
        tail.close()
