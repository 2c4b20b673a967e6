"""``parley chat`` end to end: the real REPL as a subprocess, stdin piped, against a tiny
OpenAI-compatible streaming server run in a background thread."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
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
