"""One MCP server's configuration as the client takes it (``settings.py`` builds it from
the config file's and the admin API's ``McpServerSettings``).

What does not belong here: validating what users send (``settings.py``, ``api/mcp.py``),
using it (``client.py``, ``transports.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from parley.settings.mcp import McpServerSettings


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One MCP server as configured: a stdio command, or a streamable HTTP or SSE URL."""

    name: str
    transport: Literal["stdio", "http", "sse"] = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # values may be secrets
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    timeout_seconds: float = 30.0
    enabled: bool = True
    ping_interval_seconds: float = 60.0
    """Ping a session idle this long (0: never); one that does not answer is dropped."""
    reconnect_backoff_seconds: float = 0.5
    """The wait before reconnecting after two failed connects in a row; doubles with each
    further one."""
    max_reconnect_backoff_seconds: float = 30.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an MCP server needs a name")
        if not 1 <= self.timeout_seconds <= 300:
            raise ValueError("timeout_seconds must be between 1 and 300")
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.transport in ("http", "sse") and not self.url:
            raise ValueError(f"MCP server {self.name!r}: an {self.transport} server needs a url")
        if self.ping_interval_seconds < 0:
            raise ValueError("ping_interval_seconds must be 0 (off) or positive")
        if not 0 < self.reconnect_backoff_seconds <= self.max_reconnect_backoff_seconds:
            raise ValueError(
                "reconnect_backoff_seconds must be positive and at most "
                "max_reconnect_backoff_seconds"
            )


def server_config(name: str, settings: McpServerSettings) -> ServerConfig:
    """The client's view of the server ``settings`` configure under ``name``."""
    return ServerConfig(
        name=name,
        transport=settings.kind,
        command=settings.command,
        args=tuple(settings.args),
        env=dict(settings.env),
        cwd=settings.cwd,
        url=settings.url,
        headers=dict(settings.headers),
        bearer_token=settings.token(),
        timeout_seconds=settings.timeout,
        enabled=settings.enabled,
    )
