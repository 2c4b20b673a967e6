"""``parley bench``: run every figure side by side and write the report.

Output, in the chosen folder: ``bench.json`` (every figure, the machine, the versions),
``bench.md`` (the table, each Parley figure against its target and the peers) and PNG
plots (``ttft.png``: latency distributions; ``throughput.png``: requests/s and streams
against concurrency).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import platform
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from parley.bench import figures
from parley.bench.agent import agent_steps
from parley.bench.database import database_per_turn
from parley.bench.figures import FULL, SMOKE, Profile
from parley.bench.knowledge import hybrid_retrieval, ingestion
from parley.bench.quality import quality_markdown, retrieval_quality
from parley.bench.report import markdown, plots
from parley.bench.rig import Rig, Service
from parley.settings.knowledge import KnowledgeSettings

QUALITY_PROFILES = ("full",)
"""The profiles that measure figure 14 (the smoke run stays seconds; ``--only quality``
runs it alone)."""


def _versions() -> dict[str, str]:
    names = ["parley", "uvicorn", "uvloop", "httptools", "httpx", "fastapi", "starlette"]
    names += ["sqlalchemy", "orjson", "llama-cpp-python"]
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    found["python"] = platform.python_version()
    return found


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }


async def local_model(rig: Rig, profile: Profile) -> dict[str, Any] | None:
    """Figure 13: the embedded model's tokens/s through Parley vs llama.cpp directly."""
    try:
        import llama_cpp  # noqa: F401

        from parley.providers.local.provider import bundled_model_path
    except ImportError:
        return None
    path = bundled_model_path()
    if path is None:
        return None
    from llama_cpp import Llama

    prompt = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    tokens = profile.local_tokens

    def direct() -> float:
        llm: Any = Llama(model_path=str(path), n_ctx=2048, n_threads=1, verbose=False)
        rates = []
        for _ in range(3):
            started: float | None = None
            count = 0
            for chunk in llm.create_chat_completion(
                prompt, max_tokens=tokens, temperature=0.0, stream=True
            ):
                if chunk["choices"][0]["delta"].get("content"):
                    count += 1
                    started = started or time.perf_counter()
            assert started is not None
            rates.append((count - 1) / (time.perf_counter() - started))
        return sorted(rates)[1]

    os.sched_setaffinity(0, rig.server_cores)
    try:
        direct_rate = await asyncio.to_thread(direct)
    finally:
        os.sched_setaffinity(0, rig.client_cores)
    service = rig.start_parley(
        "parley-local",
        {"providers": [{"name": "local", "kind": "local", "threads": 1}]},
    )
    rates = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.port}", timeout=300) as http:
        for _ in range(4):
            started = None
            count = 0
            body = {
                "model": "smollm2-135m-instruct",
                "messages": prompt,
                "max_tokens": tokens,
                "temperature": 0.0,
                "stream": True,
            }
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if (
                        line.startswith("data: {")
                        and '"content":"' in line
                        and '"content":""' not in line
                    ):
                        count += 1
                        started = started or time.perf_counter()
            if started is not None and count > 1:
                rates.append((count - 1) / (time.perf_counter() - started))
    service.stop()
    parley_rate = sorted(rates[1:])[len(rates[1:]) // 2] if len(rates) > 1 else float("nan")
    return {
        "direct_tokens_per_s": round(direct_rate, 1),
        "parley_tokens_per_s": round(parley_rate, 1),
        "ratio": round(parley_rate / direct_rate, 3),
        "threads": 1,
    }


def _report(profile: str, started: float, pinning: dict[str, list[int]]) -> dict[str, Any]:
    return {
        "profile": profile,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": _machine(),
        "versions": _versions(),
        "pinning": pinning,
        "figures": {},
    }


async def run(
    profile: Profile,
    out: Path,
    *,
    litellm: bool,
    litellm_venv: Path,
    knowledge: KnowledgeSettings | None = None,
) -> dict[str, Any]:
    rig = Rig()
    started = time.time()
    report = _report(
        profile.name,
        started,
        {"servers": sorted(rig.server_cores), "mock_and_load": sorted(rig.client_cores)},
    )
    os.sched_setaffinity(0, rig.client_cores)
    try:
        await _served_figures(rig, profile, report, litellm_venv if litellm else None)
    finally:
        rig.stop()
    # Engine figures, in this process, once the servers are gone (nothing competes).
    await _engine_figures(profile, report["figures"], knowledge)
    report["seconds"] = round(time.time() - started, 1)
    report["warnings"] = rig.warnings + _rig_limits(report)
    write(report, out)
    return report


async def _served_figures(
    rig: Rig, profile: Profile, report: dict[str, Any], litellm_venv: Path | None
) -> None:
    """Figures 1 to 8 and 13: the servers side by side over loopback (LiteLLM too when
    ``litellm_venv`` is given)."""
    rig.start_mock()
    floor = rig.start_floor()
    parley = rig.start_parley()
    peers: list[Service] = []
    if litellm_venv is not None:
        peer = rig.start_litellm(litellm_venv)
        if peer is not None:
            peers.append(peer)
            report["versions"]["litellm"] = rig.litellm_version(litellm_venv) or "?"
    targets = [rig.services["direct"], floor, parley, *peers]
    servers = [floor, parley, *peers]
    idle = {s.name: round(s.rss_mb(), 1) for s in servers}
    results = report["figures"]
    results["1_ttft_sequential"] = await figures.sequential(rig, targets, profile)
    results["3_gaps_alone"] = await figures.gaps_alone(rig, targets, profile)
    results["4_cpu_per_chunk"] = await figures.cpu_per_chunk(rig, targets, profile)
    results["5_concurrent_streams"] = await figures.concurrent_streams(rig, servers, profile)
    results["6_requests_per_second"] = await figures.requests_per_second(
        rig, targets, profile, parley_pass_through=True
    )
    rates = {s.name: await figures.saturation(rig, s) for s in servers}
    report["saturation_streams_per_s"] = {k: round(v, 1) for k, v in rates.items()}
    results["2_3_half_load"] = await figures.at_load(
        rig, [rig.services["direct"], *servers], profile, factor=0.5, rates=rates
    )
    results["8_overload_2x"] = await figures.at_load(rig, servers, profile, factor=2.0, rates=rates)
    memory = await figures.memory(rig, servers, profile)
    for name, value in idle.items():
        memory[name]["idle_at_start_mb"] = value
    results["7_memory"] = memory
    local = await local_model(rig, profile)
    if local is not None:
        results["13_local_model"] = local


async def _engine_figures(
    profile: Profile, results: dict[str, Any], knowledge: KnowledgeSettings | None
) -> None:
    """Figures 9 to 12 (and 14 in the full profile): Parley's engine in this process."""
    results["9_agent_steps"] = await agent_steps(
        profile.agent_tool_counts,
        turns=profile.agent_turns,
        steps=profile.agent_steps,
        tool_ms=profile.agent_tool_ms,
    )
    results["10_database_per_turn"] = await database_per_turn(
        profile.db_histories,
        turns=profile.db_turns,
        steps=profile.agent_steps,
        tokens=profile.db_tokens,
        paced_seconds=profile.db_paced_seconds,
    )
    results["11_hybrid_retrieval"] = await hybrid_retrieval(
        profile.kb_sizes, queries=profile.kb_queries
    )
    results["12_ingestion"] = await ingestion(
        profile.kb_ingest_chunks, batches=profile.kb_ingest_batches
    )
    if profile.name in QUALITY_PROFILES:
        results["14_retrieval_quality"] = await retrieval_quality(knowledge)


async def run_quality(out: Path, knowledge: KnowledgeSettings | None = None) -> dict[str, Any]:
    """Figure 14 alone (``parley bench --only quality``), into ``out``'s report: the
    other figures of an existing ``bench.json`` are kept as they were."""
    existing = out / "bench.json"
    figure = await retrieval_quality(knowledge)
    if existing.is_file():
        report: dict[str, Any] = orjson.loads(existing.read_bytes())
        report["figures"]["14_retrieval_quality"] = figure
        if report.get("profile") == "quality":  # a folder of figure 14 alone, again
            _write_quality(report, out)
        else:
            write(report, out)
        return report
    # a folder of its own: the figure alone, no empty table nor plots of the others
    report = _report("quality", time.time(), {"servers": [], "mock_and_load": []})
    report["figures"]["14_retrieval_quality"] = figure
    _write_quality(report, out)
    return report


def _write_quality(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    (out / "bench.md").write_text("\n".join(quality_markdown(report)).lstrip() + "\n")


def write(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    (out / "bench.md").write_text(markdown(report))
    plots(report, out)


def _rig_limits(report: dict[str, Any]) -> list[str]:
    """Figures within 10% of what the mock itself does are limited by the rig."""
    warnings = []
    rps = report["figures"].get("6_requests_per_second", {})
    direct = rps.get("direct", {}).get("rps_at_p99_50ms") or 0
    for name, entry in rps.items():
        if name != "direct" and direct and entry["rps_at_p99_50ms"] >= 0.9 * direct:
            warnings.append(
                f"figure 6 for {name} is within 10% of the mock's own rate: rig-limited"
            )
    return warnings


def main(
    profile: str,
    out: Path,
    litellm: bool,
    litellm_venv: Path,
    *,
    only: str | None = None,
    knowledge: KnowledgeSettings | None = None,
) -> dict[str, Any]:
    """The whole report, or with ``only="quality"`` figure 14 alone (``run_quality``);
    ``knowledge``: the settings figure 14 measures (default: the default settings)."""
    if only == "quality":
        work = run_quality(out, knowledge)
    else:
        chosen = {"full": FULL, "smoke": SMOKE}[profile]
        work = run(chosen, out, litellm=litellm, litellm_venv=litellm_venv, knowledge=knowledge)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)
