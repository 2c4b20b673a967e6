"""The MCP manager against real SDK servers: deadlines, quarantine, health, shutdown."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.mcp.client import McpClientError
from parley.mcp.config import ServerConfig
from parley.mcp.manager import McpManager, McpQuarantined, _Policy, _Server
from parley.mcp.tools import to_output
from tests.mcp.test_client import ROOT, HttpServer, stdio_config

pytestmark = pytest.mark.anyio

HANG_AT_START = "import sys, time\nsys.stdin.readline()\ntime.sleep(60)\n"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    with HttpServer() as server:
        yield server


def http_config(server: HttpServer, name: str = "web", timeout: float = 5) -> ServerConfig:
    return ServerConfig(name=name, transport="http", url=server.url, timeout_seconds=timeout)


def names(tools: list[object]) -> set[str]:
    return {tool.spec.name for tool in tools}  # type: ignore[attr-defined]


def entry(manager: McpManager, name: str) -> dict[str, object]:
    return next(item for item in manager.health() if item["name"] == name)


async def test_a_hanging_server_costs_only_its_own_timeout(http_server: HttpServer) -> None:
    hung = stdio_config(name="hung", args=("-c", HANG_AT_START), timeout_seconds=1)
    async with McpManager([http_config(http_server), hung]) as manager:
        started = time.monotonic()
        tools = await manager.tools()
        elapsed = time.monotonic() - started
        assert elapsed < 2.0
        assert "mcp__web__echo" in names(tools)
        assert not any(name.startswith("mcp__hung__") for name in names(tools))
        bad = entry(manager, "hung")
        assert bad["connected"] is False
        assert bad["tool_count"] == 0
        assert "1 s" in str(bad["last_error"])
        assert bad["consecutive_failures"] == 1
        assert entry(manager, "web")["last_error"] is None


async def test_a_server_that_cannot_start_does_not_hide_the_others(tmp_path: Path) -> None:
    missing = stdio_config(name="missing", command=str(tmp_path / "no-such-server"))
    async with McpManager([missing, stdio_config(name="good")]) as manager:
        tools = await manager.tools()
        assert "mcp__good__echo" in names(tools)
        assert not any(name.startswith("mcp__missing__") for name in names(tools))
        assert "could not connect" in str(entry(manager, "missing")["last_error"])
        echo = next(tool for tool in tools if tool.spec.name == "mcp__good__echo")
        out = await echo.run({"text": "hi"}, None)  # type: ignore[arg-type]
        assert out.content == "hi"


async def test_quarantine_backoff_and_recovery(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    starts = tmp_path / "starts"
    script.write_text(f"open({str(starts)!r}, 'a').write('x')\nraise SystemExit(1)\n")
    config = stdio_config(name="flaky", args=(str(script),), env={"PYTHONPATH": ROOT})
    clock = FakeClock()
    manager = McpManager([config], failures_to_quarantine=2, quarantine_seconds=300, clock=clock)
    try:
        assert await manager.tools() == []
        assert entry(manager, "flaky")["quarantined_for_seconds"] is None
        assert await manager.tools() == []
        assert entry(manager, "flaky")["quarantined_for_seconds"] == 300
        assert starts.read_text() == "xx"

        # Quarantined: no attempt at all, from tools() or from a call.
        clock.now += 299
        assert await manager.tools() == []
        with pytest.raises(McpQuarantined, match="quarantined for another 1 s"):
            await manager.call("flaky", "echo", {"text": "x"})
        assert starts.read_text() == "xx"

        # One more failure after it ends: quarantined again for twice as long...
        clock.now += 2
        assert await manager.tools() == []
        assert starts.read_text() == "xxx"
        assert entry(manager, "flaky")["quarantined_for_seconds"] == 600
        # ...and never for more than ten minutes.
        clock.now += 601
        assert await manager.tools() == []
        assert entry(manager, "flaky")["quarantined_for_seconds"] == 600

        # The server is fixed; once the quarantine ends it is used again.
        script.write_text("from tests.mcp.servers import build\nbuild().run()\n")
        clock.now += 601
        tools = await manager.tools()
        assert "mcp__flaky__echo" in names(tools)
        health = entry(manager, "flaky")
        assert health["quarantined_for_seconds"] is None
        assert health["consecutive_failures"] == 0
        assert health["last_error"] is None
        assert health["connected"] is True
    finally:
        await manager.close()


async def test_tool_call_timeouts_quarantine_the_server(http_server: HttpServer) -> None:
    clock = FakeClock()
    config = http_config(http_server, timeout=1)
    async with McpManager([config], failures_to_quarantine=2, clock=clock) as manager:
        tools = {tool.info.name: tool for tool in await manager.tools()}
        for _ in range(2):
            out = await tools["hang"].run({"seconds": 30}, None)  # type: ignore[arg-type]
            assert out.is_error
            assert "did not answer within 1 s" in out.content
        health = entry(manager, "web")
        assert health["quarantined_for_seconds"] == 60
        out = await tools["echo"].run({"text": "x"}, None)  # type: ignore[arg-type]
        assert out.is_error
        assert "quarantined" in out.content
        assert await manager.tools() == []

        # A tool's own error is an answer, not a failure; a success ends the streak.
        clock.now += 61
        out = await tools["fail"].run({"reason": "r"}, None)  # type: ignore[arg-type]
        assert out.is_error
        assert entry(manager, "web")["consecutive_failures"] == 0
        result = await manager.call("web", "echo", {"text": "back"})
        assert to_output(result).content == "back"
        assert entry(manager, "web")["quarantined_for_seconds"] is None


async def test_health_fields(http_server: HttpServer) -> None:
    off = ServerConfig(name="off", url=http_server.url, transport="http", enabled=False)
    async with McpManager([http_config(http_server), off]) as manager:
        assert manager.health() == [
            {
                "name": "web",
                "transport": "http",
                "enabled": True,
                "connected": False,
                "quarantined_for_seconds": None,
                "consecutive_failures": 0,
                "last_error": None,
                "tool_count": 0,
                "latency_ms": None,
                "skipped_tools": [],
            },
            {
                "name": "off",
                "transport": "http",
                "enabled": False,
                "connected": False,
                "quarantined_for_seconds": None,
                "consecutive_failures": 0,
                "last_error": None,
                "tool_count": 0,
                "latency_ms": None,
                "skipped_tools": [],
            },
        ]
        tools = await manager.tools()
        assert not any(name.startswith("mcp__off__") for name in names(tools))
        web = entry(manager, "web")
        assert web["connected"] is True
        assert web["tool_count"] == len(tools)
        latency = web["latency_ms"]
        assert isinstance(latency, float)
        assert latency > 0
        with pytest.raises(McpClientError, match="disabled"):
            await manager.call("off", "echo", {"text": "x"})
        with pytest.raises(McpClientError, match="no MCP server named"):
            await manager.call("nope", "echo", {})
        # The server's answer to an unknown tool is an error result, not a failure.
        result = await manager.call("web", "no_such_tool", {})
        assert result.is_error
        web = entry(manager, "web")
        assert web["consecutive_failures"] == 0
        assert web["connected"] is True


async def test_close_stops_stdio_processes() -> None:
    manager = McpManager([stdio_config(name="one"), stdio_config(name="two")])
    children = []
    for name in ("one", "two"):
        result = await manager.call(name, "pid", {})
        assert isinstance(result.structured_content, dict)
        children.append(int(result.structured_content["result"]))
    for child in children:
        os.kill(child, 0)  # alive
    await manager.close()
    for child in children:
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    assert not any(item["connected"] for item in manager.health())
    assert await manager.tools() == []


def test_duplicate_names_and_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="two MCP servers"):
        McpManager([stdio_config(), stdio_config()])
    with pytest.raises(ValueError, match="at least 1"):
        McpManager([], failures_to_quarantine=0)


async def test_a_stuck_listing_delays_only_the_requests_that_meet_it_first() -> None:
    stuck = stdio_config(name="stuck", args=("-c", HANG_AT_START), timeout_seconds=20)
    async with McpManager([stuck, stdio_config(name="good")]) as manager:
        first = await manager.listing(wait=2)
        assert "mcp__good__echo" in names(first.tools)
        assert "still connecting" in first.problems["stuck"]
        started = time.monotonic()
        second = await manager.listing(wait=2)  # the same listing is still under way
        assert time.monotonic() - started < 1.0  # its wait is over: not another 2 s
        assert "mcp__good__echo" in names(second.tools)
        assert "still connecting" in second.problems["stuck"]


async def test_reconfiguring_a_server_mid_listing_is_a_problem_not_an_exception() -> None:
    stuck = stdio_config(name="stuck", args=("-c", HANG_AT_START), timeout_seconds=20)
    async with McpManager([stuck]) as manager:
        waiting = asyncio.create_task(manager.listing(wait=10))
        await asyncio.sleep(0.5)
        manager.configure([stdio_config(name="stuck")])  # now a working server
        listing = await asyncio.wait_for(waiting, 5)
        assert listing.tools == []
        assert "reconfigured" in listing.problems["stuck"]
        fresh = await manager.listing(wait=10)
        assert "mcp__stuck__echo" in names(fresh.tools)


def test_failures_during_a_quarantine_do_not_lengthen_it() -> None:
    clock = FakeClock()
    server = _Server(stdio_config(name="x"), _Policy(1, 60.0, clock))
    server.failed("first")
    assert server.quarantine_left() == 60
    for _ in range(5):  # the other calls of the same step, failing as they end
        server.failed("again")
    assert server.quarantine_left() == 60
    assert server.quarantines == 1
    assert server.last_error == "again"
    clock.now += 61
    server.failed("after")
    assert server.quarantine_left() == 120  # the next quarantine in a row doubles


async def test_tools_handed_out_follow_a_changed_server() -> None:
    async with McpManager([stdio_config(name="s")]) as manager:
        (pid_tool,) = [t for t in await manager.tools() if t.info.name == "pid"]
        before = (await pid_tool.run({}, None)).content  # type: ignore[arg-type]
        manager.configure([stdio_config(name="s", timeout_seconds=7)])
        after = (await pid_tool.run({}, None)).content  # type: ignore[arg-type]
        assert after.isdigit()
        assert after != before  # the same tool, on the server started with the new settings
        assert pid_tool.connection.config.timeout_seconds == 7
        manager.configure([])
        gone = await pid_tool.run({}, None)  # type: ignore[arg-type]
        assert gone.is_error
        assert "closed" in gone.content
