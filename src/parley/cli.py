"""The command line: ``parley serve | chat | keys | kb | interceptors | bench | migrate``.

Every command takes its settings from ``--config`` (or ``PARLEY_CONFIG``) and the
environment, like the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from parley import __version__
from parley.errors import ConfigurationError
from parley.kbcli import kb_app
from parley.settings import Settings, load_settings
from parley.store.keys import KeyStore

T = TypeVar("T")

app = typer.Typer(
    help="Parley: a self-hosted agentic chat server with an OpenAI-compatible API.",
    no_args_is_help=True,
    add_completion=False,
)
keys_app = typer.Typer(help="Manage API keys (stored as hashes).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(kb_app, name="kb")
console = Console()

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML settings file (default: $PARLEY_CONFIG)."),
]


def _settings(config: Path | None) -> Settings:
    try:
        return load_settings(config)
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config") from None
    except ValueError as exc:
        console.print(f"[red]invalid settings:[/red] {exc}")
        raise typer.Exit(2) from None


def _version(value: bool) -> None:
    if value:
        console.print(f"parley {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Parley: a self-hosted agentic chat server with an OpenAI-compatible API."""


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind [default: 127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [default: 8000].")] = None,
    config: ConfigOption = None,
) -> None:
    """Run the server."""

    from parley.app import create_app
    from parley.serving import ParleyUvicorn, uvicorn_config

    settings = _settings(config)
    if host is not None:
        settings.server.host = host
    if port is not None:
        settings.server.port = port
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.basicConfig(
        level=settings.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    providers = ", ".join(f"{p.name} ({p.kind})" for p in settings.effective_providers())
    console.print(
        f"Parley {__version__} on http://{settings.server.host}:{settings.server.port} "
        f"- providers: {providers} - data: {settings.data_dir}"
    )
    try:
        application = create_app(settings)
    except ConfigurationError as exc:
        console.print(
            f"[red]invalid settings:[/red] {exc.message}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(2) from None
    ParleyUvicorn(uvicorn_config(application, settings), pace_gc=True).run()


@app.command()
def chat(
    url: Annotated[
        str,
        typer.Option(
            envvar="PARLEY_URL",
            help="A running Parley server (http://host:port, with or without /v1).",
        ),
    ] = "http://127.0.0.1:8000",
    model: Annotated[str | None, typer.Option(help="Model name or alias.")] = None,
    api_key: Annotated[
        str, typer.Option(envvar="PARLEY_API_KEY", help="API key (not needed on loopback).")
    ] = "parley",
    conversation: Annotated[str | None, typer.Option(help="Continue this conversation id.")] = None,
    system: Annotated[str | None, typer.Option(help="A system prompt.")] = None,
) -> None:
    """Chat with a running server in the terminal (streaming, Markdown rendered)."""
    from parley.terminal import run_chat

    raise typer.Exit(run_chat(url, model, api_key, conversation, system))


@app.command()
def bench(
    profile: Annotated[
        str, typer.Option(help="full: the whole table (minutes); smoke: seconds, tiny load.")
    ] = "full",
    out: Annotated[Path, typer.Option(help="Folder for bench.json, bench.md and plots.")] = Path(
        "docs/bench"
    ),
    litellm: Annotated[
        bool, typer.Option(help="Also measure the LiteLLM proxy (installed on first use).")
    ] = True,
    litellm_venv: Annotated[
        Path, typer.Option(help="Where LiteLLM gets its own environment.")
    ] = Path("bench/.venv-litellm"),
    only: Annotated[
        str | None,
        typer.Option(
            help="quality: only figure 14, retrieval quality (in-process, seconds), "
            "written into the folder's existing report."
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Benchmark Parley against a mock upstream, a floor relay and the LiteLLM proxy.

    Figure 14 (retrieval quality) uses the settings' `knowledge` section (its embedder)."""
    if profile not in ("full", "smoke"):
        raise typer.BadParameter("full or smoke", param_hint="--profile")
    if only not in (None, "quality"):
        raise typer.BadParameter("quality", param_hint="--only")
    from parley.bench.report import markdown
    from parley.bench.run import main as run_bench

    knowledge = _settings(config).knowledge
    report = run_bench(profile, out, litellm, litellm_venv, only=only, knowledge=knowledge)
    if only == "quality":
        from parley.bench.quality import quality_markdown

        typer.echo("\n".join(quality_markdown(report)))
    else:
        typer.echo(markdown(report))
    console.print(f"report written to {out}/")


@app.command("interceptors")
def interceptors_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Show the interceptor chain these settings build, outermost first."""
    from parley.interceptors.discovery import build_chain

    settings = _settings(config)
    try:
        described = build_chain(settings).describe()
    except ConfigurationError as exc:
        console.print(
            f"[red]invalid settings:[/red] {exc.message}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(2) from None
    if as_json:
        console.print_json(data=described)
        return
    if not described:
        console.print("no interceptors: model and tool calls go straight through")
        return
    table = Table("order", "name", "on failure", "hooks", "source")
    for item in described:
        table.add_row(
            str(item["order"]),
            item["name"],
            "close" if item["fail_closed"] else "open",
            ", ".join(item["hooks"]),
            item["source"],
        )
    console.print(table)
    console.print(
        "[dim]before-hooks run top to bottom, after-hooks and stream hooks bottom to top[/dim]"
    )


@app.command("doctor")
def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Check this installation and say how to fix what fails.

    Python, the CPU, the local model (loaded and asked in its worker), the database, the
    embedding model and every provider. Exits 1 when a check fails.
    """
    from dataclasses import asdict

    from parley.doctor import diagnose

    settings = _settings(config)
    logging.basicConfig(level=logging.ERROR)
    findings = asyncio.run(diagnose(settings))
    if as_json:
        console.print_json(data=[asdict(f) for f in findings])
    else:
        styles = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
        for finding in findings:
            mark = f"[{styles[finding.status]}]{finding.status:<4}[/]"
            console.print(f"{mark}  [bold]{finding.check}[/]: {escape(finding.detail)}")
            if finding.fix:
                console.print(f"      fix: {escape(finding.fix)}", highlight=False)
    if any(f.status == "fail" for f in findings):
        raise typer.Exit(1)


@app.command("migrate")
def migrate_command(config: ConfigOption = None) -> None:
    """Apply database migrations (the server also does this at start-up)."""
    from parley.store.database import Database

    settings = _settings(config)

    async def run() -> None:
        database = Database(settings)
        try:
            await database.migrate()
        finally:
            await database.dispose()

    asyncio.run(run())
    console.print(f"database at {settings.database_url.split('://')[0]} is up to date")


def _with_keys(config: Path | None, call: Callable[[KeyStore], Awaitable[T]]) -> T:
    """Run ``call`` on the key store, then tell running servers that keys changed."""
    from parley.api.auth import mark_keys_changed
    from parley.store.database import Database

    settings = _settings(config)

    async def run() -> T:
        database = Database(settings)
        try:
            await database.migrate()
            return await call(KeyStore(database))
        finally:
            await database.dispose()

    result = asyncio.run(run())
    mark_keys_changed(settings.data_dir)
    return result


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="A label for the key.")] = "default",
    owner: Annotated[
        str, typer.Option(help="Owner whose conversations the key reaches.")
    ] = "local",
    admin: Annotated[
        bool,
        typer.Option("--admin", help="May see the interceptor chain and everyone's audit rows."),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Create a key and print it once. From now on every request needs a key."""
    from parley.api.auth import issue_key

    key, _ = _with_keys(config, lambda keys: issue_key(keys, owner, name, admin=admin))
    console.print(key, soft_wrap=True, highlight=False)
    role = ", admin" if admin else ""
    console.print(
        f"[dim]owner {owner}, name {name}{role}; it is shown only now.[/dim]", highlight=False
    )


@keys_app.command("list")
def keys_list(config: ConfigOption = None) -> None:
    """List keys (prefixes only; keys themselves are not stored)."""
    keys = _with_keys(config, lambda keys: keys.list())
    table = Table("id", "prefix", "owner", "name", "admin", "created", "revoked")
    for key in keys:
        table.add_row(
            key.id,
            key.prefix + "...",
            key.owner,
            key.name,
            "yes" if key.admin else "",
            _when(key.created_at),
            _when(key.revoked_at) if key.revoked_at else "",
        )
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id or prefix, from `keys list`.")],
    config: ConfigOption = None,
) -> None:
    """Revoke a key; it stops working on the next request."""
    count = _with_keys(config, lambda keys: keys.revoke(key_id))
    if not count:
        console.print(f"[red]no active key {key_id!r}[/red]")
        raise typer.Exit(1)
    console.print(f"revoked {count} key(s)")


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
