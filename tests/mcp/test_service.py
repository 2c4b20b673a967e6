"""McpService: server settings, the choice of tools per request, and keeping the set of
servers in step with the settings and the stored rows (real stdio servers)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from pydantic import ValidationError

from parley.errors import InvalidRequest, PermissionDenied
from parley.mcp.config import server_config
from parley.mcp.service import McpChoice, McpService, UnavailableTool, split_tool_name
from parley.settings.mcp import McpServerSettings, McpSettings, StoredServer, allowed_command
from tests.mcp.test_client import ROOT, SERVER_SCRIPT

pytestmark = pytest.mark.anyio


def stdio(**overrides: object) -> McpServerSettings:
    values: dict[str, object] = {
        "command": sys.executable,
        "args": [SERVER_SCRIPT],
        "env": {"PYTHONPATH": ROOT},
        "timeout": 5,
    }
    values.update(overrides)
    return McpServerSettings.model_validate(values)


class Rows:
    def __init__(self, *servers: StoredServer) -> None:
        self.servers = list(servers)
        self.reads = 0

    async def list(self) -> list[StoredServer]:
        self.reads += 1
        return list(self.servers)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tool_names_split_at_the_first_double_underscore() -> None:
    assert split_tool_name("mcp__files__read_file") == ("files", "read_file")
    assert split_tool_name("mcp__files__ns__tool") == ("files", "ns__tool")
    assert split_tool_name("mcp__files__*") == ("files", "*")
    assert split_tool_name("mcp__files") is None
    assert split_tool_name("web_fetch") is None


def test_server_settings_are_checked() -> None:
    assert stdio().kind == "stdio"
    assert McpServerSettings(url="https://example.com/mcp").kind == "http"
    assert McpServerSettings(url="https://example.com/sse", transport="sse").kind == "sse"
    with pytest.raises(ValidationError, match="needs a command"):
        McpServerSettings(transport="stdio")
    with pytest.raises(ValidationError, match="not both"):
        McpServerSettings(command="npx", url="https://example.com")
    with pytest.raises(ValidationError, match="http:// or https://"):
        McpServerSettings(url="file:///etc/passwd")
    with pytest.raises(ValidationError):
        McpServerSettings(command="npx", timeout=301)
    with pytest.raises(ValidationError, match="bad MCP server name"):
        McpSettings(servers={"a__b": stdio()})
    with pytest.raises(ValidationError, match="bad MCP server name"):
        McpSettings(servers={"x" * 33: stdio()})
    McpSettings(servers={"my_files-2": stdio()})


def test_the_bearer_token_comes_from_the_settings_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_MCP_TOKEN", "from-env")
    assert (
        server_config("x", McpServerSettings(url="https://x/mcp", bearer_token="t")).bearer_token
        == "t"
    )
    server = McpServerSettings(url="https://x/mcp", bearer_token_env="MY_MCP_TOKEN")
    assert server_config("x", server).bearer_token == "from-env"
    assert "from-env" not in repr(server_config("x", server))


def test_the_allowlist_is_exact() -> None:
    assert allowed_command("npx", [], ["npx", "uvx"])
    assert allowed_command("npx", ["-y", "anything"], ["npx"])  # a command alone: any args
    assert not allowed_command("/tmp/npx", [], ["npx"])
    assert not allowed_command("npx2", [], ["npx"])
    assert allowed_command("/opt/bin/server", [], ["/opt/bin/server"])
    assert not allowed_command("npx", [], [])


def test_allowlisted_arguments_must_match_every_pattern() -> None:
    allowlist = ["npx -y '@modelcontextprotocol/server-*'", "python3 /opt/mcp/files.py"]
    assert allowed_command("npx", ["-y", "@modelcontextprotocol/server-git"], allowlist)
    assert not allowed_command("npx", ["-y", "evil-package"], allowlist)
    assert not allowed_command("npx", ["-y"], allowlist)  # too few
    assert allowed_command("python3", ["/opt/mcp/files.py"], allowlist)
    assert not allowed_command("python3", ["-c", "import os"], allowlist)
    assert not allowed_command("python3", ["/opt/mcp/files.py", "--x"], allowlist)
    assert not allowed_command("npx", [], ["npx '"])  # an unparsable entry allows nothing


def test_check_refuses_unknown_servers_and_bad_names() -> None:
    service = McpService(McpSettings(servers={"files": stdio()}))
    service.check(["mcp__files__read", "mcp__files__*"])
    with pytest.raises(InvalidRequest, match="unknown MCP server 'github'"):
        service.check(["mcp__github__create_issue"])
    with pytest.raises(InvalidRequest, match="bad MCP tool name"):
        service.check(["mcp__files"])


async def test_a_choice_offers_exactly_what_it_names() -> None:
    service = McpService(McpSettings(servers={"one": stdio(), "two": stdio()}))
    try:
        every = await service.tools_for(McpChoice(every_server=True))
        names = {tool.spec.name for tool in every.tools}
        assert {"mcp__one__echo", "mcp__two__echo"} <= names
        assert every.notes == []

        exact = await service.tools_for(McpChoice(tools=("mcp__one__add", "mcp__one__nope")))
        assert [tool.spec.name for tool in exact.tools] == ["mcp__one__add"]
        assert exact.notes == ["MCP tools left out: server 'one' has no tool 'mcp__one__nope'"]

        whole = await service.tools_for(McpChoice(servers=("two",), tools=("mcp__one__echo",)))
        names = {tool.spec.name for tool in whole.tools}
        assert "mcp__one__echo" in names
        assert "mcp__one__add" not in names
        assert {"mcp__two__add", "mcp__two__echo"} <= names

        assert await service.tools_for(McpChoice()) == type(every)([], [])
    finally:
        await service.close()


async def test_stored_servers_join_change_and_leave_without_shadowing_the_config() -> None:
    clock = Clock()
    rows = Rows(
        StoredServer("stored", stdio(), 1.0, 1.0),
        StoredServer("files", stdio(enabled=False), 1.0, 1.0),  # shadowed by the config
    )
    settings = McpSettings(servers={"files": stdio()}, refresh_seconds=5)
    service = McpService(settings, rows, clock=clock)
    try:
        await service.reload()
        assert service.manager.names == ["files", "stored"]
        assert service.settings_of("files") == settings.servers["files"]  # the file wins
        assert service.configured("files")
        assert not service.configured("stored")
        first = await service.tools_for(McpChoice(servers=("stored",)))
        pid = await first.tools[0].connection.call("pid", {})
        assert first.tools
        assert not first.notes

        rows.servers = [StoredServer("stored", stdio(timeout=6), 1.0, 2.0)]
        clock.now = 1.0
        await service.refresh()
        assert rows.reads == 1  # not yet: read at most every refresh_seconds
        clock.now = 6.0
        await service.refresh()
        assert rows.reads == 2
        changed = await service.tools_for(McpChoice(servers=("stored",)))
        new_pid = await changed.tools[0].connection.call("pid", {})
        assert new_pid.structured_content != pid.structured_content  # started afresh

        rows.servers = []
        clock.now = 12.0
        gone = await service.tools_for(McpChoice(servers=("stored",)))
        assert gone.tools == []
        assert gone.notes == ["MCP tools left out: there is no MCP server named 'stored'"]
        assert service.manager.names == ["files"]
    finally:
        await service.close()


async def test_resumed_calls_of_a_server_that_is_down_get_the_reason() -> None:
    broken = McpServerSettings(command=sys.executable, args=["-c", "raise SystemExit(3)"])
    service = McpService(McpSettings(servers={"broken": broken, "one": stdio()}))
    try:
        chosen = await service.tools_for(
            McpChoice(resumed=("mcp__broken__write", "mcp__one__add", "mcp__one__nope"))
        )
        assert [tool.spec.name for tool in chosen.tools] == ["mcp__one__add"]
        assert set(chosen.missing) == {"mcp__broken__write", "mcp__one__nope"}
        assert "MCP server 'broken' is unavailable" in chosen.missing["mcp__broken__write"]
        assert chosen.missing["mcp__one__nope"] == "server 'one' has no tool 'mcp__one__nope'"
        stand_in = UnavailableTool("mcp__broken__write", chosen.missing["mcp__broken__write"])
        output = await stand_in.run({}, None)  # type: ignore[arg-type]
        assert output.is_error
        assert output.content.startswith("Not run: MCP server 'broken' is unavailable")
    finally:
        await service.close()


async def test_concurrent_refreshes_read_the_rows_once() -> None:
    class SlowRows(Rows):
        async def list(self) -> list[StoredServer]:
            await asyncio.sleep(0.1)
            return await super().list()

    rows = SlowRows()
    service = McpService(McpSettings(), rows)
    try:
        await asyncio.gather(*(service.refresh() for _ in range(10)))
        assert rows.reads == 1
    finally:
        await service.close()


async def test_a_stored_server_the_rules_now_refuse_stays_listed_but_disabled() -> None:
    def admit(server: McpServerSettings) -> None:
        if server.command == sys.executable:
            raise PermissionDenied("command is no longer on mcp.stdio_allowlist")

    rows = Rows(StoredServer("old", stdio(), 1.0, 1.0))
    service = McpService(McpSettings(), rows, admit=admit)
    try:
        await service.reload()
        (entry,) = service.describe()
        assert entry["name"] == "old"
        assert entry["enabled"] is False
        assert entry["refused"] == "command is no longer on mcp.stdio_allowlist"
        chosen = await service.tools_for(McpChoice(every_server=True))
        assert chosen.tools == []
    finally:
        await service.close()
