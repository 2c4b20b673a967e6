"""The shell tool's sandbox, tried as a hostile model would (issue 17, item 3).

Without it, a command read the upstream key from ``/proc/$PPID/environ``, the MCP token
from the config file and other owners' messages from the SQLite file, and reached the
server on loopback past the web-fetch guard. Each escape is tried here from inside
bubblewrap (and, where it makes the point, without it: what the unsafe switch gives).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.tools.builtins.workspace import workspace_shell
from parley.tools.protocol import ToolContext, ToolOutput
from tests.tools.contexts import tool_context

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
SECRET = "sk-upstream-secret-in-the-servers-environment"


def _context(root: Path, **shell: Any) -> ToolContext:
    context = tool_context(root, tools={"shell": {"enabled": True, "timeout_seconds": 10, **shell}})
    context.workspace.mkdir(parents=True, exist_ok=True)
    return context


async def _run(context: ToolContext, command: str) -> ToolOutput:
    return await workspace_shell.run({"command": command}, context)


@pytest.fixture
def server_files(tmp_path: Path) -> dict[str, Path]:
    """What a Parley data directory holds beside the workspaces, with secrets in it."""
    data = tmp_path / "data"
    data.mkdir()
    files = {
        "config": data / "parley.yaml",
        "database": data / "parley.db",
        "other_workspace": tmp_path / "ws" / "conv_other" / "notes.txt",
    }
    files["config"].write_text(f"mcp:\n  servers:\n    gh: {{bearer_token: {SECRET}}}\n")
    files["database"].write_text(f"bob's message: {SECRET}")
    files["other_workspace"].parent.mkdir(parents=True)
    files["other_workspace"].write_text(SECRET)
    return files


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on loopback, as Parley's own port is: it answers 'reached'."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.sendall(b"reached\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join(timeout=5)
    server.close()


def _on_disk(path: str) -> bool:
    return os.path.exists(path)


def _connect(port: int) -> str:
    return (
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', "
        f'{port}), timeout=3); print(s.recv(16).decode().strip())" 2>&1 | tail -n 1'
    )


async def test_the_servers_environment_and_processes_are_out_of_sight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    context = _context(tmp_path)
    output = await _run(
        context,
        f"cat /proc/$PPID/environ /proc/1/environ /proc/{os.getpid()}/environ 2>&1; "
        "ls /proc | grep -c '^[0-9]'; id -u",
    )

    assert SECRET not in output.content
    lines = output.content.splitlines()
    assert lines[-1] == "65534"  # nobody
    assert int(lines[-2]) < 10  # the sandbox's own few processes, not the machine's


async def test_the_data_directory_and_other_workspaces_are_not_there(
    tmp_path: Path, server_files: dict[str, Path]
) -> None:
    context = _context(tmp_path)
    paths = " ".join(str(p) for p in server_files.values())
    tried = await _run(context, f"cat {paths} ../conv_other/notes.txt 2>&1; true")
    listed = await _run(context, "ls / /workspace/..")

    assert SECRET not in tried.content
    assert tried.content.count("No such file") == len(server_files) + 1
    names = set(listed.content.split("\n", 1)[1].split()) - {"/:", "/workspace/..:"}
    expected = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin"}
    assert names <= expected | {"tmp", "usr", "workspace"}, names
    assert not names & {"root", "home", "var", "data", "ws"}


async def test_only_the_workspace_is_writable(tmp_path: Path) -> None:
    context = _context(tmp_path)
    output = await _run(
        context, "echo kept > /workspace/kept.txt; touch /usr/evil 2>&1; touch /evil 2>&1; true"
    )

    assert (context.workspace / "kept.txt").read_text() == "kept\n"
    assert output.content.count("Read-only file system") >= 1
    assert not _on_disk("/usr/evil")


async def test_no_network_unless_the_operator_allows_it(tmp_path: Path, listener: int) -> None:
    closed = await _run(_context(tmp_path), _connect(listener))
    assert "reached" not in closed.content
    assert "Error" in closed.content or "refused" in closed.content.lower()

    opened = await _run(_context(tmp_path, network=True), _connect(listener))
    assert "reached" in opened.content


async def test_without_bubblewrap_the_shell_refuses_and_says_what_to_install(
    tmp_path: Path,
) -> None:
    context = _context(tmp_path, bubblewrap=str(tmp_path / "no-such-bwrap"))
    output = await _run(context, "echo ran > ran.txt")

    assert output.is_error
    assert "apt-get install bubblewrap" in output.content
    assert "unsafe_without_sandbox" in output.content
    assert not (context.workspace / "ran.txt").exists()


async def test_the_unsafe_switch_gives_commands_the_servers_rights(
    tmp_path: Path, server_files: dict[str, Path], listener: int
) -> None:
    """What tools.shell.unsafe_without_sandbox means, shown: the escapes above succeed."""
    context = _context(tmp_path, unsafe_without_sandbox=True)
    output = await _run(context, f"cat {server_files['config']}; {_connect(listener)}")

    assert SECRET in output.content
    assert "reached" in output.content
