"""The workspace tools: each tool, paging, every escape, and the shell's limits."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from parley import processes
from parley.patterns import Budget
from parley.tools.builtins import workspace as workspace_module
from parley.tools.builtins.workspace import (
    WORKSPACE_TOOLS,
    workspace_list,
    workspace_path,
    workspace_read,
    workspace_search,
    workspace_shell,
    workspace_write,
)
from parley.tools.function import FunctionTool
from parley.tools.output import spill_output
from parley.tools.protocol import Reach, ToolContext, ToolError, ToolOutput
from tests.tools.contexts import tool_context

pytestmark = pytest.mark.anyio

SECRET = "TOP-SECRET-CONTENT"


def make_context(tmp_path: Path, **shell: Any) -> ToolContext:
    return tool_context(
        tmp_path, tools={"shell": {"enabled": True, "timeout_seconds": 10, **shell}}
    )


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    return make_context(tmp_path)


async def call(tool: FunctionTool, context: ToolContext, **arguments: Any) -> ToolOutput:
    return await tool.run(arguments, context)


async def ok(tool: FunctionTool, context: ToolContext, **arguments: Any) -> str:
    output = await call(tool, context, **arguments)
    assert not output.is_error, output.content
    return output.content


# ---------------------------------------------------------------- the file tools


async def test_write_read_list_search(context: ToolContext) -> None:
    assert await ok(workspace_list, context) == "The workspace is empty."
    assert not context.workspace.exists()  # nothing is created by reading
    assert await ok(workspace_write, context, path="notes/todo.txt", content="buy milk\n") == (
        "Wrote 9 bytes to notes/todo.txt."
    )
    appended = await ok(
        workspace_write, context, path="notes/todo.txt", content="Call Bob\n", append=True
    )
    assert appended == "Appended 9 bytes to notes/todo.txt (now 18 bytes)."
    await ok(workspace_write, context, path="readme.md", content="# Readme\nmilk is white\n")
    read = await ok(workspace_read, context, path="notes/todo.txt")
    assert read.endswith("\nbuy milk\nCall Bob\n")
    assert "end of file" in read.splitlines()[0]

    assert await ok(workspace_list, context) == "./: 2 entries\nnotes/\nreadme.md (23 bytes)"
    listing = await ok(workspace_list, context, recursive=True)
    assert listing.splitlines()[1:] == [
        "notes/",
        "notes/todo.txt (18 bytes)",
        "readme.md (23 bytes)",
    ]
    assert await ok(workspace_list, context, path="notes") == (
        "notes/: 1 entry\nnotes/todo.txt (18 bytes)"
    )

    found = await ok(workspace_search, context, query="MILK")
    assert found.splitlines() == [
        "2 matching lines:",
        "notes/todo.txt:1: buy milk",
        "readme.md:2: milk is white",
    ]
    regex = await ok(workspace_search, context, query=r"^[A-Z]\w+ Bob$", regex=True)
    assert regex.splitlines()[1:] == ["notes/todo.txt:2: Call Bob"]
    assert (await ok(workspace_search, context, query="milk", path="readme.md")).count(":") == 3
    limited = await ok(workspace_search, context, query="i", max_results=1)
    assert "limit reached" in limited
    assert "No matches" in await ok(workspace_search, context, query="nothing-like-this")
    bad = await call(workspace_search, context, query="(", regex=True)
    assert bad.is_error
    assert "Invalid regular expression" in bad.content


async def test_the_searches_of_a_turn_share_one_budget(context: ToolContext) -> None:
    """Each search had 2 s: a model calling it 50 times in one step held the thread pool
    for 100 s of searching. A turn's searches now share that time."""
    await ok(workspace_write, context, path="a.txt", content="\n".join(["a" * 40 + "!"] * 50))
    turn = replace(context, reach=Reach(searches=Budget(0.2)))
    started = time.monotonic()
    first = await ok(workspace_search, turn, query="(a|aa)+$", regex=True)
    second = await ok(workspace_search, turn, query="(a|aa)+$", regex=True)
    assert time.monotonic() - started < 1.5
    assert "ran out" in first
    assert "ran out" in second
    assert turn.reach.searches is not None
    assert turn.reach.searches.left == 0
    # plain text needs no time budget, and finds what there is
    assert "50 matching lines" in await ok(workspace_search, turn, query="aaa!")


async def test_write_replaces_and_caps_size(
    context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ok(workspace_write, context, path="a.txt", content="first version")
    await ok(workspace_write, context, path="a.txt", content="second")
    assert (context.workspace / "a.txt").read_text() == "second"
    monkeypatch.setattr(workspace_module, "MAX_FILE_BYTES", 10)
    too_big = await call(workspace_write, context, path="a.txt", content="x" * 11)
    assert too_big.is_error
    assert "limited to 10" in too_big.content
    grows = await call(workspace_write, context, path="a.txt", content="12345", append=True)
    assert grows.is_error  # 6 + 5 > 10
    assert (context.workspace / "a.txt").read_text() == "second"
    folder = await call(workspace_write, context, path=".", content="x")
    assert folder.is_error


async def test_reading_errors(context: ToolContext) -> None:
    context.workspace.mkdir(parents=True)
    (context.workspace / "image.bin").write_bytes(b"\x89PNG\x00\x00binary")
    (context.workspace / "folder").mkdir()
    os.mkfifo(context.workspace / "pipe")
    assert "does not exist" in (await call(workspace_read, context, path="nope.txt")).content
    assert "binary file" in (await call(workspace_read, context, path="image.bin")).content
    assert "folder" in (await call(workspace_read, context, path="folder")).content
    assert "not a regular file" in (await call(workspace_read, context, path="pipe")).content
    assert (await call(workspace_read, context, path="image.bin", offset=-1)).is_error


async def test_paging_through_a_big_file(context: ToolContext) -> None:
    text = "".join(f"line {n:05d} {'é' if n % 7 else 'x'}\r\n" for n in range(5000))
    await ok(workspace_write, context, path="big.txt", content=text)
    pages: list[str] = []
    offset = 0
    while True:
        output = await ok(workspace_read, context, path="big.txt", offset=offset)
        header, _, rest = output.partition("\n")
        match = re.match(r"\[big\.txt: characters (\d+)-(\d+) of (\d+); (.*)\]", header)
        assert match is not None, header
        start, end, total = (int(match.group(n)) for n in (1, 2, 3))
        assert (start, total) == (offset, len(text))
        if "end of file" in match.group(4):
            pages.append(rest)
            break
        assert f"offset={end}" in match.group(4)
        page, _, footer = rest.rpartition("\n")
        assert footer == f"[{total - end} more characters: continue with offset={end}]"
        pages.append(page)
        offset = end
    assert len(pages) > 3
    assert "".join(pages) == text
    past = await ok(workspace_read, context, path="big.txt", offset=len(text) + 5)
    assert "past the end" in past


async def test_pages_stay_under_the_spill_size(context: ToolContext) -> None:
    wide = "漢字" * 20_000  # 3 bytes a character: 20,000 characters would spill
    await ok(workspace_write, context, path="wide.txt", content=wide)
    first = await ok(workspace_read, context, path="wide.txt")
    assert len(first.encode()) <= context.settings.spill_bytes
    end = int(re.search(r"characters 0-(\d+)", first).group(1))  # type: ignore[union-attr]
    assert 5_000 < end < 20_000
    assert first.split("\n")[1] == wide[:end]


async def test_reading_a_spilled_tool_output(context: ToolContext) -> None:
    full = "".join(f"result row {n}\n" for n in range(4000))
    preview = spill_output(full, call_id="call_9", workspace=context.workspace)
    assert preview is not None
    assert "tool_outputs/call_9.txt" in preview
    pages: list[str] = []
    offset = 0
    while offset < len(full):
        output = await ok(workspace_read, context, path="tool_outputs/call_9.txt", offset=offset)
        header, _, body = output.partition("\n")
        end = int(re.search(r"-(\d+) of", header).group(1))  # type: ignore[union-attr]
        pages.append(body if "end of file" in header else body.rpartition("\n")[0])
        offset = end
    assert "".join(pages) == full


def test_every_tool_is_exported() -> None:
    names = [tool.spec.name for tool in WORKSPACE_TOOLS]
    assert names == ["workspace_list", "workspace_read", "workspace_write", "workspace_search"]
    assert workspace_shell.spec.name == "workspace_shell"
    for tool in [*WORKSPACE_TOOLS, workspace_shell]:
        assert tool.spec.description
        assert all(p.get("description") for p in tool.spec.parameters["properties"].values())


# ---------------------------------------------------------------- escapes


@pytest.fixture
def escapes(tmp_path: Path, context: ToolContext) -> list[str]:
    """A workspace with ways out of it, and the outside files they lead to."""
    root = context.workspace
    root.mkdir(parents=True)
    (root / "inside.txt").write_text("fine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (tmp_path / "secret.txt").write_text(SECRET)
    sibling = tmp_path / "ws" / "conv_10"  # shares the prefix "conv_1"
    sibling.mkdir()
    (sibling / "secret.txt").write_text(SECRET)
    (root / "dir_link").symlink_to(outside)
    (root / "file_link").symlink_to(outside / "secret.txt")
    (root / "dangling_link").symlink_to(outside / "not-yet.txt")
    (root / "sub").mkdir()
    (root / "sub" / "up_link").symlink_to("../../conv_10")
    return [
        "../outside/secret.txt",
        "../../secret.txt",
        "sub/../../conv_10/secret.txt",
        "../conv_10/secret.txt",
        str(sibling / "secret.txt"),
        str(tmp_path / "secret.txt"),
        "/etc/passwd",
        "dir_link/secret.txt",
        "dir_link",
        "file_link",
        "dangling_link",
        "sub/up_link/secret.txt",
        "inside.txt\x00../secret.txt",
    ]


async def test_every_escape_is_refused(
    tmp_path: Path, context: ToolContext, escapes: list[str]
) -> None:
    for path in escapes:
        for tool, arguments in (
            (workspace_read, {"path": path}),
            (workspace_list, {"path": path}),
            (workspace_search, {"query": "SECRET", "path": path}),
            (workspace_write, {"path": path, "content": "pwned"}),
            (workspace_write, {"path": path, "content": "pwned", "append": True}),
        ):
            output = await call(tool, context, **arguments)
            assert output.is_error, (tool.spec.name, path, output.content)
            assert "outside the workspace" in output.content or "NUL" in output.content
            assert SECRET not in output.content
    for secret in (tmp_path / "secret.txt", tmp_path / "ws" / "conv_10" / "secret.txt"):
        assert secret.read_text() == SECRET
    assert (tmp_path / "outside" / "secret.txt").read_text() == SECRET
    assert not (tmp_path / "outside" / "not-yet.txt").exists()


async def test_searching_the_workspace_skips_links_out(
    context: ToolContext, escapes: list[str]
) -> None:
    found = await ok(workspace_search, context, query="SECRET")
    assert found.startswith("No matches")
    listing = await ok(workspace_list, context, recursive=True)
    assert "dir_link -> (outside the workspace)" in listing
    assert SECRET not in listing


def test_containment_is_checked_on_whole_components(tmp_path: Path) -> None:
    root = tmp_path / "ws" / "conv1"
    root.mkdir(parents=True)
    (tmp_path / "ws" / "conv10").mkdir()
    with pytest.raises(ToolError):
        workspace_path(root, str(tmp_path / "ws" / "conv10" / "x"))
    with pytest.raises(ToolError):
        workspace_path(root, "../conv10/x")
    assert workspace_path(root, str(root / "a" / "b")) == root.resolve() / "a" / "b"
    assert workspace_path(root, "a/../b") == root.resolve() / "b"
    assert workspace_path(root, "") == root.resolve()


async def test_a_link_planted_at_the_target_is_replaced_not_followed(
    tmp_path: Path, context: ToolContext
) -> None:
    context.workspace.mkdir(parents=True)
    (context.workspace / "inner.txt").write_text("inner")
    (context.workspace / "alias.txt").symlink_to("inner.txt")  # a link that stays inside
    await ok(workspace_write, context, path="alias.txt", content="through the link")
    assert (context.workspace / "inner.txt").read_text() == "through the link"


# ---------------------------------------------------------------- the shell
# Each shell test runs twice: in bubblewrap (the default; tests/tools/test_shell_sandbox.py
# tries its escapes) and without it (tools.shell.unsafe_without_sandbox).

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")


@pytest.fixture(params=[pytest.param("sandbox", marks=needs_bwrap), "unsafe"])
def shell_context(request: pytest.FixtureRequest, tmp_path: Path) -> ToolContext:
    return make_context(tmp_path, unsafe_without_sandbox=request.param == "unsafe")


def _seen_path(context: ToolContext) -> str:
    """Where the command sees its workspace: /workspace in the sandbox."""
    unsafe = context.settings.shell.unsafe_without_sandbox
    return str(context.workspace.resolve()) if unsafe else "/workspace"


def running(marker: str) -> list[int]:
    """Live processes (seen from here, in or out of a sandbox) whose command line holds
    ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_none_running(marker: str, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _sleep(seconds: int = 60) -> str:
    """A sleep with a duration no other process has: its command line is its marker."""
    return f"{seconds}.{secrets.randbelow(10**9):09d}"


async def test_shell_runs_in_the_workspace(shell_context: ToolContext) -> None:
    output = await ok(workspace_shell, shell_context, command="pwd; echo made > made.txt; ls")
    assert output.splitlines()[0].startswith("[exit code 0 (")
    assert output.splitlines()[1] == _seen_path(shell_context)
    assert "made.txt" in output
    assert (await ok(workspace_read, shell_context, path="made.txt")).endswith("made\n")


async def test_shell_environment_has_no_secrets(
    shell_context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_SECRET", "parley-secret-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    assert os.environ["PARLEY_TEST_SECRET"] == "parley-secret-value"
    output = await ok(
        workspace_shell, shell_context, command="env; cat /proc/self/environ | tr '\\0' '\\n'"
    )
    assert f"HOME={_seen_path(shell_context)}" in output
    assert "PATH=" in output
    for leaked in ("secret-value", "PARLEY_TEST_SECRET", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        assert leaked not in output


async def test_shell_reports_failures(shell_context: ToolContext) -> None:
    failed = await call(workspace_shell, shell_context, command="echo oops >&2; exit 3")
    assert failed.is_error
    assert failed.content.startswith("[exit code 3 (")
    assert "oops" in failed.content
    killed = await call(workspace_shell, shell_context, command="kill -9 $$")
    assert killed.is_error
    assert "killed by signal SIGKILL" in killed.content


async def test_shell_timeout_kills_the_whole_process_group(shell_context: ToolContext) -> None:
    child, main = _sleep(), _sleep()
    started = time.monotonic()
    output = await call(
        workspace_shell,
        shell_context,
        command=f"sleep {child} & sleep {main}",
        timeout_seconds=1,
    )
    assert time.monotonic() - started < 8
    assert output.is_error
    assert "timed out" in output.content
    assert wait_none_running(child), f"sleep {child} still running"
    assert wait_none_running(main)


async def test_shell_leaves_no_background_processes(shell_context: ToolContext) -> None:
    background = _sleep()
    started = time.monotonic()
    output = await ok(workspace_shell, shell_context, command=f"sleep {background} & echo started")
    assert time.monotonic() - started < 8
    assert "started" in output
    assert wait_none_running(background), f"sleep {background} outlived its command"


async def test_shell_timeout_is_capped_by_the_settings(tmp_path: Path) -> None:
    context = make_context(tmp_path, timeout_seconds=1)
    started = time.monotonic()
    output = await call(workspace_shell, context, command="sleep 30", timeout_seconds=100)
    assert output.is_error
    assert "timed out" in output.content
    assert time.monotonic() - started < 8


async def test_shell_output_is_capped(tmp_path: Path) -> None:
    context = make_context(tmp_path, max_output_chars=2000)
    output = await ok(
        workspace_shell,
        context,
        command="echo FIRST; head -c 3000000 /dev/zero | tr '\\0' 'a'; echo; echo LAST",
    )
    body = output.split("\n", 1)[1]
    assert len(body) <= 2000
    assert body.startswith("FIRST")
    assert body.rstrip().endswith("LAST")
    assert "bytes of output omitted" in body
    endless = await call(workspace_shell, context, command="yes", timeout_seconds=1)
    assert endless.is_error
    assert "timed out" in endless.content
    assert len(endless.content) < 2200


async def test_shell_resource_limits(tmp_path: Path) -> None:
    context = make_context(tmp_path, max_memory_mb=256, timeout_seconds=5)
    output = await ok(workspace_shell, context, command="ulimit -v; ulimit -t; ulimit -c")
    assert output.splitlines()[1:] == [str(256 * 1024), "6", "0"]
    too_big = await call(
        workspace_shell,
        context,
        command="head -c 200000000 /dev/zero > big.bin",
    )
    assert too_big.is_error  # RLIMIT_FSIZE stops the write
    assert (context.workspace / "big.bin").stat().st_size <= processes.SHELL_MAX_FILE_BYTES


async def test_shell_refuses_when_disabled(tmp_path: Path) -> None:
    context = make_context(tmp_path, enabled=False)
    output = await call(workspace_shell, context, command="touch ran.txt")
    assert output.is_error
    assert "disabled" in output.content
    assert not (context.workspace / "ran.txt").exists()
    blank = await call(workspace_shell, make_context(tmp_path), command="  ")
    assert blank.is_error


async def test_writing_below_a_file_fails_clearly(context: ToolContext) -> None:
    await ok(workspace_write, context, path="plain.txt", content="x")
    output = await call(workspace_write, context, path="plain.txt/inner.txt", content="y")
    assert output.is_error
    assert output.content.startswith("Cannot write plain.txt/inner.txt")


async def _cancel_when_running(task: asyncio.Future[Any], marker: str) -> None:
    deadline = time.monotonic() + 10
    while not running(marker):
        assert time.monotonic() < deadline, f"sleep {marker} never started"
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelling_the_shell_kills_its_process_group(shell_context: ToolContext) -> None:
    child = _sleep()
    task = asyncio.ensure_future(
        call(workspace_shell, shell_context, command=f"sleep {child} & sleep 60")
    )
    await _cancel_when_running(task, child)
    assert wait_none_running(child), running(child)


async def test_cancelling_while_the_shell_is_being_set_up_kills_its_group(
    shell_context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded event loop can deliver the cancellation while the process is started but
    ``create_subprocess_exec`` has not returned: its children must die too."""
    await ok(workspace_shell, shell_context, command="true")  # the sandbox checked first
    real = asyncio.create_subprocess_exec

    async def slow_setup(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await real(*args, **kwargs)
        await asyncio.sleep(3)  # the shell runs meanwhile
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_setup)
    child = _sleep()
    task = asyncio.ensure_future(
        call(workspace_shell, shell_context, command=f"sleep {child} & sleep 60")
    )
    await _cancel_when_running(task, child)
    assert wait_none_running(child), running(child)
