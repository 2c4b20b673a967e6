"""The benchmark report: the Markdown table (each figure against its target) and plots.

``python -m parley.bench.report docs/bench`` writes the table and plots again from
that folder's ``bench.json``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _get(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _fmt(value: Any, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        value = f"{value:.3g}" if abs(value) < 10 else f"{value:.0f}"
    return f"{value}{unit}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "**missed**")


def rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(figure, parley, floor, litellm, target, verdict) for every figure measured."""
    f = report["figures"]
    out: list[tuple[str, str, str, str, str, str]] = []

    s1 = f.get("1_ttft_sequential", {})
    p_med = _get(s1, "parley", "stream", "added_median_ms")
    fl_med = _get(s1, "floor", "stream", "added_median_ms")
    p_p99 = _get(s1, "parley", "stream", "added_p99_ms")
    fl_p99 = _get(s1, "floor", "stream", "added_p99_ms")
    ok1 = None
    if None not in (p_med, fl_med, p_p99, fl_p99):
        ok1 = p_med <= 1.5 * max(fl_med, 0.05) and p_p99 <= 2.5 * max(fl_p99, 0.05)
    out.append(
        (
            "1. added TTFT, one at a time (median / p99)",
            f"{_fmt(p_med)} / {_fmt(p_p99)} ms",
            f"{_fmt(fl_med)} / {_fmt(fl_p99)} ms",
            f"{_fmt(_get(s1, 'litellm', 'stream', 'added_median_ms'))} / "
            f"{_fmt(_get(s1, 'litellm', 'stream', 'added_p99_ms'))} ms",
            "<= 1.5x / 2.5x floor",
            _verdict(ok1),
        )
    )
    out.append(
        (
            "1b. added latency, non-streaming (median)",
            _fmt(_get(s1, "parley", "non_stream", "added_median_ms"), " ms"),
            _fmt(_get(s1, "floor", "non_stream", "added_median_ms"), " ms"),
            _fmt(_get(s1, "litellm", "non_stream", "added_median_ms"), " ms"),
            "-",
            "-",
        )
    )
    half = f.get("2_3_half_load", {})
    p2 = _get(half, "parley", "ttft_added_p99_ms")
    out.append(
        (
            "2. added TTFT p99 at half of own saturation",
            _fmt(p2, " ms"),
            _fmt(_get(half, "floor", "ttft_added_p99_ms"), " ms"),
            _fmt(_get(half, "litellm", "ttft_added_p99_ms"), " ms"),
            "<= 10 ms",
            _verdict(None if p2 is None else p2 <= 10),
        )
    )
    g = f.get("3_gaps_alone", {})
    p3 = _get(g, "parley", "added_p99_ms")
    p3h = _get(half, "parley", "gap_added_p99_ms")
    out.append(
        (
            "3. added gap between chunks p99 (alone / half load)",
            f"{_fmt(p3)} / {_fmt(p3h)} ms",
            f"{_fmt(_get(g, 'floor', 'added_p99_ms'))} / "
            f"{_fmt(_get(half, 'floor', 'gap_added_p99_ms'))} ms",
            f"{_fmt(_get(g, 'litellm', 'added_p99_ms'))} / "
            f"{_fmt(_get(half, 'litellm', 'gap_added_p99_ms'))} ms",
            "<= 0.5 / 2 ms",
            _verdict(None if None in (p3, p3h) else (p3 <= 0.5 and p3h <= 2)),
        )
    )
    c = f.get("4_cpu_per_chunk", {})
    p4 = _get(c, "parley", "cpu_s_per_1000_chunks")
    l4 = _get(c, "litellm", "cpu_s_per_1000_chunks")
    ok4 = None if p4 is None else p4 <= 0.07 and (l4 is None or p4 <= l4 / 10)
    out.append(
        (
            "4. server CPU s per 1,000 chunks",
            _fmt(p4),
            _fmt(_get(c, "floor", "cpu_s_per_1000_chunks")),
            _fmt(l4),
            "<= 0.07 and <= 1/10 LiteLLM",
            _verdict(ok4),
        )
    )
    st = f.get("5_concurrent_streams", {})
    p5 = _get(st, "parley", "sustained_streams")
    top = max((lv["streams"] for lv in _get(st, "parley", "levels") or []), default=0)
    note = "" if p5 is None or p5 < top else "+ (highest level tried)"
    out.append(
        (
            "5. concurrent 50 tok/s streams on one core",
            f"{_fmt(p5)}{note}",
            _fmt(_get(st, "floor", "sustained_streams")),
            _fmt(_get(st, "litellm", "sustained_streams")),
            ">= 240",
            _verdict(None if p5 is None else p5 >= 240),
        )
    )
    r = f.get("6_requests_per_second", {})
    p6 = _get(r, "parley (store: false)", "rps_at_p99_50ms")
    out.append(
        (
            "6. non-streaming req/s at p99 <= 50 ms (pass-through / stored)",
            f"{_fmt(p6)} / {_fmt(_get(r, 'parley', 'rps_at_p99_50ms'))}",
            _fmt(_get(r, "floor", "rps_at_p99_50ms")),
            _fmt(_get(r, "litellm", "rps_at_p99_50ms")),
            ">= 1,200 pass-through",
            _verdict(None if p6 is None else p6 >= 1200),
        )
    )
    m = f.get("7_memory", {})

    def memory(name: str) -> str:
        return (
            f"{_fmt(_get(m, name, 'idle_at_start_mb'))} MB / "
            f"{_fmt(_get(m, name, 'per_stream_kb'))} KB / "
            f"{_fmt(_get(m, name, 'after_vs_idle'))}x"
        )

    idle = _get(m, "parley", "idle_at_start_mb")
    per = _get(m, "parley", "per_stream_kb")
    after = _get(m, "parley", "after_vs_idle")
    ok7 = None if None in (idle, per, after) else idle <= 120 and per <= 64 and after <= 1.10
    out.append(
        (
            "7. memory: idle / per open stream / after vs idle",
            memory("parley"),
            memory("floor"),
            memory("litellm"),
            "<= 120 MB / 64 KB / 1.1x",
            _verdict(ok7),
        )
    )
    o = f.get("8_overload_2x", {})

    def overload(name: str) -> str:
        entry = o.get(name)
        if not entry:
            return "-"
        total = entry["accepted"] + entry["refused"] + entry["failed"]
        share = entry["refused"] / total * 100 if total else 0
        return (
            f"p99 {_fmt(entry['ttft']['p99_ms'])} ms, {share:.0f}% refused "
            f"(p99 {_fmt(entry['refused_p99_ms'])} ms), {entry['failed']} failed"
        )

    p8 = o.get("parley")
    ok8 = None
    if p8:
        refused_fast = p8["refused_p99_ms"] is None or p8["refused_p99_ms"] <= 50
        ok8 = p8["failed"] == 0 and refused_fast and p8["ttft"]["p99_ms"] <= 20
    out.append(
        (
            "8. overload at 2x own saturation",
            overload("parley"),
            overload("floor"),
            overload("litellm"),
            "accepted p99 <= 20 ms, refusals fast",
            _verdict(ok8),
        )
    )
    local = f.get("13_local_model")
    if local:
        out.append(
            (
                "13. local model tokens/s vs llama.cpp direct",
                f"{_fmt(local['parley_tokens_per_s'])} vs {_fmt(local['direct_tokens_per_s'])} "
                f"({_fmt(local['ratio'])}x)",
                "-",
                "-",
                ">= 0.9x",
                _verdict(local["ratio"] >= 0.9),
            )
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Profile `{report['profile']}`, {report['started']}, {report['seconds']} s; "
        f"{report['machine']['cpu']} ({report['machine']['cores']} cores). Servers pinned to "
        f"core {report['pinning']['servers']}, mock and load generator to "
        f"{report['pinning']['mock_and_load']}. Added = minus the mock answering directly.",
        "",
        "| Figure | Parley | floor relay | LiteLLM | Target | |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in rows(report)]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(report["versions"].items()))
    lines += ["", f"Versions: {versions}."]
    for warning in report.get("warnings", []):
        lines.append(f"\nWarning: {warning}")
    return "\n".join(lines) + "\n"


def plots(report: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = report["figures"]
    sequential = figures.get("1_ttft_sequential", {})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, label in zip(axes, ("stream", "non_stream"), strict=True):
        for name, entry in sequential.items():
            samples = sorted(entry[label].get("samples_ms", []))
            if samples:
                axis.plot(samples, [i / len(samples) for i in range(len(samples))], label=name)
        axis.set_xscale("log")
        axis.set_xlabel(
            "time to first token (ms, log)" if label == "stream" else "latency (ms, log)"
        )
        axis.set_ylabel("share of requests")
        axis.set_title(f"{label.replace('_', '-')}, one request at a time")
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    fig.savefig(out / "ttft.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, entry in figures.get("6_requests_per_second", {}).items():
        levels = entry["levels"]
        axes[0].plot(
            [lv["concurrency"] for lv in levels], [lv["rps"] for lv in levels], "o-", label=name
        )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("clients (closed loop)")
    axes[0].set_ylabel("non-streaming requests/s (log)")
    axes[0].set_title("throughput against concurrency")
    axes[0].grid(alpha=0.3)
    axes[0].legend()
    for name, entry in figures.get("5_concurrent_streams", {}).items():
        levels = entry["levels"]
        axes[1].plot(
            [lv["streams"] for lv in levels],
            [lv["median_duration_s"] for lv in levels],
            "o-",
            label=name,
        )
    axes[1].set_xlabel("concurrent 50 tokens/s streams")
    axes[1].set_ylabel("median stream duration (s)")
    axes[1].set_title("keeping up with streams")
    axes[1].grid(alpha=0.3)
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)


def main() -> None:
    import sys

    import orjson

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench")
    report = orjson.loads((folder / "bench.json").read_bytes())
    (folder / "bench.md").write_text(markdown(report))
    plots(report, folder)
    print(markdown(report))


if __name__ == "__main__":
    main()
