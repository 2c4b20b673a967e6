"""``parley chat`` end to end: the real REPL as a subprocess, stdin piped, against a tiny
OpenAI-compatible streaming server run in a background thread."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pyte
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PARLEY = str(Path(sys.executable).with_name("parley"))


class FakeServer:
    """Streams ``chat.completion.chunk`` frames with a ``parley`` object; records bodies.

    A user message ``fail`` gets a mid-stream error, ``slow`` a long stream (counting its
    chunks in ``slow_chunks``), model ``missing`` a 404.
    """

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.slow_chunks = 0
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        host, port = self._socket.getsockname()
        self.url = f"http://{host}:{port}/v1"
        app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(
            app, log_config=None, log_level="critical", lifespan="off", loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="fake-openai"
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert self._thread.is_alive(), "server thread died"
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    async def _models(self, request: Request) -> Response:
        data = [{"id": "first-model", "object": "model", "created": 0, "owned_by": "me"}]
        return JSONResponse({"object": "list", "data": data})

    async def _chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        if body["model"] == "missing":
            error = {"message": "model 'missing' not found", "type": "not_found", "code": None}
            return JSONResponse({"error": error}, status_code=404)
        conversation = body.get("conversation_id") or "conv-123"
        text = body["messages"][-1]["content"]
        parley = {"conversation_id": conversation, "message_id": f"msg-{len(self.bodies)}"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            frame = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                "parley": parley,
            }
            return b"data: " + orjson.dumps(frame) + b"\n\n"

        async def frames() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            yield chunk({"reasoning_content": "thinking hard"})
            if text == "slow":
                for _ in range(600):
                    self.slow_chunks += 1
                    yield chunk({"content": "tick "})
                    await asyncio.sleep(0.05)
            for word in ["Echo", ": ", text.upper(), " **done**"]:
                yield chunk({"content": word})
                if text == "fail":
                    error = {"message": "upstream exploded", "type": "api_error", "code": None}
                    yield b"data: " + orjson.dumps({"error": error, "parley": parley}) + b"\n\n"
                    return
            yield chunk({}, "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.start()
    try:
        yield fake
    finally:
        fake.close()


def chat(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PARLEY, "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_two_turns_continue_the_conversation(server: FakeServer) -> None:
    result = chat(
        "--url", server.url, "--model", "m", "--system", "be brief", stdin="hello\nagain\n"
    )
    assert result.returncode == 0, result.stderr
    assert "Echo: HELLO done" in result.stdout
    assert "Echo: AGAIN done" in result.stdout
    assert "thinking hard" in result.stdout
    assert result.stdout.count("conversation conv-123") == 1
    first, second = server.bodies
    assert first["stream"] is True
    assert first["model"] == "m"
    assert "conversation_id" not in first
    assert first["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert second["conversation_id"] == "conv-123"
    assert second["messages"] == [{"role": "user", "content": "again"}]


def test_model_defaults_to_first_listed_and_new_resets(server: FakeServer) -> None:
    result = chat("--url", server.url, stdin="one\n/new\ntwo\n/exit\nnever sent\n")
    assert result.returncode == 0, result.stderr
    assert [b["model"] for b in server.bodies] == ["first-model", "first-model"]
    assert all("conversation_id" not in b for b in server.bodies)


def test_continue_given_conversation(server: FakeServer) -> None:
    result = chat("--url", server.url, "--model", "m", "--conversation", "old-1", stdin="hi\n")
    assert result.returncode == 0, result.stderr
    assert server.bodies[0]["conversation_id"] == "old-1"
    assert server.bodies[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_errors_are_reported_and_the_repl_goes_on(server: FakeServer) -> None:
    result = chat("--url", server.url, "--model", "m", stdin="fail\nok\n")
    assert result.returncode == 0, result.stderr
    assert "error: upstream exploded" in result.stdout
    assert "Echo: OK done" in result.stdout
    assert "Traceback" not in result.stderr
    missing = chat("--url", server.url, "--model", "missing", stdin="hi\nagain\n")
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.count("error 404: model 'missing' not found") == 2


def test_connection_refused_exits_1_with_hint() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = chat("--url", f"http://127.0.0.1:{port}/v1", "--model", "m", stdin="hi\n")
    assert result.returncode == 1
    assert "cannot reach" in result.stdout
    assert "parley serve" in result.stdout
    assert "Traceback" not in result.stderr


def test_ctrl_c_stops_the_reply_and_returns_to_the_prompt(server: FakeServer) -> None:
    process = subprocess.Popen(
        [PARLEY, "chat", "--url", server.url, "--model", "m"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdin is not None
        process.stdin.write("slow\n")
        process.stdin.flush()
        deadline = time.monotonic() + 20
        while server.slow_chunks < 3:
            assert time.monotonic() < deadline, "the slow stream did not start"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate("after\n", timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "(stopped)" in stdout
    assert "Echo: AFTER done" in stdout
    assert server.slow_chunks < 600
    assert server.bodies[1]["conversation_id"] == "conv-123"
    assert "Traceback" not in stderr


class Terminal:
    """``parley chat`` on a real pseudo-terminal (its controlling tty, so Ctrl-C is the
    line discipline's), read through a terminal emulator to see the screen a person sees."""

    def __init__(self, *args: str, columns: int = 100) -> None:
        self.screen = pyte.Screen(columns, 30)
        self._stream = pyte.ByteStream(self.screen)
        self._master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns)}
        self.process = subprocess.Popen(
            [PARLEY, "chat", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)

    def type(self, keys: bytes) -> None:
        os.write(self._master, keys)

    def read_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._master], [], [], min(left, 0.05))
            if ready:
                try:
                    self._stream.feed(os.read(self._master, 65536))
                except OSError:  # the child closed the terminal
                    return

    def wait_for(self, text: str, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while text not in self.text():
            assert time.monotonic() < deadline, f"{text!r} never appeared:\n{self.text()}"
            self.read_for(0.1)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display if line.strip())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        os.close(self._master)


@pytest.mark.skipif(not hasattr(termios, "TIOCSCTTY"), reason="needs POSIX terminals")
def test_ctrl_c_on_a_terminal_leaves_one_copy_of_the_partial_answer(server: FakeServer) -> None:
    terminal = Terminal("--url", server.url.removesuffix("/v1"), "--model", "m")
    try:
        terminal.wait_for("you>")
        terminal.type(b"slow\r")
        deadline = time.monotonic() + 20
        while server.slow_chunks < 20:  # 20 ticks fill the 100-column line exactly
            assert time.monotonic() < deadline, "the slow stream did not start"
            terminal.read_for(0.05)
        terminal.read_for(0.5)  # the live region shows the ticks
        terminal.type(b"\x03")
        terminal.wait_for("(stopped)")
        terminal.type(b"/exit\r")
        terminal.read_for(1)
    finally:
        terminal.close()

    lines = terminal.text().splitlines()
    assert lines.count("thinking hard") == 1, lines  # was twice: the ^C echo wrapped
    answer = lines[lines.index("thinking hard") + 1 : lines.index("(stopped)")]
    assert answer, lines
    assert all(set(line.split()) == {"tick"} for line in answer), lines


def test_help_is_answered_by_the_client_not_the_model(server: FakeServer) -> None:
    result = chat(
        "--url", server.url, "--model", "m", stdin="/help\n/nonsense\n/usr/bin is a path\n"
    )

    assert result.returncode == 0, result.stderr
    assert "/new" in result.stdout
    assert "start a new conversation" in result.stdout
    assert "unknown command /nonsense; /help lists them" in result.stdout
    assert [b["messages"][-1]["content"] for b in server.bodies] == ["/usr/bin is a path"]


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_the_server_url_works_with_or_without_v1(server: FakeServer, suffix: str) -> None:
    root = server.url.removesuffix("/v1")
    result = chat("--url", root + suffix, "--model", "m", stdin="hi\n")

    assert result.returncode == 0, result.stderr
    assert "Echo: HI done" in result.stdout


def test_the_server_url_comes_from_parley_url(server: FakeServer) -> None:
    env = {**os.environ, "PARLEY_URL": server.url.removesuffix("/v1")}
    result = subprocess.run(
        [PARLEY, "chat", "--model", "m"],
        input="hi\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )

    assert result.returncode == 0, result.stderr
    assert "Echo: HI done" in result.stdout
