"""``parley kb``: knowledge bases on a running Parley server, over its HTTP API.

``ingest`` uploads a file or a folder (recursively, supported extensions, hidden files
skipped) in batches, then follows indexing with a progress bar until every document is
ready, failed or cancelled, and prints a summary. Exit codes: 0 all ready, 1 some
failed, 2 a usage error (no such path, the server unreachable, the key refused).
Interrupting the wait leaves indexing running on the server. ``list``, ``search`` and
``delete`` do what they say.

What does not belong here: anything that touches the database or files directly (the
server owns those), the routes themselves (``api/knowledge.py``).
"""

from __future__ import annotations

import mimetypes
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

kb_app = typer.Typer(help="Knowledge bases on a running Parley server.", no_args_is_help=True)
console = Console()

SUPPORTED = frozenset(
    {".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".docx", ".csv", ".json"}
)
BATCH_FILES = 8
BATCH_BYTES = 20 * 1024 * 1024
POLL_SECONDS = 1.0
POLL_PER_ROUND = 25  # documents read per polling round; the rest in later rounds
FINISHED = frozenset({"ready", "failed", "cancelled"})

ServerOption = Annotated[
    str, typer.Option("--server", envvar="PARLEY_URL", help="Base URL of the Parley server.")
]
KeyOption = Annotated[
    str | None,
    typer.Option("--api-key", envvar="PARLEY_API_KEY", help="API key (not needed on loopback)."),
]
DEFAULT_SERVER = "http://127.0.0.1:8000"


class _Api:
    """A thin client: JSON in and out; a failed call prints why and exits."""

    def __init__(self, server: str, api_key: str | None) -> None:
        base = server.rstrip("/").removesuffix("/v1")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.server = base
        self.http = httpx.Client(
            base_url=f"{base}/v1", headers=headers, timeout=httpx.Timeout(300.0, connect=5.0)
        )

    def call(self, method: str, path: str, *, allow: tuple[int, ...] = (), **kw: Any) -> Any:
        """The response's JSON; a status in ``allow`` returns the response itself."""
        try:
            response = self.http.request(method, path, **kw)
        except httpx.TransportError as exc:
            message = f"cannot reach the Parley server at {self.server} ({exc})"
            _exit(f"{message}; is it running? (--server or PARLEY_URL)", 2)
        if response.status_code in allow:
            return response
        if response.status_code >= 400:
            code = 2 if response.status_code in (401, 403) else 1
            _exit(f"{method} {path}: {response.status_code} {_message(response)}", code)
        return response.json()


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300]


def _exit(message: str, code: int) -> NoReturn:
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _kb_path(name: str) -> str:
    return f"/knowledge_bases/{quote(name, safe='')}"


def _files(path: Path, pattern: str | None) -> list[Path]:
    if path.is_file():
        return [path]
    found = path.rglob(pattern) if pattern else path.rglob("*")
    return sorted(
        p
        for p in found
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
        and (pattern is not None or p.suffix.lower() in SUPPORTED)
    )


def _batches(files: list[Path]) -> Iterator[list[Path]]:
    batch: list[Path] = []
    size = 0
    for file in files:
        length = file.stat().st_size
        if batch and (len(batch) >= BATCH_FILES or size + length > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(file)
        size += length
    if batch:
        yield batch


@contextmanager
def _opened(batch: list[Path]) -> Iterator[list[tuple[str, tuple[str, Any, str]]]]:
    with ExitStack() as stack:
        yield [
            (
                "files",
                (
                    f.name,
                    stack.enter_context(f.open("rb")),
                    mimetypes.guess_type(f.name)[0] or "application/octet-stream",
                ),
            )
            for f in batch
        ]


def _base(api: _Api, name: str, create: bool) -> dict[str, Any]:
    found = api.call("GET", _kb_path(name), allow=(404,))
    if not isinstance(found, httpx.Response):
        return dict(found)
    if not create:
        _exit(f"no knowledge base named {name!r} (use --create)", 2)
    console.print(f"created knowledge base [bold]{escape(name)}[/bold]")
    return dict(api.call("POST", "/knowledge_bases", json={"name": name}))


def _upload(
    api: _Api, kb_id: str, files: list[Path]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Queued documents and failed files."""
    documents: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("uploading", total=len(files))
        for batch in _batches(files):
            with _opened(batch) as parts:
                answer = api.call(
                    "POST",
                    f"/knowledge_bases/{kb_id}/documents",
                    files=parts,
                    allow=(400, 413, 429, 503),
                )
            if isinstance(answer, httpx.Response):
                error = _message(answer)
                failed += [{"filename": f.name, "error": error} for f in batch]
            else:
                documents += answer["data"]
                failed += answer["failed_files"]
            progress.advance(task, len(batch))
    return documents, failed


def _wait(api: _Api, kb_id: str, documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Poll until every document is finished; the last state of each, by id."""
    state = {d["id"]: d for d in documents}
    columns = (
        TextColumn("indexing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("chunks  {task.fields[docs]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("indexing", total=None, docs="")
        rotation = 0
        while True:
            pending = [i for i, d in state.items() if d["status"] not in FINISHED]
            ready = sum(d["status"] == "ready" for d in state.values())
            bad = sum(d["status"] in ("failed", "cancelled") for d in state.values())
            total = sum(d.get("chunks_total") or 0 for d in state.values())
            done = sum(d.get("chunks_done") or 0 for d in state.values())
            progress.update(
                task,
                total=total or None,
                completed=done,
                docs=f"documents: {ready} ready, {bad} failed, {len(state)} in all",
            )
            if not pending:
                return state
            time.sleep(POLL_SECONDS)
            rotation %= len(pending)
            for document_id in (pending[rotation:] + pending[:rotation])[:POLL_PER_ROUND]:
                path = f"/knowledge_bases/{kb_id}/documents/{document_id}"
                answer = api.call("GET", path, allow=(404,))
                if isinstance(answer, httpx.Response):
                    state[document_id] = {**state[document_id], "status": "failed"}
                    state[document_id]["error"] = "deleted while indexing"
                else:
                    state[document_id] = answer
            rotation += POLL_PER_ROUND


def _summary(state: dict[str, dict[str, Any]], failed: list[dict[str, Any]]) -> int:
    rows = list(state.values())
    bad = [d for d in rows if d["status"] != "ready"]
    shown = rows if len(rows) + len(failed) <= 50 else bad
    if shown or failed:
        table = Table("file", "status", "chunks", "note")
        for d in shown:
            ok = d["status"] == "ready"
            table.add_row(
                escape(d["filename"]),
                f"[green]{d['status']}[/green]" if ok else f"[red]{d['status']}[/red]",
                str(d.get("chunks_done") or 0),
                f"[dim]{escape(d.get('error') or '')}[/dim]"
                if ok
                else escape(d.get("error") or ""),
            )
        for f in failed:
            table.add_row(escape(f["filename"]), "[red]not uploaded[/red]", "", escape(f["error"]))
        console.print(table)
    ready = len(rows) - len(bad)
    chunks = sum(d.get("chunks_done") or 0 for d in rows if d["status"] == "ready")
    console.print(
        f"{ready} ready ({chunks} chunks), {len(bad)} failed or cancelled, "
        f"{len(failed)} not uploaded"
    )
    return 0 if not bad and not failed else 1


@kb_app.command("ingest")
def ingest(
    path: Annotated[Path, typer.Argument(help="A file, or a folder read recursively.")],
    kb: Annotated[str, typer.Option("--kb", help="Knowledge base name (or id).")],
    server: ServerOption = DEFAULT_SERVER,
    api_key: KeyOption = None,
    create: Annotated[bool, typer.Option(help="Create the knowledge base if missing.")] = True,
    wait: Annotated[bool, typer.Option(help="Follow indexing until it is done.")] = True,
    glob: Annotated[
        str | None, typer.Option(help="Only files matching this pattern (e.g. '*.md').")
    ] = None,
) -> None:
    """Upload documents into a knowledge base and follow their indexing."""
    if not path.exists():
        _exit(f"no such file or folder: {path}", 2)
    files = _files(path, glob)
    if not files:
        _exit(f"no supported files under {path} ({', '.join(sorted(SUPPORTED))})", 2)
    api = _Api(server, api_key)
    base = _base(api, kb, create)
    console.print(f"uploading {len(files)} file(s) to [bold]{escape(base['name'])}[/bold]")
    documents, failed = _upload(api, base["id"], files)
    if not wait:
        console.print(f"{len(documents)} document(s) queued, {len(failed)} not uploaded")
        for f in failed:
            console.print(f"  [red]{escape(f['filename'])}[/red]: {escape(f['error'])}")
        raise typer.Exit(0 if not failed else 1)
    try:
        state = _wait(api, base["id"], documents)
    except KeyboardInterrupt:
        console.print(
            "\nstopped waiting: indexing goes on on the server "
            f"(see `parley kb list` or GET /v1/knowledge_bases/{base['id']}/documents)"
        )
        raise typer.Exit(130) from None
    raise typer.Exit(_summary(state, failed))


@kb_app.command("list")
def list_bases(server: ServerOption = DEFAULT_SERVER, api_key: KeyOption = None) -> None:
    """List the knowledge bases, newest first."""
    api = _Api(server, api_key)
    table = Table("name", "documents", "chunks", "embedding model", "updated")
    table.add_column("id", no_wrap=True, min_width=29)
    stale = 0
    for b in _all_bases(api):
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(b["updated_at"]))
        model = escape(b["embedding_model"] or "-")
        if b.get("reindex_needed"):
            stale += 1
            model += " [yellow](re-index)[/yellow]"
        table.add_row(
            escape(b["name"]), str(b["documents"]), str(b["chunks"]), model, updated, b["id"]
        )
    console.print(table)
    if stale:
        console.print(
            f"{stale} base(s) not embedded with the server's model are searched by words "
            "only: `parley kb reindex --stale`"
        )


def _all_bases(api: _Api) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params = {"limit": 100, **({"after": after} if after else {})}
        answer = api.call("GET", "/knowledge_bases", params=params)
        found += answer["data"]
        if not answer["has_more"]:
            return found
        after = answer["last_id"]


@kb_app.command("reindex")
def reindex(
    names: Annotated[
        list[str] | None, typer.Argument(help="Knowledge base names or ids.", show_default=False)
    ] = None,
    stale: Annotated[
        bool,
        typer.Option(
            "--stale", help="Every base not embedded with the server's model (reindex_needed)."
        ),
    ] = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: KeyOption = None,
) -> None:
    """Index knowledge bases again with the server's current embedding model, in the
    background (after changing knowledge.embedder; `parley kb list` shows progress).
    Until then a base is searched by its words only."""
    if not names and not stale:
        _exit("name the knowledge bases to re-index, or give --stale", 2)
    api = _Api(server, api_key)
    chosen = []
    for name in names or []:
        found = api.call("GET", _kb_path(name), allow=(404,))
        if isinstance(found, httpx.Response):
            _exit(f"no knowledge base named {name!r}", 2)
        chosen.append(dict(found))
    if stale:
        known = {b["id"] for b in chosen}
        chosen += [b for b in _all_bases(api) if b["reindex_needed"] and b["id"] not in known]
    if not chosen:
        console.print("every knowledge base is embedded with the server's model: nothing to do")
        return
    for b in chosen:
        queued = api.call("POST", f"/knowledge_bases/{b['id']}/reindex")["queued"]
        console.print(f"[bold]{escape(b['name'])}[/bold]: {queued} document(s) queued")
    console.print("indexing runs in the background on the server (`parley kb list`)")


@kb_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    kb: Annotated[list[str], typer.Option("--kb", help="Knowledge base (repeatable).")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=50)] = 6,
    server: ServerOption = DEFAULT_SERVER,
    api_key: KeyOption = None,
) -> None:
    """Search knowledge bases; print the best chunks, best first."""
    api = _Api(server, api_key)
    body = {"query": query, "knowledge_bases": kb, "top_k": top_k}
    results = api.call("POST", "/knowledge_bases/search", json=body)["data"]
    if not results:
        console.print("no matches")
    for r in results:
        where = [r["filename"]]
        if r.get("page") is not None:
            where.append(f"page {r['page']}")
        if r.get("section"):
            where.append(r["section"])
        snippet = " ".join(r["text"].split())
        snippet = snippet if len(snippet) <= 300 else snippet[:299] + "…"
        console.print(
            f"[bold]{r['rank']}.[/bold] {escape(' · '.join(where))} "
            f"[dim](score {r['score']:.4f})[/dim]\n   {escape(snippet)}",
            soft_wrap=True,
        )


@kb_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Knowledge base name or id.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    server: ServerOption = DEFAULT_SERVER,
    api_key: KeyOption = None,
) -> None:
    """Delete a knowledge base with its documents."""
    if not yes and not typer.confirm(f"Delete knowledge base {name!r} and all its documents?"):
        raise typer.Exit(1)
    api = _Api(server, api_key)
    answer = api.call("DELETE", _kb_path(name), allow=(404,))
    if isinstance(answer, httpx.Response):
        _exit(f"no knowledge base named {name!r}", 2)
    console.print(f"deleted {escape(name)} ({answer['id']})")
