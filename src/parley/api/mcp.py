"""``/v1/mcp/servers``: the MCP servers this server knows, and adding them over HTTP.

- ``GET /v1/mcp/servers`` and ``GET /v1/mcp/servers/{name}``: any caller; each server's
  source (``config``: the config file's, read-only here; ``api``: added over this API)
  and health. Admins also see ``last_error`` and the ``config``, with the values of
  ``env`` and ``headers`` and any ``bearer_token`` shown as ``***``.
- ``POST /v1/mcp/servers`` (201), ``PATCH`` and ``DELETE /v1/mcp/servers/{name}``:
  admins only. The config file's servers answer 409 to changes.
- ``POST /v1/mcp/servers/import``: admins; the ``mcpServers`` object of Claude Desktop,
  Cursor and the like (``servers``: VS Code's), each entry checked on its own.
- ``GET /v1/mcp/servers/{name}/tools``: any caller; the one route that connects (and so
  may start a stdio server). Nothing else here starts a process or opens a connection.
  A server that brings no tools answers 502 (``mcp_unavailable``; the reason for admins
  only: its ``last_error``), or 409 when it is disabled.

A server added here is trusted less than the config file's. These refusals are 403s:

- A stdio one may only run a command on ``mcp.stdio_allowlist``.
- Its ``env`` may not make the allowlisted program run or load other code. With
  ``mcp.stdio_env_allowlist`` set, every name must be on that list, exactly (and nothing
  else is checked). Without it (the default), names must be ``[A-Za-z_][A-Za-z0-9_]*``
  and none may be a loader, shell, interpreter or package-runner hook, compared without
  case (``refused_env``):

  - anything with ``OPTIONS`` in it or ending in ``_OPTS`` (``NODE_OPTIONS``,
    ``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS``, ``JDK_JAVA_OPTIONS``, ``MAVEN_OPTS``);
  - the prefixes ``LD_``, ``DYLD_``, ``BASH_FUNC_``, ``GIT_``, ``XDG_``, ``OPENSSL_``,
    ``PYTHON``, ``PERL``, ``RUBY``, ``GEM_``, ``BUNDLE_``, ``LUA_``, ``NODE_``,
    ``NPM_CONFIG_``, ``YARN_``, ``COREPACK_``, ``BUN_``, ``DENO_``, ``ELECTRON_``,
    ``UV_``, ``PIP_``, ``PIPX_``, ``DOTNET_``, ``CORECLR_``, ``COMPLUS_``, ``CARGO_``,
    ``RUSTUP_``, ``RUSTC``, ``DOCKER_`` (a package runner's registry is code too);
  - the names ``PATH``, ``PATHEXT``, ``SHELL``, ``COMSPEC``, ``HOME``, ``ENV``,
    ``BASH_ENV``, ``BASHOPTS``, ``SHELLOPTS``, ``PS4``, ``IFS``, ``CDPATH``,
    ``PROMPT_COMMAND``, ``ZDOTDIR``, ``EDITOR``, ``VISUAL``, ``PAGER``, ``MANPAGER``,
    ``LESSOPEN``, ``LESSCLOSE``, ``BROWSER``, ``SSH_ASKPASS``, ``SUDO_ASKPASS``,
    ``GCONV_PATH``, ``LOCPATH``, ``NLSPATH``, ``GLIBC_TUNABLES``, ``SSLKEYLOGFILE``,
    ``CLASSPATH``, ``JAVA_HOME``, ``GOFLAGS``, ``GOPROXY``, ``GOTOOLCHAIN``, ``GOROOT``,
    ``GOPATH``, ``GOENV``, ``GOSUMDB``, ``GONOSUMDB``, ``GOINSECURE``, ``GOPRIVATE``,
    ``GONOPROXY``, ``PHPRC``, ``PHP_INI_SCAN_DIR``, ``R_PROFILE``, ``R_PROFILE_USER``,
    ``R_ENVIRON``, ``R_ENVIRON_USER``, ``R_LIBS``, ``R_LIBS_USER``, ``GTK_MODULES``,
    ``GTK_PATH``, ``GIO_MODULE_DIR``, ``QT_PLUGIN_PATH``;
  - but these harmless ones pass: ``NODE_ENV``, ``NODE_NO_WARNINGS``,
    ``PYTHONUNBUFFERED``, ``PYTHONIOENCODING``, ``PYTHONUTF8``,
    ``PYTHONDONTWRITEBYTECODE``.

  A deny list cannot know every program's hooks: where that matters, set
  ``stdio_env_allowlist``. An http or sse server runs no process, so its ``env`` is not
  checked (it is used only if the server is later switched to stdio, which checks it).
- None may use ``bearer_token_env`` (it would send the server's own environment, its
  provider keys say, to any URL).

In a ``PATCH``, a field sent replaces the stored one whole and ``null`` puts it back to
its default; ``***`` (what the listing shows) keeps the stored secret, so a listed config
can be sent back as it is.

What does not belong here: the settings model (``settings/mcp.py``), the rows
(``store/mcp_servers.py``), keeping the manager in step (``mcp/service.py``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from parley.api.errors import validation_error
from parley.api.openapi import answers
from parley.api.shapes import McpImport, McpServer, McpServerDeleted, McpServerList, McpToolList
from parley.api.state import AppState
from parley.errors import Conflict, InvalidRequest, NotFound, ParleyError, PermissionDenied
from parley.settings.mcp import (
    McpServerSettings,
    McpSettings,
    allowed_command,
    check_server_name,
)
from parley.store.mcp_servers import McpServerStore, stored_config
from parley.tools.netguard import AddressGuard, BlockedAddress, FetchError

router = APIRouter(tags=["mcp"])

MASK = "***"
"""What admins see instead of a secret; sent back in a PATCH, it keeps the stored one."""
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REFUSED_ENV = frozenset(
    {
        *("PATH", "PATHEXT", "SHELL", "COMSPEC", "HOME", "ENV", "BASH_ENV", "BASHOPTS"),
        *("SHELLOPTS", "PS4", "IFS", "CDPATH", "PROMPT_COMMAND", "ZDOTDIR"),
        *("EDITOR", "VISUAL", "PAGER", "MANPAGER", "LESSOPEN", "LESSCLOSE", "BROWSER"),
        *("SSH_ASKPASS", "SUDO_ASKPASS"),
        *("GCONV_PATH", "LOCPATH", "NLSPATH", "GLIBC_TUNABLES", "SSLKEYLOGFILE"),
        *("CLASSPATH", "JAVA_HOME"),
        *("GOFLAGS", "GOPROXY", "GOTOOLCHAIN", "GOROOT", "GOPATH", "GOENV", "GOSUMDB"),
        *("GONOSUMDB", "GOINSECURE", "GOPRIVATE", "GONOPROXY"),
        *("PHPRC", "PHP_INI_SCAN_DIR"),
        *("R_PROFILE", "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER", "R_LIBS"),
        "R_LIBS_USER",
        *("GTK_MODULES", "GTK_PATH", "GIO_MODULE_DIR", "QT_PLUGIN_PATH"),
    }
)
"""Names a stdio server added over the API may not set (without ``stdio_env_allowlist``)."""
REFUSED_ENV_PREFIXES = (
    *("LD_", "DYLD_", "BASH_FUNC_", "GIT_", "XDG_", "OPENSSL_"),
    *("PYTHON", "PERL", "RUBY", "GEM_", "BUNDLE_", "LUA_"),
    *("NODE_", "NPM_CONFIG_", "YARN_", "COREPACK_", "BUN_", "DENO_", "ELECTRON_"),
    *("UV_", "PIP_", "PIPX_", "DOTNET_", "CORECLR_", "COMPLUS_", "CARGO_", "RUSTUP_"),
    *("RUSTC", "DOCKER_"),
)
HARMLESS_ENV = frozenset(
    {
        *("NODE_ENV", "NODE_NO_WARNINGS", "PYTHONUNBUFFERED", "PYTHONIOENCODING"),
        *("PYTHONUTF8", "PYTHONDONTWRITEBYTECODE"),
    }
)
"""Names under a refused prefix that change no code that runs."""
IMPORT_TRANSPORTS: dict[str, Literal["stdio", "http", "sse"]] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
    "sse": "sse",
}
IMPORT_IGNORED = frozenset({"autoApprove", "alwaysAllow", "disabledTools", "description"})
"""Keys other clients keep beside a server that mean nothing to Parley."""


class McpUnavailable(ParleyError):
    """An MCP server could not list its tools."""

    status = 502
    type = "upstream_error"
    code = "mcp_unavailable"


# --- bodies ------------------------------------------------------------------------------


class ServerCreate(McpServerSettings):
    name: Annotated[str, Field(max_length=100), AfterValidator(check_server_name)]

    def server_settings(self) -> McpServerSettings:
        return McpServerSettings.model_validate(
            {field: getattr(self, field) for field in McpServerSettings.model_fields}
        )


class ServerUpdate(BaseModel):
    """The fields of ``McpServerSettings``, each optional; checked whole after merging."""

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio", "http", "sse"] | None = None
    command: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    bearer_token: str | None = None
    bearer_token_env: str | None = None
    timeout: float | None = None
    enabled: bool | None = None


class ServerImport(BaseModel):
    """A client's MCP configuration file; its other keys are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    mcp_servers: dict[str, Any] | None = Field(default=None, alias="mcpServers", max_length=200)
    servers: dict[str, Any] | None = Field(default=None, max_length=200)
    replace: bool = False


# --- JSON shapes -------------------------------------------------------------------------


def config_json(settings: McpServerSettings) -> dict[str, Any]:
    """A server's settings for admins: secrets masked, never sent."""
    return {
        "transport": settings.kind,
        "command": settings.command,
        "args": list(settings.args),
        "cwd": settings.cwd,
        "env": dict.fromkeys(settings.env, MASK),
        "url": settings.url,
        "headers": dict.fromkeys(settings.headers, MASK),
        "bearer_token": None if settings.bearer_token is None else MASK,
        "bearer_token_env": settings.bearer_token_env,
        "timeout": settings.timeout,
        "enabled": settings.enabled,
    }


def server_json(
    entry: dict[str, Any], settings: McpServerSettings | None, *, admin: bool
) -> dict[str, Any]:
    """One entry of ``McpService.describe()`` as the API shows it."""
    view = {
        "name": entry["name"],
        "object": "mcp.server",
        "source": entry.get("source"),
        "transport": entry.get("transport"),
        "enabled": entry.get("enabled"),
        "connected": entry.get("connected"),
        "tool_count": entry.get("tool_count"),
        "latency_ms": entry.get("latency_ms"),
        "quarantined_for_seconds": entry.get("quarantined_for_seconds"),
        "consecutive_failures": entry.get("consecutive_failures"),
        "skipped_tools": entry.get("skipped_tools", []),
        "created_at": entry.get("created_at"),
    }
    if admin:
        view["last_error"] = entry.get("last_error")  # may name paths: admins only
        view["refused"] = entry.get("refused")  # a stored server today's rules refuse
        view["config"] = None if settings is None else config_json(settings)
    return view


# --- helpers -----------------------------------------------------------------------------


async def _admin(request: Request) -> AppState:
    """The state, once the caller is known to be an admin (before the body is checked)."""
    state: AppState = request.app.state.parley
    await state.auth.admin(request)
    return state


AdminState = Annotated[AppState, Depends(_admin)]


def _store(state: AppState) -> McpServerStore:
    return McpServerStore(state.database)


def _not_found(name: str) -> NotFound:
    return NotFound(f"MCP server {name!r} not found", param="name", code="mcp_server_not_found")


def _in_config(name: str) -> Conflict:
    return Conflict(
        f"MCP server {name!r} is defined in the config file: change it there",
        param="name",
        code="mcp_server_in_config",
    )


def _view(state: AppState, name: str, *, admin: bool) -> dict[str, Any]:
    for entry in state.mcp.describe():
        if entry["name"] == name:
            return server_json(entry, state.mcp.settings_of(name), admin=admin)
    raise _not_found(name)


def check_admissible(settings: McpServerSettings, mcp: McpSettings) -> None:
    """Refuse (403) what a server added over the API may not do."""
    if settings.bearer_token_env:
        raise PermissionDenied(
            "bearer_token_env reads this server's own environment and is only for servers "
            "in the config file: send bearer_token instead",
            param="bearer_token_env",
            code="mcp_server_refused",
        )
    if settings.kind != "stdio":
        _check_url(settings.url or "", mcp)
        return  # no process: env is checked if the server is ever switched to stdio
    command = settings.command or ""
    allowlist = mcp.stdio_allowlist
    if not allowed_command(command, settings.args, allowlist):
        if allowlist:
            allowed = ", ".join(repr(entry) for entry in allowlist)
            message = (
                f"command {command!r} with these arguments is not on mcp.stdio_allowlist; "
                f"the entries are {allowed}"
            )
        else:
            message = (
                "mcp.stdio_allowlist is empty, so no stdio server may be added over the API: "
                "list the commands they may run under mcp.stdio_allowlist in the config file "
                "(or PARLEY_MCP__STDIO_ALLOWLIST)"
            )
        raise PermissionDenied(message, param="command", code="command_not_allowed")
    _check_env(settings.env, mcp.stdio_env_allowlist)


def _check_url(url: str, mcp: McpSettings) -> None:
    """Refuse a URL that names a private, local or metadata address (by what it says:
    ``check_reachable`` resolves names too)."""
    try:
        AddressGuard(mcp.url_allow_hosts).check_url(url)
    except FetchError as exc:
        raise _url_refused(exc) from None


async def check_reachable(settings: McpServerSettings, mcp: McpSettings) -> None:
    """At save time, a name is resolved too: one that resolves to a refused address is
    refused like the address (403)."""
    if settings.kind == "stdio" or not settings.url:
        return
    try:
        await AddressGuard(mcp.url_allow_hosts).resolve(settings.url)
    except BlockedAddress as exc:
        raise _url_refused(exc) from None
    except FetchError:
        return  # not resolvable now: the connection will say so


def _url_refused(exc: FetchError) -> PermissionDenied:
    return PermissionDenied(
        f"{exc}; an MCP server added over the API may be at a private address only when "
        "mcp.url_allow_hosts lists it (in the config file)",
        param="url",
        code="url_not_allowed",
    )


def refused_env(name: str) -> bool:
    """Whether the default rules refuse ``name`` in a stdio server's ``env`` (see above)."""
    upper = name.upper()
    if upper in HARMLESS_ENV:
        return False
    return (
        not ENV_NAME.match(name)
        or upper in REFUSED_ENV
        or upper.startswith(REFUSED_ENV_PREFIXES)
        or "OPTIONS" in upper
        or upper.endswith("_OPTS")
    )


def _check_env(env: dict[str, str], allowlist: list[str] | None) -> None:
    if allowlist is not None:
        refused = [name for name in env if name not in allowlist]
        if not refused:
            return
        allowed = ", ".join(allowlist) if allowlist else "none"
        reason = f"they are not on mcp.stdio_env_allowlist (allowed: {allowed})"
    else:
        refused = [name for name in env if refused_env(name)]
        if not refused:
            return
        reason = (
            "they could make the allowlisted command run or load other code (loader, shell "
            "and interpreter hooks); an operator can list the names allowed under "
            "mcp.stdio_env_allowlist in the config file"
        )
    names = ", ".join(repr(name) for name in refused)
    raise PermissionDenied(
        f"env may not set {names} for a server added over the API: {reason}",
        param=f"env.{refused[0]}" if len(refused) == 1 else "env",
        code="mcp_server_refused",
    )


def _merged(current: McpServerSettings, body: ServerUpdate) -> McpServerSettings:
    """``current`` with the fields sent replaced (null: the default; ``***``: kept)."""
    merged = stored_config(current)
    for field in body.model_fields_set:
        value = getattr(body, field)
        if value is None:
            merged.pop(field, None)
        elif field == "bearer_token" and value == MASK:
            continue
        elif field in ("env", "headers"):
            old: dict[str, str] = merged.get(field) or {}
            merged[field] = {
                key: old[key] if item == MASK and key in old else item
                for key, item in value.items()
            }
        else:
            merged[field] = value
    try:
        return McpServerSettings.model_validate(merged)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _imported(entry: Any) -> McpServerSettings:
    """One server of a client's configuration file as settings (``ValueError`` with the
    reason when it cannot be one)."""
    if not isinstance(entry, dict):
        raise ValueError("a server must be an object")
    fields = {key: value for key, value in entry.items() if key not in IMPORT_IGNORED}
    transport = fields.pop("transport", None)
    kind = fields.pop("type", None)
    given = transport if transport is not None else kind
    if given is not None:
        if not isinstance(given, str) or given not in IMPORT_TRANSPORTS:
            raise ValueError(
                f"unknown transport {given!r}: use stdio, http, streamable-http or sse"
            )
        fields["transport"] = IMPORT_TRANSPORTS[given]
    if "disabled" in fields:
        disabled = fields.pop("disabled")
        if not isinstance(disabled, bool):
            raise ValueError("disabled must be true or false")
        fields.setdefault("enabled", not disabled)
    try:
        return McpServerSettings.model_validate(fields)
    except ValidationError as exc:
        raise ValueError(validation_error(exc).message) from None


# --- routes ------------------------------------------------------------------------------


@router.get("/v1/mcp/servers", **answers(McpServerList))
async def list_servers(request: Request) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    await state.mcp.refresh()
    return {
        "object": "list",
        "data": [
            server_json(entry, state.mcp.settings_of(entry["name"]), admin=caller.admin)
            for entry in state.mcp.describe()
        ],
    }


@router.post("/v1/mcp/servers", **answers(McpServer, status=201, errors=(409,)))
async def create_server(state: AdminState, body: ServerCreate) -> dict[str, Any]:
    """Store a server; it connects on first use, never here."""
    if state.mcp.configured(body.name):
        raise _in_config(body.name)
    settings = body.server_settings()
    check_admissible(settings, state.mcp.settings)
    await check_reachable(settings, state.mcp.settings)
    await _store(state).create(body.name, settings)
    await state.mcp.reload()
    return _view(state, body.name, admin=True)


@router.post("/v1/mcp/servers/import", **answers(McpImport))
async def import_servers(
    state: AdminState,
    body: ServerImport,
    replace: bool = Query(default=False, description="Replace servers of the same name."),
) -> dict[str, Any]:
    """Add the servers of a client's configuration file; an existing name is skipped
    unless ``replace`` (query or body). Nothing connects."""
    if body.mcp_servers is None and body.servers is None:
        raise InvalidRequest(
            "send the servers as an mcpServers object (or VS Code's servers)",
            param="mcpServers",
        )
    entries = {**(body.servers or {}), **(body.mcp_servers or {})}
    replacing = replace or body.replace
    store = _store(state)
    created: list[str] = []
    updated: list[str] = []
    skipped: list[dict[str, str]] = []
    for name, entry in entries.items():
        if state.mcp.configured(name):
            skipped.append({"name": name, "reason": _in_config(name).message})
            continue
        try:
            check_server_name(name)
            settings = _imported(entry)
        except ValueError as exc:
            skipped.append({"name": name, "reason": str(exc)})
            continue
        try:
            check_admissible(settings, state.mcp.settings)
            await check_reachable(settings, state.mcp.settings)
            await store.create(name, settings)
            created.append(name)
        except Conflict:
            if not replacing:
                reason = "a server of this name exists (replace=true replaces it)"
                skipped.append({"name": name, "reason": reason})
                continue
            try:
                await store.update(name, settings)
                updated.append(name)
            except LookupError:
                skipped.append({"name": name, "reason": "it was deleted meanwhile"})
        except ParleyError as exc:
            skipped.append({"name": name, "reason": exc.message})
    if created or updated:
        await state.mcp.reload()
    return {"object": "mcp.import", "created": created, "updated": updated, "skipped": skipped}


@router.get("/v1/mcp/servers/{name}", **answers(McpServer))
async def get_server(request: Request, name: str) -> dict[str, Any]:
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    await state.mcp.refresh()
    return _view(state, name, admin=caller.admin)


@router.patch("/v1/mcp/servers/{name}", **answers(McpServer, errors=(409,)))
async def update_server(state: AdminState, name: str, body: ServerUpdate) -> dict[str, Any]:
    """The fields sent replace the stored ones whole; the result is checked as a whole."""
    if state.mcp.configured(name):
        raise _in_config(name)
    store = _store(state)
    try:
        current = await store.get(name)
    except LookupError:
        raise _not_found(name) from None
    except ValidationError:
        raise Conflict(
            f"the stored settings of MCP server {name!r} are no longer valid: replace them "
            "(import with replace=true) or delete the server",
            param="name",
            code="mcp_server_invalid",
        ) from None
    settings = _merged(current.settings, body)
    check_admissible(settings, state.mcp.settings)
    await check_reachable(settings, state.mcp.settings)
    try:
        await store.update(name, settings)
    except LookupError:
        raise _not_found(name) from None
    await state.mcp.reload()
    return _view(state, name, admin=True)


@router.delete("/v1/mcp/servers/{name}", **answers(McpServerDeleted, errors=(409,)))
async def delete_server(state: AdminState, name: str) -> dict[str, Any]:
    """Forget the server; its connection, if any, is closed."""
    if state.mcp.configured(name):
        raise _in_config(name)
    try:
        await _store(state).delete(name)
    except LookupError:
        raise _not_found(name) from None
    await state.mcp.reload()
    return {"id": name, "name": name, "object": "mcp.server.deleted", "deleted": True}


@router.get("/v1/mcp/servers/{name}/tools", **answers(McpToolList, errors=(409, 502)))
async def list_server_tools(request: Request, name: str) -> dict[str, Any]:
    """The server's tools, connecting (or starting it) if need be."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    await state.mcp.refresh()
    if not state.mcp.known(name):
        raise _not_found(name)
    listing = await state.mcp.manager.listing([name])
    problem = listing.problems.get(name)
    if problem is not None and not listing.tools:
        config = state.mcp.manager.config(name)
        if config is not None and not config.enabled:
            raise Conflict(problem, param="name", code="mcp_server_disabled")
        if caller.admin:  # the whole error, which may name paths or hold stderr
            entry = next((e for e in state.mcp.describe() if e["name"] == name), {})
            problem = entry.get("last_error") or problem
        else:
            problem = (
                f"MCP server {name!r} could not list its tools; an admin can see why in "
                f"GET /v1/mcp/servers/{name}"
            )
        raise McpUnavailable(problem)
    return {
        "object": "list",
        "data": [
            {
                "name": tool.spec.name,
                "object": "mcp.tool",
                "tool": tool.info.name,
                "description": tool.spec.description,
                "parameters": tool.spec.parameters,
            }
            for tool in listing.tools
        ],
    }
