"""The figures of ``benchmarks.md``, each measured side by side on every target.

Every function takes the rig, the targets to measure and the profile (``full`` or the
seconds-long ``smoke``), and returns a plain dict that goes into the JSON report.
Latencies are in milliseconds; "added" means minus the direct run's figure.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from parley.bench.load import (
    Connection,
    Result,
    closed_loop,
    hold_streams,
    open_loop,
    request_body,
)
from parley.bench.rig import Rig, Service


@dataclass(frozen=True)
class Profile:
    name: str
    sequential: int  # figure 1: requests one at a time
    gap_streams: int  # figure 3: streams at 50 tokens/s, one at a time
    gap_chunks: int
    cpu_seconds: float  # figure 4
    stream_levels: tuple[int, ...]  # figure 5
    stream_chunks: int
    rps_levels: tuple[int, ...]  # figure 6
    rps_seconds: float
    load_seconds: float  # figures 2 and 8
    memory_streams: int  # figure 7
    local_tokens: int  # figure 13
    agent_tool_counts: tuple[int, ...] = (1, 4, 16, 64)  # figure 9: parallel tools per step
    agent_turns: int = 20  # turns per tool count
    agent_steps: int = 3  # tool steps per turn (figures 9 and 10)
    agent_tool_ms: float = 200.0
    db_histories: tuple[int, ...] = (10, 100, 500, 2000)  # figure 10: messages
    db_turns: int = 10  # turns per history length
    db_tokens: int = 500  # deltas in the final answer
    db_paced_seconds: float = 1.5  # the final answer streamed over this long, once
    kb_sizes: tuple[int, ...] = (10_000, 100_000)  # figure 11: chunks in the base
    kb_queries: int = 200  # queries per size
    kb_ingest_chunks: int = 10_000  # figure 12: chunks written per batch size
    kb_ingest_batches: tuple[int, ...] = (8, 16, 64)  # chunks per transaction


FULL = Profile(
    "full",
    300,
    6,
    50,
    5.0,
    (60, 120, 240, 360, 480),
    100,
    (1, 4, 8, 16, 32),
    3.0,
    5.0,
    1000,
    64,
    agent_tool_counts=(1, 4, 16, 64),
    agent_turns=20,
    agent_steps=3,
    agent_tool_ms=200.0,
    db_histories=(10, 100, 500, 2000),
    db_turns=10,
    db_tokens=500,
    db_paced_seconds=1.5,
)
SMOKE = Profile(
    "smoke",
    10,
    1,
    5,
    0.5,
    (4,),
    5,
    (2,),
    0.3,
    0.5,
    20,
    4,
    agent_turns=1,
    agent_steps=2,
    db_histories=(10, 200),
    db_turns=2,
    db_tokens=100,
    db_paced_seconds=0.3,
    kb_sizes=(500, 2_000),
    kb_queries=10,
    kb_ingest_chunks=200,
    kb_ingest_batches=(16,),
)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": ms(statistics.median(values)) if values else float("nan"),
        "p99_ms": ms(percentile(values, 99)),
        "count": len(values),
    }


def _checked(results: list[Result]) -> dict[str, Any]:
    bad = [r for r in results if not r.ok]
    return {
        "requests": len(results),
        "failed": len(bad),
        "errors": sorted({(r.error or f"status {r.status}")[:120] for r in bad})[:5],
    }


def _maker(
    service: Service, *, stream: bool, chunks: int, extra: dict[str, Any] | None = None
) -> Callable[[Connection], Awaitable[Result]]:
    body = request_body(service.model, stream=stream, extra=extra)
    headers = service.headers or "authorization: Bearer bench\r\n"

    def make(connection: Connection) -> Awaitable[Result]:
        return connection.chat(body, stream=stream, chunks=chunks, headers=headers)

    return make


async def sequential(rig: Rig, targets: list[Service], profile: Profile) -> dict[str, Any]:
    """Figure 1: time to first token, one request at a time, streaming and not."""
    rig.set_shape(20, 0.0)
    out: dict[str, Any] = {}
    for stream in (True, False):
        label = "stream" if stream else "non_stream"
        for target in targets:
            make = _maker(target, stream=stream, chunks=20)
            connection = Connection("127.0.0.1", target.port)
            for _ in range(max(3, profile.sequential // 10)):  # warm up
                await make(connection)
            results = [await make(connection) for _ in range(profile.sequential)]
            connection.close()
            ttfts = [r.ttft for r in results if r.ok and r.ttft is not None]
            out.setdefault(target.name, {})[label] = {
                **summary(ttfts),
                **_checked(results),
                "samples_ms": [ms(t) for t in ttfts],
            }
    for label in ("stream", "non_stream"):
        direct = out["direct"][label]
        for entry in out.values():
            figures = entry[label]
            figures["added_median_ms"] = round(figures["median_ms"] - direct["median_ms"], 3)
            figures["added_p99_ms"] = round(figures["p99_ms"] - direct["p99_ms"], 3)
    return out


async def gaps_alone(rig: Rig, targets: list[Service], profile: Profile) -> dict[str, Any]:
    """Figure 3 (alone): gaps between chunks of a 50 tokens/s stream, one at a time."""
    rig.set_shape(profile.gap_chunks, 0.02)
    out: dict[str, Any] = {}
    for target in targets:
        make = _maker(target, stream=True, chunks=profile.gap_chunks)
        connection = Connection("127.0.0.1", target.port)
        results = [await make(connection) for _ in range(profile.gap_streams)]
        connection.close()
        gaps = [g for r in results if r.ok for g in r.gaps]
        out[target.name] = {**summary(gaps), **_checked(results)}
    for entry in out.values():
        entry["added_p99_ms"] = round(entry["p99_ms"] - out["direct"]["p99_ms"], 3)
    return out


async def cpu_per_chunk(rig: Rig, targets: list[Service], profile: Profile) -> dict[str, Any]:
    """Figure 4: server CPU seconds per 1,000 relayed chunks (100-chunk streams, 16 at once)."""
    rig.set_shape(100, 0.0)
    out: dict[str, Any] = {}
    for target in targets:
        if target.name == "direct":
            continue
        make = _maker(target, stream=True, chunks=100)
        await closed_loop(make, "127.0.0.1", target.port, concurrency=4, requests=8)
        before = target.cpu_seconds()
        started = time.perf_counter()
        results = await closed_loop(
            make, "127.0.0.1", target.port, concurrency=16, duration=profile.cpu_seconds
        )
        elapsed = time.perf_counter() - started
        used = target.cpu_seconds() - before
        chunks = sum(100 for r in results if r.ok)
        out[target.name] = {
            "cpu_s_per_1000_chunks": round(used / chunks * 1000, 4) if chunks else None,
            "streams_per_s": round(len(results) / elapsed, 1),
            "cpu_utilisation": round(used / elapsed, 2),
            **_checked(results),
        }
    return out


async def concurrent_streams(rig: Rig, targets: list[Service], profile: Profile) -> dict[str, Any]:
    """Figure 5: concurrent 50 tokens/s streams one core sustains with no lost frame."""
    chunks = profile.stream_chunks
    rig.set_shape(chunks, 0.02)
    nominal = chunks * 0.02
    out: dict[str, Any] = {}
    for target in targets:
        levels: list[dict[str, Any]] = []
        sustained = 0
        make = _maker(target, stream=True, chunks=chunks)
        for level in profile.stream_levels:
            results = await closed_loop(
                make, "127.0.0.1", target.port, concurrency=level, requests=level
            )
            gaps = [g for r in results if r.ok for g in r.gaps]
            durations = [r.total for r in results]
            ok = all(r.ok for r in results)
            median_duration = statistics.median(durations) if durations else float("inf")
            keeps_up = ok and median_duration <= nominal * 1.1 + 0.1
            levels.append(
                {
                    "streams": level,
                    "all_frames_ok": ok,
                    "median_duration_s": round(median_duration, 3),
                    "gap_p99_ms": ms(percentile(gaps, 99)),
                    "kept_up": keeps_up,
                }
            )
            if not keeps_up:
                break
            sustained = level
        out[target.name] = {"sustained_streams": sustained, "levels": levels}
    return out


async def requests_per_second(
    rig: Rig, targets: list[Service], profile: Profile, *, parley_pass_through: bool
) -> dict[str, Any]:
    """Figure 6: non-streaming requests/s at p99 <= 50 ms, by concurrency."""
    rig.set_shape(20, 0.0)
    out: dict[str, Any] = {}
    variants: list[tuple[str, Service, dict[str, Any] | None]] = [
        (t.name, t, None) for t in targets
    ]
    if parley_pass_through:
        parley = next((t for t in targets if t.name == "parley"), None)
        if parley is not None:
            variants.append(("parley (store: false)", parley, {"store": False}))
    for label, target, extra in variants:
        make = _maker(target, stream=False, chunks=20, extra=extra)
        await closed_loop(make, "127.0.0.1", target.port, concurrency=2, requests=20)
        levels = []
        best = 0.0
        for concurrency in profile.rps_levels:
            started = time.perf_counter()
            results = await closed_loop(
                make,
                "127.0.0.1",
                target.port,
                concurrency=concurrency,
                duration=profile.rps_seconds,
            )
            elapsed = time.perf_counter() - started
            latencies = [r.total for r in results if r.ok]
            rate = len(latencies) / elapsed
            p99 = percentile(latencies, 99)
            levels.append(
                {
                    "concurrency": concurrency,
                    "rps": round(rate, 1),
                    "p99_ms": ms(p99),
                    **_checked(results),
                }
            )
            if p99 <= 0.05 and not any(not r.ok for r in results):
                best = max(best, rate)
        out[label] = {"rps_at_p99_50ms": round(best, 1), "levels": levels}
    return out


async def saturation(rig: Rig, target: Service) -> float:
    """Streams/s a target completes with 32 clients and 20 chunks each, flat out."""
    rig.set_shape(20, 0.0)
    make = _maker(target, stream=True, chunks=20)
    started = time.perf_counter()
    results = await closed_loop(make, "127.0.0.1", target.port, concurrency=32, duration=3.0)
    return sum(r.ok for r in results) / (time.perf_counter() - started)


async def at_load(
    rig: Rig, targets: list[Service], profile: Profile, *, factor: float, rates: dict[str, float]
) -> dict[str, Any]:
    """Figures 2 and 3 (factor 0.5) and 8 (factor 2): open-loop load at a share of each
    target's own saturation; the direct run gets Parley's rate for reference."""
    rig.set_shape(20, 0.01)
    out: dict[str, Any] = {}
    for target in targets:
        rate = rates.get(target.name, rates.get("parley", 50.0)) * factor
        make = _maker(target, stream=True, chunks=20)
        results, skipped = await open_loop(
            make, "127.0.0.1", target.port, rate=rate, duration=profile.load_seconds
        )
        accepted = [r for r in results if r.status == 200]
        refused = [r for r in results if r.status in (429, 503)]
        other = [
            r for r in results if r.status not in (200, 429, 503) or (r.status == 200 and not r.ok)
        ]
        ttfts = [r.ttft for r in accepted if r.ok and r.ttft is not None]
        gaps = [g for r in accepted if r.ok for g in r.gaps]
        out[target.name] = {
            "rate_per_s": round(rate, 1),
            "ttft": summary(ttfts),
            "gap": summary(gaps),
            "accepted": len(accepted),
            "refused": len(refused),
            "refused_p99_ms": ms(percentile([r.total for r in refused], 99)) if refused else None,
            "failed": len(other),
            "not_sent": skipped,
        }
    direct = out.get("direct")
    if direct:
        for entry in out.values():
            entry["ttft_added_p99_ms"] = round(
                entry["ttft"]["p99_ms"] - direct["ttft"]["p99_ms"], 3
            )
            entry["gap_added_p99_ms"] = round(entry["gap"]["p99_ms"] - direct["gap"]["p99_ms"], 3)
    return out


async def memory(rig: Rig, targets: list[Service], profile: Profile) -> dict[str, Any]:
    """Figure 7: RSS idle, per open stream with many slow streams open, and after."""
    chunks = 4
    rig.set_shape(chunks, 1.5)
    out: dict[str, Any] = {}
    for target in targets:
        if target.name == "direct":
            continue
        idle = target.rss_mb()
        opened = asyncio.Event()
        body = request_body(target.model, stream=True)
        task = asyncio.ensure_future(
            hold_streams(
                "127.0.0.1",
                target.port,
                body,
                count=profile.memory_streams,
                chunks=chunks,
                opened=opened,
                headers=target.headers or "authorization: Bearer bench\r\n",
            )
        )
        await opened.wait()
        await asyncio.sleep(chunks * 1.5 * 0.6)
        peak = target.rss_mb()
        results = await task
        await asyncio.sleep(2.0)
        after = target.rss_mb()
        out[target.name] = {
            "idle_mb": round(idle, 1),
            "open_streams": profile.memory_streams,
            "peak_mb": round(peak, 1),
            "per_stream_kb": round((peak - idle) * 1024 / profile.memory_streams, 1),
            "after_mb": round(after, 1),
            "after_vs_idle": round(after / idle, 3) if idle else None,
            **_checked(results),
        }
    return out
