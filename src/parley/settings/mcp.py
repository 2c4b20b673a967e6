"""The ``mcp`` section of the settings (``settings.py`` includes it), and turning one
server's settings into the client's ``ServerConfig``. ``examples/parley.yaml`` documents
every key.

Servers defined here are trusted: they are the operator's. Servers added over the admin
API (``api/mcp.py``) are checked by the same ``McpServerSettings`` model, and a stdio one
must name a command on ``stdio_allowlist``.

What does not belong here: the YAML file and the ``PARLEY_*`` variables (``settings.py``);
the one variable read here is a server's ``bearer_token_env``, as providers do with
``api_key_env``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

SERVER_NAME = re.compile(r"^(?!.*__)(?!.*_$)[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
"""Letters, digits, ``-`` and single ``_``, at most 32, not ending in ``_``: a server's name
is the middle of ``mcp__{server}__{tool}``, so it may not hold ``__`` or end in ``_``."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class McpServerSettings(_Section):
    """One MCP server: a stdio ``command`` or a ``url`` (streamable HTTP, or SSE)."""

    transport: Literal["stdio", "http", "sse"] | None = Field(
        default=None, description="Default: stdio with a command, http with a url."
    )
    command: str | None = Field(default=None, max_length=1000)
    args: list[str] = Field(default_factory=list, max_length=200)
    env: dict[str, str] = Field(
        default_factory=dict,
        description="The stdio process's environment beside PATH, HOME, LANG, LOGNAME, SHELL, "
        "TERM and USER (Parley's own variables are never passed on).",
    )
    cwd: str | None = Field(default=None, max_length=1000)
    url: str | None = Field(default=None, max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token: SecretStr | None = None
    bearer_token_env: str | None = Field(
        default=None, description="Read the bearer token from this environment variable."
    )
    timeout: float = Field(
        default=30.0, ge=1, le=300, description="Seconds for connecting, listing and each call."
    )
    enabled: bool = True

    @model_validator(mode="after")
    def _one_kind(self) -> McpServerSettings:
        transport = self.kind
        if transport == "stdio":
            if not self.command:
                raise ValueError("a stdio server needs a command")
            if self.url:
                raise ValueError("give a command (stdio) or a url (http, sse), not both")
        else:
            if not self.url:
                raise ValueError(f"an {transport} server needs a url")
            if self.command:
                raise ValueError("give a command (stdio) or a url (http, sse), not both")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError("the url must start with http:// or https://")
        return self

    @property
    def kind(self) -> Literal["stdio", "http", "sse"]:
        if self.transport is not None:
            return self.transport
        return "http" if self.url and not self.command else "stdio"

    def token(self) -> str | None:
        if self.bearer_token is not None:
            return self.bearer_token.get_secret_value()
        if self.bearer_token_env:
            return os.environ.get(self.bearer_token_env) or None
        return None


@dataclass(frozen=True, slots=True)
class StoredServer:
    """A server added over the admin API (a row of ``store/mcp_servers.py``)."""

    name: str
    settings: McpServerSettings
    created_at: float
    updated_at: float


class McpSettings(_Section):
    servers: dict[str, McpServerSettings] = Field(
        default_factory=dict, description="MCP servers by name (the name is in tool names)."
    )
    use_by_default: bool = Field(
        default=True,
        description="Offer every enabled server's tools to /v1 chat requests that do not "
        "say (use_mcp); Langchain-Chatchat's route uses MCP only with use_mcp.",
    )
    stdio_allowlist: list[str] = Field(
        default_factory=list,
        description="Commands a stdio server added over the admin API may run: a bare "
        "name or a full path, alone (any arguments: an interpreter alone runs any code "
        "given with -c) or followed by its arguments, each a glob "
        "('npx -y @modelcontextprotocol/server-*'); servers in this file are not limited.",
    )
    url_allow_hosts: list[str] = Field(
        default_factory=list,
        description="Private hosts and networks an HTTP or SSE server added over the admin "
        "API may be at (names, *.suffix, CIDR; as tools.web_fetch.allow_hosts): loopback, "
        "private, link-local and metadata addresses are refused otherwise. Servers in this "
        "file are not limited.",
    )
    stdio_env_allowlist: list[str] | None = Field(
        default=None,
        description="The env names a stdio server added over the admin API may set; None: "
        "any but the loader and interpreter hooks (PATH, LD_*, NODE_OPTIONS, ...).",
    )
    list_wait_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="How long a request waits for a server's tool list; a slower server "
        "goes on connecting in the background and its tools join later requests.",
    )
    failures_to_quarantine: int = Field(default=3, ge=1)
    quarantine_seconds: float = Field(
        default=60.0, gt=0, description="The first quarantine; each one in a row doubles it."
    )
    max_output_chars: int = Field(default=100_000, ge=1_000)
    refresh_seconds: float = Field(
        default=5.0, gt=0, description="How often servers added over the API are re-read."
    )
    serve: bool = Field(
        default=True, description="Serve Parley's own MCP endpoint at /mcp (API keys apply)."
    )

    @model_validator(mode="after")
    def _names(self) -> McpSettings:
        for name in self.servers:
            check_server_name(name)
        return self


def check_server_name(name: str) -> str:
    if not SERVER_NAME.match(name):
        raise ValueError(
            f"bad MCP server name {name!r}: use letters, digits, '-' and single '_', "
            "at most 32 characters"
        )
    return name


def allowed_command(command: str, args: Sequence[str], allowlist: list[str]) -> bool:
    """Whether ``command`` with ``args`` is on the allowlist.

    An entry is a command (a bare name as PATH finds it, or a full path), alone or
    followed by its arguments (shell-quoted; each may be a glob). A command alone allows
    any arguments: list an interpreter (``python3``, ``node``, ``npx``, ``uvx``) that way
    and an admin key runs any code through ``-c``; give its arguments instead, as in
    ``npx -y @modelcontextprotocol/server-*`` or ``python3 /opt/mcp/files.py``.
    """
    for entry in allowlist:
        try:
            words = shlex.split(entry)
        except ValueError:
            continue
        if not words or words[0] != command:
            continue
        patterns = words[1:]
        if not patterns:
            return True
        if len(patterns) == len(args) and all(map(fnmatchcase, args, patterns)):
            return True
    return False
