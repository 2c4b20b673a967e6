"""The shell tool's sandbox: bubblewrap (``bwrap``), as Flatpak runs its apps.

A command runs in new user, PID, mount, network, IPC, UTS and cgroup namespaces, as
``nobody``, with no capabilities, in a new session: it sees the system's programs and
libraries read-only (``/usr`` and its links, a few files of ``/etc``), its own ``/proc``
(none of the server's processes, so no ``/proc/$PPID/environ``), an empty ``/tmp``,
and the conversation's workspace, writable, at ``/workspace``. Nothing else is there:
no data directory, no database, no config file, no other conversation's workspace, no
home directory. Without ``network`` it has no network at all (not even loopback to the
server); with it, it shares the host's, with ``/etc/resolv.conf`` and certificates.
When bubblewrap's first process ends, the kernel ends every process in the namespace.

``make_sandbox()`` checks once that bubblewrap runs here (it needs user namespaces); the
shell refuses to start otherwise, unless the operator set
``tools.shell.unsafe_without_sandbox``.

What does not belong here: limits and output capture (``processes.py``), whether the
shell is on (``tools/builtins/workspace.py``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

INSIDE = "/workspace"
INSTALL_HINT = (
    "install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf "
    "install bubblewrap), or, to run commands with the server's own rights, set "
    "tools.shell.unsafe_without_sandbox: true"
)
_SYSTEM = ("/usr",)
_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
)
_ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates")
NOBODY = 65534


@dataclass(frozen=True, slots=True)
class Sandbox:
    program: str
    """The ``bwrap`` binary."""
    network: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def wrap(self, argv: list[str], workspace: Path) -> list[str]:
        """``argv`` run inside the sandbox, with ``workspace`` at /workspace."""
        command = [
            self.program,
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(NOBODY),
            "--gid",
            str(NOBODY),
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
        ]
        if self.network:
            command.append("--share-net")
        for folder in _SYSTEM:
            command += ["--ro-bind", folder, folder]
        for link in _LINKS:
            command += _link_or_bind(link)
        for path in (*_ETC, *(_ETC_NETWORK if self.network else ())):
            command += ["--ro-bind-try", path, path]
        command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        command += ["--bind", str(workspace), INSIDE, "--chdir", INSIDE, "--clearenv"]
        for name, value in {**self.env, "HOME": INSIDE}.items():
            command += ["--setenv", name, value]
        return [*command, "--", *argv]


def _link_or_bind(path: str) -> list[str]:
    """``/bin`` and the like: the same symlink inside (merged /usr), or bound as it is."""
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if os.path.isdir(path):
        return ["--ro-bind", path, path]
    return []


class SandboxUnavailable(Exception):
    """Bubblewrap is missing or cannot make a sandbox here; the message says what to do."""


_checked: dict[str, str | None] = {}


async def make_sandbox(program: str | None = None, *, network: bool = False) -> Sandbox:
    """A sandbox on ``program`` (default: ``bwrap`` on PATH), checked once per binary by
    running ``true`` inside it; raises ``SandboxUnavailable``."""
    found = program or shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
    if found not in _checked:
        _checked[found] = await _try(Sandbox(found), found)
    refusal = _checked[found]
    if refusal is not None:
        raise SandboxUnavailable(refusal)
    return Sandbox(found, network=network)


async def _try(sandbox: Sandbox, program: str) -> str | None:
    probe = Path(tempfile.gettempdir())
    try:
        process = await asyncio.create_subprocess_exec(
            *sandbox.wrap(["/bin/true"], probe),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, error = await asyncio.wait_for(process.communicate(), 10)
    except (OSError, TimeoutError) as exc:
        return f"bubblewrap ({program}) could not run: {exc}; {INSTALL_HINT}"
    if process.returncode != 0:
        reason = error.decode(errors="replace").strip()[:300] or f"exit {process.returncode}"
        return (
            f"bubblewrap ({program}) cannot make a sandbox here ({reason}): it needs user "
            f"namespaces (sysctl kernel.unprivileged_userns_clone=1); {INSTALL_HINT}"
        )
    return None
