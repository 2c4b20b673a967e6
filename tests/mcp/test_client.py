"""The MCP client against real SDK servers over stdio, streamable HTTP and SSE (loopback).

Servers that restart, crash, stall or write junk are in ``test_client_recovery.py``."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Literal

import mcp_types as types
import pytest
import uvicorn

from parley.mcp.client import (
    McpCallTimeout,
    McpClientError,
    McpConnection,
    McpConnectionLost,
)
from parley.mcp.config import ServerConfig
from parley.mcp.listing import MAX_DESCRIPTION_CHARS, schema_problem
from parley.mcp.tools import McpTool, cap, server_tools, to_output, tool_name
from parley.tools.protocol import ToolOutput
from tests.mcp import servers

pytestmark = pytest.mark.anyio

SERVER_SCRIPT = str(Path(servers.__file__))
ROOT = str(Path(__file__).parents[2])


def stdio_config(**overrides: object) -> ServerConfig:
    values: dict[str, object] = {
        "name": "echo",
        "transport": "stdio",
        "command": sys.executable,
        "args": (SERVER_SCRIPT,),
        "env": {"PYTHONPATH": ROOT},
        "timeout_seconds": 5,
    }
    values.update(overrides)
    return ServerConfig(**values)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HttpServer:
    """The test MCPServer's streamable HTTP (or SSE) app under uvicorn, in a background
    thread."""

    def __init__(self, transport: Literal["http", "sse"] = "http") -> None:
        self.port = free_port()
        self.path = "/mcp" if transport == "http" else "/sse"
        server = servers.build()
        app = server.streamable_http_app() if transport == "http" else server.sse_app()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", ws="none", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def __enter__(self) -> HttpServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    with HttpServer() as server:
        yield server


@pytest.fixture(scope="module")
def sse_server() -> Iterator[HttpServer]:
    with HttpServer("sse") as server:
        yield server


def url_config(transport: Literal["http", "sse"], url: str, **overrides: object) -> ServerConfig:
    values: dict[str, object] = {"timeout_seconds": 5, "name": "echo"}
    values.update(overrides)
    return ServerConfig(transport=transport, url=url, **values)  # type: ignore[arg-type]


@pytest.fixture(params=["stdio", "http", "sse"])
async def connection(
    request: pytest.FixtureRequest, http_server: HttpServer, sse_server: HttpServer
) -> AsyncIterator[McpConnection]:
    if request.param == "stdio":
        config = stdio_config()
    elif request.param == "http":
        config = url_config("http", http_server.url)
    else:
        config = url_config("sse", sse_server.url)
    conn = McpConnection(config)
    try:
        yield conn
    finally:
        await conn.close()


def text_of(output: ToolOutput) -> str:
    return output.content


async def test_lists_tools_lazily_and_caches(connection: McpConnection) -> None:
    assert not connection.health().connected
    tools = await connection.list_tools()
    names = {tool.name for tool in tools}
    assert {"echo", "add", "weather", "picture", "fail", "hang", "big"} <= names
    echo = next(tool for tool in tools if tool.name == "echo")
    assert echo.description == "Say the text back."
    assert echo.input_schema["properties"]["text"]["type"] == "string"
    health = connection.health()
    assert health.connected
    assert health.tool_count == len(tools)
    assert health.last_error is None


async def test_text_structured_and_image_results(connection: McpConnection) -> None:
    tools = {tool.info.name: tool for tool in await server_tools(connection)}
    echo = tools["echo"]
    assert echo.spec.name == "mcp__echo__echo"
    assert echo.spec.parameters["type"] == "object"

    out = await echo.run({"text": "hello"}, None)  # type: ignore[arg-type]
    assert out == ToolOutput("hello")
    out = await tools["add"].run({"a": 2, "b": 3}, None)  # type: ignore[arg-type]
    assert not out.is_error
    assert "5" in out.content

    result = await connection.call("weather", {"city": "Oslo"})
    assert result.structured_content == {"city": "Oslo", "celsius": 21.5}
    out = to_output(result)
    assert '"city": "Oslo"' in out.content

    out = await tools["picture"].run({}, None)  # type: ignore[arg-type]
    assert out.content == f"[image: image/png, {len(servers.PNG)} bytes]"
    assert connection.health().latency_ms is not None


async def test_tool_error_is_an_error_output(connection: McpConnection) -> None:
    tool = McpTool(connection, next(t for t in await connection.list_tools() if t.name == "fail"))
    out = await tool.run({"reason": "tests"}, None)  # type: ignore[arg-type]
    assert out.is_error
    assert "broken on purpose: tests" in out.content


async def test_hanging_tool_times_out_and_connection_survives(connection: McpConnection) -> None:
    started = time.monotonic()
    with pytest.raises(McpCallTimeout, match="did not answer within 1 s"):
        await connection.call("hang", {"seconds": 30}, timeout_seconds=1)
    assert time.monotonic() - started < 4
    assert "did not answer" in (connection.health().last_error or "")
    result = await connection.call("echo", {"text": "still here"})
    assert to_output(result).content == "still here"
    assert connection.health().last_error is None


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_megabytes_arrive_and_are_capped(transport: str, http_server: HttpServer) -> None:
    config = stdio_config() if transport == "stdio" else url_config("http", http_server.url)
    async with McpConnection(config) as conn:
        started = time.monotonic()
        result = await conn.call("big", {"chars": 5_000_000})
        assert time.monotonic() - started < 10
        assert isinstance(result.content[0], types.TextContent)
        assert len(result.content[0].text) == 5_000_000
        out = to_output(result)
        assert len(out.content) <= 100_000
        assert "[output truncated: showing" in out.content
        assert "of 5,000,000 characters]" in out.content
        assert len(to_output(result, max_chars=500).content) <= 500


async def test_sse_results_past_the_sdk_limit_are_a_clear_error(sse_server: HttpServer) -> None:
    """The SDK's SSE client refuses events over 1 MiB (and lets no caller raise that): the
    call fails, saying so, and the next call reconnects."""
    async with McpConnection(url_config("sse", sse_server.url)) as conn:
        started = time.monotonic()
        with pytest.raises(McpConnectionLost) as caught:
            await conn.call("big", {"chars": 2_000_000})
        assert time.monotonic() - started < 4
        assert "MCP server 'echo'" in str(caught.value)
        assert "byte limit" in str(caught.value)
        assert to_output(await conn.call("echo", {"text": "after"})).content == "after"


async def test_stdio_server_exiting_while_idle_reconnects() -> None:
    async with McpConnection(stdio_config()) as conn:
        first_pid = (await conn.call("pid", {})).structured_content
        await conn.call("exit_soon", {})
        deadline = time.monotonic() + 5
        while conn.health().connected:
            assert time.monotonic() < deadline, "the exit was never noticed"
            await asyncio.sleep(0.05)
        result = await conn.call("echo", {"text": "again"})
        assert to_output(result).content == "again"
        second_pid = (await conn.call("pid", {})).structured_content
        assert second_pid != first_pid


async def test_stdio_server_dying_at_startup_is_an_error_output() -> None:
    script = (
        "import os, sys\nsys.stderr.write('secret at /opt/private/conf\\n')\n"
        "sys.stderr.flush()\nsys.stdin.readline()\nos._exit(3)\n"
    )
    async with McpConnection(stdio_config(args=("-c", script), timeout_seconds=2)) as conn:
        tool = McpTool(conn, servers_info("echo"))
        out = await tool.run({"text": "x"}, None)  # type: ignore[arg-type]
        assert out.is_error
        assert "MCP server 'echo'" in out.content
        assert "/opt/private" not in out.content  # the model and the user never see stderr
        assert "/opt/private/conf" in str(conn.health().last_error)  # admins do


def servers_info(name: str) -> object:
    from parley.mcp.client import ToolInfo

    return ToolInfo(name=name, description=name, input_schema={"type": "object"})


async def test_garbage_on_stdout_is_a_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "garbage.py"
    script.write_text(
        "import sys\nfor line in sys.stdin:\n    print('hello, this is not json', flush=True)\n"
    )
    conn = McpConnection(stdio_config(args=(str(script),), timeout_seconds=1))
    started = time.monotonic()
    with pytest.raises(McpClientError) as caught:
        await conn.list_tools()
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "could not connect" in message
    assert "invalid messages" in message
    assert not conn.health().connected
    assert conn.health().last_error == message
    await conn.close()


async def test_close_leaves_no_child_process() -> None:
    conn = McpConnection(stdio_config())
    pid = (await conn.call("pid", {})).structured_content
    assert isinstance(pid, dict)
    child = int(pid["result"])
    os.kill(child, 0)  # alive
    await conn.close()
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert not conn.health().connected
    with pytest.raises(McpClientError, match="closed"):
        await conn.list_tools()


async def test_stdio_environment_is_minimal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_SECRET_FOR_TEST", "sk-secret")
    async with McpConnection(stdio_config(env={"PYTHONPATH": ROOT, "GIVEN": "yes"})) as conn:
        secret = await conn.call("env", {"name": "PARLEY_SECRET_FOR_TEST"})
        given = await conn.call("env", {"name": "GIVEN"})
    assert to_output(secret).content == "<unset>"
    assert to_output(given).content == "yes"


async def test_unreachable_http_server_is_an_error_output() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = ServerConfig(
        name="gone", transport="http", url=f"http://127.0.0.1:{port}/mcp", timeout_seconds=1
    )
    async with McpConnection(config) as conn:
        tool = McpTool(conn, servers_info("echo"))  # type: ignore[arg-type]
        out = await tool.run({}, None)  # type: ignore[arg-type]
    assert out.is_error
    assert "MCP server 'gone'" in out.content


async def test_tools_with_unusable_schemas_are_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real server (the SDK's low-level one) lists bad schemas: those tools never reach
    the model, the log and ``health().skipped`` say why, and the rest still work."""
    config = stdio_config(name="odd", args=(SERVER_SCRIPT, "odd"))
    async with McpConnection(config) as conn:
        with caplog.at_level("WARNING", logger="parley.mcp.listing"):
            tools = {tool.info.name: tool for tool in await server_tools(conn)}
        assert set(tools) == {"fine", "wordy", "patterned"}
        wordy = tools["wordy"].spec.description
        assert len(wordy) == MAX_DESCRIPTION_CHARS
        assert wordy.endswith("w…")
        assert tools["patterned"].spec.parameters["properties"]["a"]["pattern"] == "^\\p{L}+$"
        out = await tools["fine"].run({"a": 1}, None)  # type: ignore[arg-type]
        assert out.content == "called fine"

        health = conn.health()
        assert health.tool_count == 3
        reasons = {skipped.name: skipped.reason for skipped in health.skipped}
        assert set(reasons) == set(servers.ODD_TOOLS) - set(tools)
        assert "not valid JSON Schema (at properties/a/type:" in reasons["banana"]
        assert "(at properties/a/minLength: -1 is less than" in reasons["negative"]
        assert "over the 65,536 allowed" in reasons["huge"]
        logged = caplog.text
        for name in reasons:
            assert f"tool {name!r} is left out" in logged
        # a listing from the cache is the same, and logs nothing more
        caplog.clear()
        assert {tool.name for tool in await conn.list_tools()} == set(tools)
        assert not caplog.records


def test_schema_rules() -> None:
    assert schema_problem({"type": "object", "properties": {"a": {"type": "string"}}}) is None
    assert schema_problem({}) is None  # no type: taken as an object
    assert schema_problem({"$schema": "http://json-schema.org/draft-07/schema#"}) is None
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(5_000):
        inner["a"] = {}
        inner = inner["a"]  # type: ignore[assignment]
    for schema, words in (
        ({"type": "string"}, "type is 'string', not 'object'"),
        ({"type": ["object", "null"]}, "not 'object'"),
        ({"properties": ["a"]}, "properties are not an object"),
        ({"type": "object", "required": "a"}, "(at required: 'a' is not of type 'array')"),
        ({"$schema": 7}, "$schema is not a string"),
        ({"type": "object", "properties": deep}, "cannot be read"),
    ):
        problem = schema_problem(schema)
        assert problem is not None
        assert words in problem, problem


def test_tool_names_are_sanitized_and_short() -> None:
    assert tool_name("my server", "do.thing!") == "mcp__my_server__do_thing_"
    assert len(tool_name("s" * 40, "t" * 40)) == 64


def test_cap_keeps_short_text_and_notes_truncation() -> None:
    assert cap("short", 100) == "short"
    capped = cap("y" * 1000, 200)
    assert len(capped) <= 200
    assert capped.endswith("of 1,000 characters]")


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="between 1 and 300"):
        stdio_config(timeout_seconds=0)
    with pytest.raises(ValueError, match="needs a url"):
        ServerConfig(name="x", transport="http")
    with pytest.raises(ValueError, match="an sse server needs a url"):
        ServerConfig(name="x", transport="sse")
    with pytest.raises(ValueError, match="ping_interval_seconds"):
        stdio_config(ping_interval_seconds=-1)
    with pytest.raises(ValueError, match="reconnect_backoff_seconds"):
        stdio_config(reconnect_backoff_seconds=0)
    with pytest.raises(ValueError, match="reconnect_backoff_seconds"):
        stdio_config(reconnect_backoff_seconds=5, max_reconnect_backoff_seconds=1)
    with pytest.raises(ValueError, match="needs a command"):
        ServerConfig(name="x")
    assert "sk-" not in repr(
        ServerConfig(name="x", url="http://h", transport="http", bearer_token="sk-1")
    )


def test_the_config_repr_shows_no_secrets() -> None:
    remote = ServerConfig(
        name="x",
        transport="http",
        url="http://h",
        headers={"X-Api-Key": "header-SECRET"},
        bearer_token="bearer-SECRET",
    )
    local = stdio_config(env={"GITHUB_TOKEN": "env-SECRET"})
    for config in (remote, local):
        assert "SECRET" not in repr(config)
        assert "SECRET" not in str(config)
    assert "name='x'" in repr(remote)


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_headers_and_bearer_token_reach_the_server(
    transport: Literal["http", "sse"], http_server: HttpServer, sse_server: HttpServer
) -> None:
    url = http_server.url if transport == "http" else sse_server.url
    config = url_config(transport, url, headers={"X-Parley-Test": "yes"}, bearer_token="sk-t")
    async with McpConnection(config) as conn:
        auth = await conn.call("header", {"name": "authorization"})
        custom = await conn.call("header", {"name": "x-parley-test"})
    assert to_output(auth).content == "Bearer sk-t"
    assert to_output(custom).content == "yes"
