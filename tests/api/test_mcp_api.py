"""``/v1/mcp/servers`` over a real server: who may change what, the stdio allowlist, the
config file's servers, masked secrets, import, and that only ``/tools`` starts anything.

Every stdio server here runs ``STARTER``, which touches a marker file and then becomes
``tests/mcp/servers.py``: a marker that exists means a process was started.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import db_rows, server_config
from tests.mcp import servers
from tests.support.server import ParleyServer, api_error

from parley.api.mcp import ServerUpdate, check_admissible, check_reachable
from parley.errors import PermissionDenied
from parley.settings.mcp import McpServerSettings, McpSettings
from parley.testing.mock_openai import MockOpenAI

SERVER_SCRIPT = str(Path(servers.__file__))
STARTER = """\
import os, pathlib, sys
pathlib.Path(sys.argv[1]).touch()
os.execv(sys.executable, [sys.executable, sys.argv[2]])
"""
CONFIG_TOKEN = "config-bearer-SECRET"
CONFIG_ENV = "config-env-SECRET"
SECRETS = ("SECRET",)
"""Every secret in this module holds this word; no response body may."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp-api")
    (path / "starter.py").write_text(STARTER)
    return path


def _stdio(folder: Path, marker: str, **extra: Any) -> dict[str, Any]:
    """A stdio server that leaves ``folder/marker`` behind once started."""
    args = [str(folder / "starter.py"), str(folder / marker), SERVER_SCRIPT]
    return {"command": sys.executable, "args": args, "timeout": 20, **extra}


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory, folder: Path
) -> Iterator[ParleyServer]:
    mcp = {
        "stdio_allowlist": [sys.executable],
        "url_allow_hosts": ["127.0.0.1/32"],  # the tests' own servers; nothing else private
        "servers": {
            "configured": _stdio(folder, "configured.started", env={"TOKEN": CONFIG_ENV}),
            "remote": {"url": "http://127.0.0.1:9/mcp", "bearer_token": CONFIG_TOKEN},
        },
    }
    config = server_config(upstream, mcp=mcp)
    with ParleyServer(tmp_path_factory.mktemp("mcp-server"), config) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {"admin": server.create_key("root", "--admin"), "alice": server.create_key("alice")}


@pytest.fixture
def admin(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["admin"]) as client:
        yield client
        for entry in client.get("/mcp/servers").json()["data"]:
            if entry["source"] == "api":
                client.delete(f"/mcp/servers/{entry['name']}")


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client


def _created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _no_secrets(response: httpx.Response) -> None:
    for secret in SECRETS:
        assert secret not in response.text


def _by_name(client: httpx.Client) -> dict[str, dict[str, Any]]:
    response = client.get("/mcp/servers")
    assert response.status_code == 200, response.text
    _no_secrets(response)
    return {entry["name"]: entry for entry in response.json()["data"]}


def test_only_admins_change_servers(admin: httpx.Client, alice: httpx.Client, folder: Path) -> None:
    body = {"name": "mine", **_stdio(folder, "mine.started")}
    for response in (
        alice.post("/mcp/servers", json=body),
        alice.post("/mcp/servers", json={"name": "a__b"}),  # refused before it is checked
        alice.post("/mcp/servers/import", json={"mcpServers": {"x": {"command": "true"}}}),
    ):
        assert api_error(response, 403)["code"] == "admin_required"
    _created(admin.post("/mcp/servers", json=body))
    for response in (
        alice.patch("/mcp/servers/mine", json={"enabled": False}),
        alice.delete("/mcp/servers/mine"),
    ):
        assert api_error(response, 403)["code"] == "admin_required"
    assert alice.get("/mcp/servers/mine").json()["enabled"] is True
    with httpx.Client(base_url=str(admin.base_url)) as stranger:
        assert api_error(stranger.get("/mcp/servers"), 401)["code"] == "invalid_api_key"


def test_config_file_servers_are_listed_and_read_only(
    admin: httpx.Client, alice: httpx.Client, folder: Path
) -> None:
    seen = _by_name(alice)
    assert seen["configured"]["source"] == "config"
    assert seen["configured"]["transport"] == "stdio"
    assert seen["remote"]["source"] == "config"
    assert seen["remote"]["connected"] is False
    assert "config" not in seen["configured"]
    assert "last_error" not in seen["configured"]

    body = {"name": "configured", **_stdio(folder, "other.started")}
    assert api_error(admin.post("/mcp/servers", json=body), 409)["code"] == ("mcp_server_in_config")
    error = api_error(admin.patch("/mcp/servers/configured", json={"timeout": 5}), 409)
    assert "defined in the config file" in error["message"]
    assert api_error(admin.delete("/mcp/servers/remote"), 409)["code"] == "mcp_server_in_config"
    imported = admin.post(
        "/mcp/servers/import",
        json={"mcpServers": {"configured": _stdio(folder, "x.started")}, "replace": True},
    ).json()
    assert imported["created"] == imported["updated"] == []
    assert "config file" in imported["skipped"][0]["reason"]


def test_admins_see_the_config_with_secrets_masked(admin: httpx.Client) -> None:
    seen = _by_name(admin)
    configured = seen["configured"]["config"]
    assert configured["env"] == {"TOKEN": "***"}
    assert configured["command"] == sys.executable
    assert configured["args"][-1] == SERVER_SCRIPT
    assert configured["bearer_token"] is None
    remote = seen["remote"]["config"]
    assert remote["bearer_token"] == "***"
    assert remote["url"] == "http://127.0.0.1:9/mcp"
    assert remote["transport"] == "http"
    assert "last_error" in seen["remote"]

    body = {
        "name": "hosted",
        "url": "https://mcp.example.com/mcp",
        "headers": {"X-Api-Key": "header-SECRET"},
        "bearer_token": "api-bearer-SECRET",
    }
    response = admin.post("/mcp/servers", json=body)
    _no_secrets(response)
    view = _created(response)
    assert view["source"] == "api"
    assert view["config"]["headers"] == {"X-Api-Key": "***"}
    assert view["config"]["bearer_token"] == "***"
    for response in (
        admin.get("/mcp/servers/hosted"),
        admin.patch("/mcp/servers/hosted", json={"timeout": 9}),
    ):
        assert response.status_code == 200, response.text
        _no_secrets(response)


def test_the_stdio_allowlist(admin: httpx.Client, folder: Path) -> None:
    error = api_error(admin.post("/mcp/servers", json={"name": "sh", "command": "/bin/sh"}), 403)
    assert error["code"] == "command_not_allowed"
    assert sys.executable in error["message"]
    assert "/bin/sh" in error["message"]

    allowed = {"name": "py", **_stdio(folder, "py.started")}
    assert _created(admin.post("/mcp/servers", json=allowed))["config"]["command"] == (
        sys.executable
    )
    # a PATCH is checked again, whole
    error = api_error(admin.patch("/mcp/servers/py", json={"command": "bash"}), 403)
    assert error["code"] == "command_not_allowed"
    # the allowlisted name may not be pointed at another program
    for env in ({"PATH": "/tmp"}, {"LD_PRELOAD": "/tmp/x.so"}):
        error = api_error(admin.patch("/mcp/servers/py", json={"env": env}), 403)
        assert error["code"] == "mcp_server_refused"
    # nor may a server added here read Parley's environment
    body = {"name": "leaky", "url": "https://example.com/mcp", "bearer_token_env": "HOME"}
    assert api_error(admin.post("/mcp/servers", json=body), 403)["param"] == "bearer_token_env"
    assert "py" in _by_name(admin)
    assert "leaky" not in _by_name(admin)


def test_env_hooks_that_would_run_other_code_are_refused(admin: httpx.Client, folder: Path) -> None:
    hooks = {
        "NODE_OPTIONS": "--import=data:text/javascript,process.exit(7)",
        "BASH_ENV": "/tmp/evil.sh",
        "PYTHONPATH": "/tmp/evil",
        "JAVA_TOOL_OPTIONS": "-javaagent:/tmp/evil.jar",
        "npm_config_registry": "https://evil.example/",
        "GIT_SSH_COMMAND": "touch /tmp/owned",
        "LD_AUDIT": "/tmp/evil.so",
        "BAD NAME": "x",
    }
    for name, value in hooks.items():
        body = {"name": "hooked", **_stdio(folder, "hooked.started", env={name: value})}
        error = api_error(admin.post("/mcp/servers", json=body), 403)
        assert error["code"] == "mcp_server_refused", error
        assert error["param"] == f"env.{name}"
        assert repr(name) in error["message"]
        assert "mcp.stdio_env_allowlist" in error["message"]
    both = {"NODE_OPTIONS": "x", "BASH_ENV": "y", "GITHUB_TOKEN": "z"}
    body = {"name": "hooked", **_stdio(folder, "hooked.started", env=both)}
    error = api_error(admin.post("/mcp/servers", json=body), 403)
    assert error["param"] == "env"
    assert "'NODE_OPTIONS', 'BASH_ENV'" in error["message"]
    assert "GITHUB_TOKEN" not in error["message"]

    # ordinary names pass, and so do the harmless ones under a refused prefix
    fine = {"GITHUB_TOKEN": "t", "NODE_ENV": "production", "PYTHONUNBUFFERED": "1"}
    _created(admin.post("/mcp/servers", json={"name": "fine", **_stdio(folder, "f", env=fine)}))
    # a PATCH and an import are checked the same way
    error = api_error(admin.patch("/mcp/servers/fine", json={"env": {"BASH_ENV": "x"}}), 403)
    assert error["code"] == "mcp_server_refused"
    entry = _stdio(folder, "imp.started", env={"PYTHONSTARTUP": "/tmp/evil.py"})
    result = admin.post("/mcp/servers/import", json={"mcpServers": {"imp": entry}}).json()
    assert result["created"] == []
    assert "PYTHONSTARTUP" in result["skipped"][0]["reason"]
    # an http server runs no process: its env is not checked ...
    remote = {"name": "far", "url": "https://mcp.example.com/mcp", "env": {"BASH_ENV": "x"}}
    _created(admin.post("/mcp/servers", json=remote))
    # ... until it becomes a stdio server
    switch = {"url": None, "command": sys.executable}
    assert api_error(admin.patch("/mcp/servers/far", json=switch), 403)["param"] == "env.BASH_ENV"
    assert not list(folder.glob("*.started"))


@pytest.fixture(scope="module")
def strict_server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    mcp = {"stdio_allowlist": [sys.executable], "stdio_env_allowlist": ["GITHUB_TOKEN", "LD_X"]}
    config = server_config(upstream, mcp=mcp)
    with ParleyServer(tmp_path_factory.mktemp("mcp-strict"), config) as running:
        yield running


def test_the_stdio_env_allowlist_replaces_the_default_rules(
    strict_server: ParleyServer, folder: Path
) -> None:
    key = strict_server.create_key("root", "--admin")
    with strict_server.client(key) as admin:
        for env in ({"OTHER": "x"}, {"NODE_OPTIONS": "x"}, {"github_token": "x"}):
            body = {"name": "strict", **_stdio(folder, "strict.started", env=env)}
            error = api_error(admin.post("/mcp/servers", json=body), 403)
            assert error["code"] == "mcp_server_refused"
            assert repr(next(iter(env))) in error["message"]
            assert "not on mcp.stdio_env_allowlist" in error["message"]
            assert "GITHUB_TOKEN, LD_X" in error["message"]
        # what the operator lists is allowed, exactly, even a name the defaults refuse
        env = {"GITHUB_TOKEN": "t", "LD_X": "y"}
        body = {"name": "strict", **_stdio(folder, "strict.started", env=env)}
        _created(admin.post("/mcp/servers", json=body))
        error = api_error(admin.patch("/mcp/servers/strict", json={"env": {"OTHER": "x"}}), 403)
        assert error["param"] == "env.OTHER"
    assert not list(folder.glob("*.started"))


def test_bad_names_and_fields_are_400(admin: httpx.Client, folder: Path) -> None:
    for name in ("a__b", "x" * 33, "", "has space"):
        body = {"name": name, **_stdio(folder, "bad.started")}
        error = api_error(admin.post("/mcp/servers", json=body), 400)
        assert error["param"] == "name", error
    for body, words in (
        ({"name": "nothing"}, "needs a command"),
        ({"name": "both", "command": sys.executable, "url": "http://x/"}, "not both"),
        ({"name": "ftp", "url": "ftp://example.com"}, "http://"),
        ({"name": "extra", "command": sys.executable, "colour": "red"}, "colour"),
        ({"name": "slow", "command": sys.executable, "timeout": 1000}, "timeout"),
    ):
        error = api_error(admin.post("/mcp/servers", json=body), 400)
        assert words in error["message"], error
    _created(admin.post("/mcp/servers", json={"name": "ok", **_stdio(folder, "ok.started")}))
    error = api_error(admin.patch("/mcp/servers/ok", json={"args": "not-a-list"}), 400)
    assert error["param"] == "args"
    assert api_error(admin.patch("/mcp/servers/ok", json={"name": "new"}), 400)


def test_create_read_update_delete(admin: httpx.Client, server: ParleyServer) -> None:
    body = {
        "name": "hosted",
        "url": "https://mcp.example.com/mcp",
        "headers": {"X-Team": "blue-SECRET", "X-Other": "o-SECRET"},
        "bearer_token": "crud-bearer-SECRET",
    }
    created = _created(admin.post("/mcp/servers", json=body))
    assert created["enabled"] is True
    assert created["connected"] is False
    assert created["created_at"] > 0
    assert api_error(admin.post("/mcp/servers", json=body), 409)["code"] == "mcp_server_exists"

    # sending back what was listed keeps the secrets; a new value replaces one
    config = admin.get("/mcp/servers/hosted").json()["config"]
    changes = {
        "headers": {**config["headers"], "X-Other": "new-SECRET"},
        "bearer_token": config["bearer_token"],
        "enabled": False,
    }
    updated = admin.patch("/mcp/servers/hosted", json=changes)
    assert updated.status_code == 200, updated.text
    assert updated.json()["enabled"] is False
    [row] = db_rows(server, "SELECT config FROM mcp_servers WHERE name = 'hosted'")
    assert '"crud-bearer-SECRET"' in row["config"]
    assert '"blue-SECRET"' in row["config"]
    assert '"new-SECRET"' in row["config"]

    # null puts a field back to its default; switching kind needs both sides
    switched = admin.patch(
        "/mcp/servers/hosted",
        json={"url": None, "headers": None, "bearer_token": None, "command": sys.executable},
    )
    assert switched.status_code == 200, switched.text
    assert switched.json()["config"]["transport"] == "stdio"
    assert switched.json()["config"]["bearer_token"] is None
    [row] = db_rows(server, "SELECT config FROM mcp_servers WHERE name = 'hosted'")
    assert "SECRET" not in row["config"]

    deleted = admin.delete("/mcp/servers/hosted")
    assert deleted.json() == {
        "id": "hosted",
        "name": "hosted",
        "object": "mcp.server.deleted",
        "deleted": True,
    }
    for response in (
        admin.get("/mcp/servers/hosted"),
        admin.delete("/mcp/servers/hosted"),
        admin.patch("/mcp/servers/hosted", json={"enabled": True}),
        admin.get("/mcp/servers/hosted/tools"),
    ):
        assert api_error(response, 404)["code"] == "mcp_server_not_found"


def test_import_creates_skips_and_replaces(
    admin: httpx.Client, folder: Path, server: ParleyServer
) -> None:
    claude = {
        "mcpServers": {
            "files": _stdio(folder, "files.started", env={"K": "import-SECRET"}),
            "web": {"url": "https://mcp.example.com/mcp", "type": "streamable-http"},
            "events": {"url": "https://mcp.example.com/sse", "transport": "sse"},
            "shell": {"command": "bash", "args": ["-c", "echo hi"]},
            "bad__name": {"command": sys.executable},
            "weird": {"url": "https://x/", "type": "carrier-pigeon"},
            "off": {**_stdio(folder, "off.started"), "disabled": True, "autoApprove": []},
        },
        "globalShortcut": "Ctrl+Space",  # the rest of a client's file is ignored
    }
    response = admin.post("/mcp/servers/import", json=claude)
    assert response.status_code == 200, response.text
    _no_secrets(response)
    result = response.json()
    assert result["created"] == ["files", "web", "events", "off"]
    assert result["updated"] == []
    reasons = {entry["name"]: entry["reason"] for entry in result["skipped"]}
    assert set(reasons) == {"shell", "bad__name", "weird"}
    assert "stdio_allowlist" in reasons["shell"]
    assert "bad MCP server name" in reasons["bad__name"]
    assert "carrier-pigeon" in reasons["weird"]

    seen = _by_name(admin)
    assert seen["web"]["transport"] == "http"
    assert seen["events"]["config"]["transport"] == "sse"
    assert seen["off"]["enabled"] is False
    assert seen["files"]["config"]["env"] == {"K": "***"}

    again = {"mcpServers": {"web": {"url": "https://other.example.com/mcp"}}}
    skipped = admin.post("/mcp/servers/import", json=again).json()
    assert skipped["created"] == skipped["updated"] == []
    assert skipped["skipped"][0]["name"] == "web"
    assert _by_name(admin)["web"]["config"]["url"] == "https://mcp.example.com/mcp"

    replaced = admin.post("/mcp/servers/import", params={"replace": "true"}, json=again).json()
    assert replaced["updated"] == ["web"]
    assert _by_name(admin)["web"]["config"]["url"] == "https://other.example.com/mcp"
    vscode = {"servers": {"code": {"type": "http", "url": "https://x.example/mcp"}}}
    assert admin.post("/mcp/servers/import", json=vscode).json()["created"] == ["code"]
    assert api_error(admin.post("/mcp/servers/import", json={"other": {}}), 400)
    assert not list(folder.glob("*.started"))
    [row] = db_rows(server, "SELECT config FROM mcp_servers WHERE name = 'files'")
    assert "import-SECRET" in row["config"]


def test_listing_and_importing_never_start_a_process(
    admin: httpx.Client, alice: httpx.Client, folder: Path
) -> None:
    markers = [folder / name for name in ("lazy.started", "imported.started")]
    _created(admin.post("/mcp/servers", json={"name": "lazy", **_stdio(folder, markers[0].name)}))
    imported = {"mcpServers": {"imported": _stdio(folder, markers[1].name)}}
    assert admin.post("/mcp/servers/import", json=imported).json()["created"] == ["imported"]
    admin.patch("/mcp/servers/lazy", json={"timeout": 25})
    for client in (admin, alice):
        _by_name(client)
        for name in ("lazy", "imported", "configured"):
            assert client.get(f"/mcp/servers/{name}").status_code == 200
    assert not list(folder.glob("*.started"))

    response = alice.get("/mcp/servers/lazy/tools")
    assert response.status_code == 200, response.text
    tools = {tool["name"]: tool for tool in response.json()["data"]}
    assert markers[0].exists()
    assert not markers[1].exists()
    assert {"mcp__lazy__echo", "mcp__lazy__add"} <= set(tools)
    echo = tools["mcp__lazy__echo"]
    assert echo["tool"] == "echo"
    assert echo["description"] == "Say the text back."
    assert echo["parameters"]["properties"]["text"]["type"] == "string"
    lazy = admin.get("/mcp/servers/lazy").json()
    assert lazy["connected"] is True
    assert lazy["tool_count"] == len(tools)

    configured = alice.get("/mcp/servers/configured/tools")
    assert configured.status_code == 200, configured.text
    assert "mcp__configured__echo" in {tool["name"] for tool in configured.json()["data"]}
    assert (folder / "configured.started").exists()


def test_tools_of_a_server_that_cannot_answer(admin: httpx.Client, alice: httpx.Client) -> None:
    error = api_error(admin.get("/mcp/servers/remote/tools"), 502)
    assert error["code"] == "mcp_unavailable"
    last_error = admin.get("/mcp/servers/remote").json()["last_error"]
    assert last_error
    assert error["message"] == last_error
    # what went wrong may name paths or carry a server's stderr: admins only
    response = alice.get("/mcp/servers/remote/tools")
    _no_secrets(response)
    error = api_error(response, 502)
    assert error["code"] == "mcp_unavailable"
    assert last_error not in error["message"]
    assert "an admin can see why" in error["message"]
    assert "last_error" not in alice.get("/mcp/servers/remote").json()

    body = {"name": "off", "url": "http://127.0.0.1:9/mcp", "enabled": False}
    _created(admin.post("/mcp/servers", json=body))
    assert api_error(alice.get("/mcp/servers/off/tools"), 409)["code"] == "mcp_server_disabled"


def test_a_patch_may_send_every_setting() -> None:
    assert set(ServerUpdate.model_fields) == set(McpServerSettings.model_fields)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/mcp",
        "http://[::1]:9/mcp",
        "http://localhost:9/mcp",
        "http://10.0.0.5/mcp",
        "http://167772165/mcp",  # 10.0.0.5, spelled as a number
        "http://[::ffff:10.0.0.5]/mcp",
        "http://127.0.0.2:9/mcp",  # loopback, but not the allowed 127.0.0.1/32
    ],
)
def test_a_server_at_a_private_address_needs_the_operators_allowlist(
    admin: httpx.Client, url: str
) -> None:
    error = api_error(admin.post("/mcp/servers", json={"name": "inside", "url": url}), 403)
    assert error["code"] == "url_not_allowed"
    assert "mcp.url_allow_hosts" in error["message"]
    imported = admin.post("/mcp/servers/import", json={"mcpServers": {"inside": {"url": url}}})
    assert imported.json()["created"] == []
    assert "mcp.url_allow_hosts" in imported.json()["skipped"][0]["reason"]
    assert admin.get("/mcp/servers/inside").status_code == 404


def test_a_name_that_resolves_to_a_private_address_is_refused_too() -> None:
    """This machine's own name resolves (through /etc/hosts, usually) to a loopback or
    private address: refused like the address, without mcp.url_allow_hosts."""
    name = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(name, 9)}
    if not all(ipaddress.ip_address(a).is_private for a in addresses):
        pytest.skip(f"{name} resolves to a public address here: {addresses}")
    settings = McpServerSettings(url=f"http://{name}:9/mcp")

    with pytest.raises(PermissionDenied) as refused:
        asyncio.run(check_reachable(settings, McpSettings()))
    assert refused.value.code == "url_not_allowed"
    asyncio.run(check_reachable(settings, McpSettings(url_allow_hosts=[name])))  # allowed


def test_an_allowlist_entry_may_fix_the_arguments(tmp_path: Path) -> None:
    script = str(tmp_path / "server.py")
    allow = McpSettings(stdio_allowlist=[f"{sys.executable} {script}", "npx -y @scope/server-*"])

    def check(command: str, *args: str) -> None:
        check_admissible(McpServerSettings(command=command, args=list(args)), allow)

    check(sys.executable, script)
    check("npx", "-y", "@scope/server-files")
    for command, args in [
        (sys.executable, ["-c", "import os; os.system('id')"]),  # an interpreter's escape
        (sys.executable, [script, "--extra"]),
        (sys.executable, []),
        ("npx", ["-y", "@evil/server-files"]),
    ]:
        with pytest.raises(PermissionDenied) as refused:
            check(command, *args)
        assert refused.value.code == "command_not_allowed"
    check_admissible(
        McpServerSettings(command=sys.executable, args=["-c", "print(1)"]),
        McpSettings(stdio_allowlist=[sys.executable]),  # alone: any arguments, as documented
    )
