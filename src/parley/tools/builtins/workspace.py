"""The workspace tools: files in the conversation's own folder, and an optional shell there.

Every path a tool is given goes through ``workspace_path``, which checks containment on
the REAL path (symlinks resolved, ``..`` applied): escapes with ``..``, absolute paths
outside, sibling folders that share a prefix (``conv1`` vs ``conv10``), symlinks that
point out and NUL bytes are all refused. Files are then opened without following a
symlink at the last step, and only regular files are read or written.

``workspace_shell`` is registered only when ``tools.shell.enabled`` and refuses to run
otherwise. It runs ``/bin/sh -c`` inside bubblewrap (``parley/sandbox.py``), which sees
the workspace (at /workspace) and the system's programs, and nothing of the server: not
its files, processes, environment or, unless ``tools.shell.network``, any network. The
process group is killed whole on timeout and when the command ends; CPU, memory,
file-size and process limits apply; output is captured up to a cap. Without a working
bubblewrap the shell refuses, unless ``tools.shell.unsafe_without_sandbox``.

What does not belong here: where workspaces live (``settings.workspace_dir``), spilling
large tool outputs into them (``tools/output.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from parley.patterns import Budget, Pattern, PatternError, compile_pattern
from parley.processes import run_shell
from parley.sandbox import Sandbox, SandboxUnavailable, make_sandbox
from parley.tools.function import FunctionTool, function_tool
from parley.tools.protocol import ToolContext, ToolError, ToolOutput

MAX_FILE_BYTES = 10 * 1024 * 1024
"""The largest file workspace_write makes."""
MAX_LIST_ENTRIES = 1000
MAX_SEARCH_RESULTS = 500
SEARCH_SECONDS = 2.0
"""What the regular expressions of one turn's workspace searches may take, all searches
and lines together (``Reach.searches``; a search without a turn: its own)."""
MAX_SEARCH_FILE_BYTES = 20 * 1024 * 1024
"""Bigger files are skipped by workspace_search."""
MAX_MATCH_LINE_CHARS = 300

_CHUNK = 1 << 20
_BINARY_PROBE = 8192
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)


def workspace_path(workspace: Path, path: str) -> Path:
    """The real path of ``path`` inside ``workspace``; ToolError when it is outside.

    ``path`` is relative to the workspace (an absolute path must lie inside it). The
    check is made on the real path, after symlinks and ``..`` are resolved, and compares
    whole path components, so ``/ws/conv10`` is not inside ``/ws/conv1``.
    """
    if "\x00" in path:
        raise ToolError("The path contains a NUL character.")
    root = workspace.resolve()
    candidate = Path(path.strip() or ".")
    real = Path(os.path.realpath(candidate if candidate.is_absolute() else root / candidate))
    if real != root and not real.is_relative_to(root):
        raise ToolError(
            f"The path {path!r} is outside the workspace; paths are relative to the "
            "conversation's workspace folder."
        )
    return real


def _shown(root: Path, real: Path) -> str:
    return "." if real == root else real.relative_to(root).as_posix()


def _existing(context: ToolContext, path: str) -> tuple[Path, Path] | None:
    """(workspace root, real path) of something that exists; None for the root of a
    workspace not created yet; a ToolError for anything else that is missing."""
    root = context.workspace.resolve()
    real = workspace_path(context.workspace, path)
    if not real.exists():
        if real == root:
            return None
        raise _missing(path)
    return root, real


def _missing(path: str) -> ToolError:
    return ToolError(f"{path!r} does not exist in the workspace.")


@function_tool
def workspace_list(context: ToolContext, path: str = ".", recursive: bool = False) -> str:
    """List the files and folders in the conversation's workspace.

    Folders end with "/", files show their size in bytes.

    Args:
        path: The folder to list, relative to the workspace root.
        recursive: List everything below the folder too, not only its direct entries.
    """
    found = _existing(context, path)
    if found is None:
        return "The workspace is empty."
    root, real = found
    if not real.is_dir():
        return _entry_line(root, real, _shown(root, real))
    lines: list[str] = []
    more = False
    for entry in _walk(real) if recursive else _scan(real):
        if len(lines) == MAX_LIST_ENTRIES:
            more = True
            break
        lines.append(_entry_line(root, entry, _shown(root, entry)))
    if not lines:
        return f"{_shown(root, real)}/ is empty."
    count = len(lines)
    header = f"{_shown(root, real)}/: {count} entr{'y' if count == 1 else 'ies'}"
    if more:
        header = f"{_shown(root, real)}/: more than {count} entries (showing the first {count})"
    return "\n".join([header, *lines])


def _scan(folder: Path) -> Iterator[Path]:
    try:
        with os.scandir(folder) as entries:
            names = sorted(entry.name for entry in entries)
    except OSError:
        return
    for name in names:
        yield folder / name


def _walk(folder: Path) -> Iterator[Path]:
    """Everything below ``folder``, depth first in name order, not entering symlinks."""
    stack = [_scan(folder)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        yield entry
        if entry.is_dir() and not entry.is_symlink():
            stack.append(_scan(entry))


def _entry_line(root: Path, entry: Path, shown: str) -> str:
    try:
        info = entry.lstat()
    except OSError:
        return f"{shown} (unreadable)"
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.path.realpath(entry))
        inside = target == root or target.is_relative_to(root)
        where = _shown(root, target) if inside else "(outside the workspace)"
        return f"{shown} -> {where}"
    if stat.S_ISDIR(info.st_mode):
        return f"{shown}/"
    return f"{shown} ({info.st_size} bytes)"


@function_tool
def workspace_read(context: ToolContext, path: str, offset: int = 0, limit: int = 20_000) -> str:
    """Read a text file from the workspace, a page at a time.

    Returns up to `limit` characters starting at character `offset`, and says how many
    characters remain: call again with the offset it gives to read on. Use it to read
    saved tool outputs such as tool_outputs/<id>.txt.

    Args:
        path: The file, relative to the workspace root.
        offset: The first character to return (0 is the start of the file).
        limit: The most characters to return.
    """
    if offset < 0 or limit < 1:
        raise ToolError("offset must be 0 or more and limit at least 1.")
    root = context.workspace.resolve()
    real = workspace_path(context.workspace, path)
    shown = _shown(root, real)
    tools = context.settings
    limit = max(1, min(limit, tools.max_output_chars - 500))
    budget = tools.spill_bytes - 512  # a page never spills into another file
    with _open_regular(real, path) as file:
        if b"\x00" in os.pread(file.fileno(), _BINARY_PROBE, 0):
            size = os.fstat(file.fileno()).st_size
            raise ToolError(f"{shown} is a binary file ({size} bytes); it cannot be read as text.")
        with _text(file) as text:
            skipped = _skip(text, offset)
            page = text.read(limit) if skipped == offset else ""
            rest = _count(text)
    total = skipped + len(page) + rest
    if total == 0:
        return f"{shown} is empty."
    if offset >= total:
        return f"{shown} has {total} characters; offset {offset} is past the end."
    encoded = page.encode("utf-8")
    if len(encoded) > budget:
        cut = encoded[:budget].decode("utf-8", errors="ignore")
        rest += len(page) - len(cut)
        page = cut
    end = offset + len(page)
    if rest:
        header = (
            f"[{shown}: characters {offset}-{end} of {total}; {rest} more: call "
            f"workspace_read with offset={end} to continue]"
        )
        return f"{header}\n{page}\n[{rest} more characters: continue with offset={end}]"
    return f"[{shown}: characters {offset}-{end} of {total}; end of file]\n{page}"


def _open_regular(real: Path, path: str) -> io.FileIO:
    try:
        descriptor = os.open(real, _READ_FLAGS)
    except FileNotFoundError:
        raise _missing(path) from None
    except IsADirectoryError:
        raise ToolError(f"{path!r} is a folder; use workspace_list.") from None
    except OSError as exc:
        raise ToolError(f"Cannot open {path!r}: {exc.strerror}") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise ToolError(f"{path!r} is a folder; use workspace_list.")
        raise ToolError(f"{path!r} is not a regular file.")
    return os.fdopen(descriptor, "rb", buffering=0)


def _text(file: io.FileIO) -> TextIO:
    """The file as UTF-8 text (line endings kept, so offsets are stable)."""
    return open(file.fileno(), encoding="utf-8", errors="replace", newline="", closefd=False)


def _skip(text: TextIO, count: int) -> int:
    skipped = 0
    while skipped < count:
        chunk = text.read(min(_CHUNK, count - skipped))
        if not chunk:
            break
        skipped += len(chunk)
    return skipped


def _count(text: TextIO) -> int:
    total = 0
    while chunk := text.read(_CHUNK):
        total += len(chunk)
    return total


@function_tool
def workspace_write(context: ToolContext, path: str, content: str, append: bool = False) -> str:
    """Write a text file in the workspace, creating folders as needed.

    Replaces the file unless `append` is true. Files are limited to 10 MiB.

    Args:
        path: The file, relative to the workspace root.
        content: The text to write (UTF-8).
        append: Add to the end of the file instead of replacing it.
    """
    context.workspace.mkdir(parents=True, exist_ok=True)
    root = context.workspace.resolve()
    real = workspace_path(context.workspace, path)
    shown = _shown(root, real)
    if real == root or real.is_dir():
        raise ToolError(f"{path!r} is a folder; give a file path.")
    data = content.encode("utf-8")
    existing = real.lstat() if real.exists() else None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise ToolError(f"{shown} is not a regular file.")
    size = (existing.st_size if existing is not None and append else 0) + len(data)
    if size > MAX_FILE_BYTES:
        raise ToolError(f"{shown} would be {size} bytes; files are limited to {MAX_FILE_BYTES}.")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        folder = workspace_path(context.workspace, str(real.parent))  # checked again, made
        if append:
            size = _append(folder / real.name, data, shown)
            return f"Appended {len(data)} bytes to {shown} (now {size} bytes)."
        mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o644
        _replace(folder / real.name, data, mode)
    except OSError as exc:
        raise ToolError(f"Cannot write {shown}: {exc.strerror or exc}") from None
    return f"Wrote {len(data)} bytes to {shown}."


def _append(target: Path, data: bytes, shown: str) -> int:
    """Append to a regular file (never through a symlink); returns the new size."""
    descriptor = os.open(target, _APPEND_FLAGS, 0o644)
    with os.fdopen(descriptor, "ab") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ToolError(f"{shown} is not a regular file.")
        file.write(data)
        file.flush()
        return os.fstat(descriptor).st_size


def _replace(target: Path, data: bytes, mode: int) -> None:
    """Write a new file and rename it over ``target``: a planted symlink is replaced."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".write-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@function_tool
def workspace_search(
    context: ToolContext, query: str, path: str = ".", regex: bool = False, max_results: int = 50
) -> str:
    """Search the text files in the workspace for lines that match.

    Plain queries match case-insensitively; with `regex` the query is a Python regular
    expression (add (?i) to ignore case). Results are "path:line: text".

    Args:
        query: The text (or regular expression) to look for.
        path: The folder (or file) to search, relative to the workspace root.
        regex: Treat the query as a regular expression.
        max_results: The most matching lines to return (at most 500).
    """
    if not query:
        raise ToolError("The query is empty.")
    compiled = _compiled(query) if regex else None
    limit = max(1, min(max_results, MAX_SEARCH_RESULTS))
    found = _existing(context, path)
    if found is None:
        return "No matches: the workspace is empty."
    root, real = found
    files = [real] if real.is_file() else [p for p in _walk(real) if not p.is_dir()]
    results: list[str] = []
    more = ""
    searches = context.reach.searches
    budget = searches if searches is not None else Budget(SEARCH_SECONDS)
    try:
        # a regular expression spends what the turn's searches have left
        with budget.spend() if compiled else contextlib.nullcontext(0.0) as seconds:
            matches = _matcher(query, compiled, seconds)
            for file in files:
                remaining = limit - len(results)
                if remaining <= 0:
                    break
                results += _search_file(root, file, matches, remaining)
    except TimeoutError:
        more = (
            f" (the search ran out of time: this turn's searches have {SEARCH_SECONDS:g} s"
            " in all; narrow it)"
        )
    if not results:
        return f"No matches for {query!r} in {_shown(root, real)}{more}."
    if len(results) >= limit:
        more = " (limit reached; narrow the search for more)"
    return "\n".join([f"{len(results)} matching lines{more}:", *results])


def _compiled(query: str) -> Pattern:
    try:
        return compile_pattern(query)
    except PatternError as exc:
        raise ToolError(f"Invalid regular expression: {exc}") from None


def _matcher(query: str, compiled: Pattern | None, seconds: float) -> Callable[[str], bool]:
    """Whether a line matches: a substring ignoring case, or the regular expression
    ``compiled``, all lines within ``seconds`` (matching releases the GIL: the server's
    event loop runs on while this tool's thread searches)."""
    if compiled is None:
        pattern = re.compile(re.escape(query), re.IGNORECASE)  # linear: no pattern syntax
        return lambda line: pattern.search(line) is not None
    ends = time.monotonic() + seconds

    def matches(line: str) -> bool:
        left = ends - time.monotonic()
        if left <= 0:
            raise TimeoutError("the search's time is up")
        return compiled.search(line, timeout=left, concurrent=True) is not None

    return matches


def _search_file(root: Path, file: Path, matches: Callable[[str], bool], limit: int) -> list[str]:
    real = Path(os.path.realpath(file))
    if real != root and not real.is_relative_to(root):
        return []  # a symlink pointing out of the workspace
    try:
        handle = _open_regular(real, str(file))
    except ToolError:
        return []
    found: list[str] = []
    with handle:
        info = os.fstat(handle.fileno())
        if info.st_size > MAX_SEARCH_FILE_BYTES or b"\x00" in os.pread(
            handle.fileno(), _BINARY_PROBE, 0
        ):
            return []
        with _text(handle) as text:
            for number, raw in enumerate(text, start=1):
                line = raw.rstrip("\r\n")
                if matches(line[:10_000]):
                    found.append(f"{_shown(root, file)}:{number}: {line[:MAX_MATCH_LINE_CHARS]}")
                    if len(found) >= limit:
                        break
    return found


WORKSPACE_TOOLS: list[FunctionTool] = [
    workspace_list,
    workspace_read,
    workspace_write,
    workspace_search,
]


@function_tool
async def workspace_shell(
    context: ToolContext, command: str, timeout_seconds: float | None = None
) -> ToolOutput:
    """Run a shell command (/bin/sh -c) in the conversation's workspace folder.

    The command gets a minimal environment, limited CPU time, memory and output, and is
    killed with everything it started when it times out; background processes do not
    outlive it. Standard output and error are returned together, with the exit code.

    Args:
        command: The shell command line to run.
        timeout_seconds: Stop the command after this many seconds (at most the server's
            limit, which is also the default).
    """
    shell = context.settings.shell
    if not shell.enabled:
        raise ToolError("workspace_shell is disabled on this server (tools.shell.enabled).")
    if not command.strip() or "\x00" in command:
        raise ToolError("The command is empty or contains a NUL character.")
    timeout = shell.timeout_seconds
    if timeout_seconds is not None:
        if timeout_seconds <= 0:
            raise ToolError("timeout_seconds must be more than 0.")
        timeout = min(timeout_seconds, timeout)
    sandbox: Sandbox | None = None
    if not shell.unsafe_without_sandbox:
        try:
            sandbox = await make_sandbox(shell.bubblewrap, network=shell.network)
        except SandboxUnavailable as exc:
            raise ToolError(f"workspace_shell cannot run without its sandbox: {exc}") from None
    context.workspace.mkdir(parents=True, exist_ok=True)
    result = await run_shell(
        command,
        cwd=context.workspace.resolve(),
        timeout_seconds=timeout,
        max_output_chars=shell.max_output_chars,
        max_memory_mb=shell.max_memory_mb,
        sandbox=sandbox,
    )
    return ToolOutput(result.describe(), is_error=result.failed)
