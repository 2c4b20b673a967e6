"""Figures 9 and 10 (the agent engine, in-process) run and hold their hard invariants.

A tiny run: it proves the figures work and checks what cannot be noise (transactions
and statements per step, no per-token writes, parallel tools running in parallel).
Speed is judged from the full run (`parley bench`), never from a test.
"""

from __future__ import annotations

from typing import Any

import pytest

from parley.bench.agent import agent_steps
from parley.bench.database import database_per_turn
from parley.bench.report import _engine_verdicts, engine_markdown, rows

pytestmark = pytest.mark.anyio

DIST = {"median", "p90", "max"}


async def test_agent_step_figure() -> None:
    result = await agent_steps((1, 4), turns=1, steps=2, tool_ms=200.0)
    assert result["tool_ms"] == 200.0
    assert [level["tools"] for level in result["levels"]] == [1, 4]
    assert [level["tools"] for level in result["engine_only"]] == [1, 4]
    for level in result["levels"]:
        assert level["steps"] == 2
        for key in (
            "tool_phase_ms",
            "phase_engine_ms",
            "step_overhead_ms",
            "step_commit_ms",
            "turn_overhead_ms_per_step",
            "model_ms",
            "tool_phase_ratio",
        ):
            assert set(level[key]) == DIST, key
        # the tools waited 200 ms each: the phase cannot be shorter
        assert level["tool_phase_ms"]["median"] >= 199.0
        assert level["step_commit_ms"]["median"] > 0
    four = result["levels"][1]
    # four 200 ms tools run at once, not one after another
    assert four["tool_phase_ms"]["max"] < 4 * 200.0
    assert four["tool_phase_ratio"]["max"] < 2.0
    for level in result["engine_only"]:
        assert level["steps"] >= 20 * 2
        assert set(level["engine_ms_per_step"]) == DIST
        assert "tool_phase_ratio" not in level
    assert set(result["idle_penalty"]) == {"warm_ms", "after_idle_ms", "ratio"}


async def test_database_figure() -> None:
    result = await database_per_turn((10, 60), turns=2, steps=3, tokens=100, paced_seconds=0.3)
    levels = result["levels"]
    assert [level["messages"] for level in levels] == [10, 60]
    for level in levels:
        turn = level["per_turn"]
        assert set(turn) == {"read", "start", "step", "timed", "final", "other"}
        assert turn["other"]["statements"] == 0  # every statement is accounted for
        # one transaction per step, of at most four statements (BEGIN and COMMIT included)
        assert turn["step"]["transactions"] == 3
        assert level["transactions_per_step"] == 1
        assert level["statements_per_step"] <= 4
        assert turn["step"]["selects"] == 0
        assert turn["step"]["writes"] == 3
        # the turn: its first write, its steps, its final write; reads are apart
        assert turn["start"]["transactions"] == 1
        assert turn["final"]["transactions"] == 1
        assert turn["read"]["writes"] == 0
        assert level["write_transactions_per_turn"] == 5
        for key in ("step_write_ms", "step_write_isolated_ms", "turn_start_read_ms"):
            assert set(level[key]) == DIST
            assert level[key]["median"] > 0
    assert result["same_work_at_every_length"] is True
    tokens = result["tokens"]
    assert tokens["few"]["deltas"] == 5
    assert tokens["many"]["deltas"] == 100
    # writes follow steps and the clock, never tokens
    assert tokens["many"]["write_transactions"] == tokens["few"]["write_transactions"]
    assert tokens["many"]["write_statements"] == tokens["few"]["write_statements"]
    paced = tokens["many_paced"]
    assert paced["timed_checkpoints"] <= tokens["paced_checkpoints_allowed"]
    assert tokens["per_token_writes"] is False


def test_report_renders_figures_9_and_10() -> None:
    def dist(median: float) -> dict[str, float]:
        return {"median": median, "p90": median * 1.2, "max": median * 1.5}

    def nine(tools: int, overhead: float, ratio: float | None) -> dict[str, Any]:
        level: dict[str, Any] = {
            "tools": tools,
            "steps": 60,
            "phase_engine_ms": dist(0.1),
            "step_overhead_ms": dist(overhead),
            "step_commit_ms": dist(0.07),
            "turn_overhead_ms_per_step": dist(overhead),
        }
        if ratio is not None:
            level["tool_phase_ratio"] = dist(ratio)
        return level

    def ten(messages: int, write: float) -> dict[str, Any]:
        return {
            "messages": messages,
            "per_turn": {},
            "transactions_per_step": 1.0,
            "statements_per_step": 3.0,
            "data_statements_per_step": 1.0,
            "write_transactions_per_turn": 5,
            "step_write_ms": dist(write),
            "step_write_isolated_ms": dist(0.05),
            "turn_start_read_ms": dist(messages / 100),
            "engine_ms_per_step_without_db": dist(0.3),
        }

    report: dict[str, Any] = {
        "figures": {
            "9_agent_steps": {
                "tool_ms": 200.0,
                "turns": 20,
                "steps_per_turn": 3,
                "method": "in-process",
                "levels": [nine(1, 0.4, 1.004), nine(64, 0.9, 1.2)],
                "engine_only": [nine(1, 0.3, None), nine(64, 0.45, None)],
                "idle_penalty": {"warm_ms": 0.05, "after_idle_ms": 0.1, "ratio": 2.0},
            },
            "10_database_per_turn": {
                "steps_per_turn": 3,
                "final_answer_deltas": 500,
                "method": "in-process",
                "levels": [ten(10, 0.08), ten(2000, 0.09)],
                "step_write_ratio_last_vs_first": 1.125,
                "step_write_isolated_ratio_last_vs_first": 1.0,
                "engine_ratio_last_vs_first": 1.0,
                "same_work_at_every_length": True,
                "tokens": {
                    "few": {"deltas": 5, "write_transactions": 5},
                    "many": {"deltas": 500, "write_transactions": 5},
                    "per_token_writes": False,
                },
            },
        }
    }
    verdicts = _engine_verdicts(report["figures"])
    assert verdicts["9_tool_phase"] is False  # 1.2 x 1.2 at 64 > 1.15
    assert verdicts["9_overhead_warm"] is True
    assert verdicts["9_overhead_after_tools"] is False
    assert verdicts["10_transactions"] is True
    assert verdicts["10_statements"] is True
    assert verdicts["10_no_per_token_writes"] is True
    assert verdicts["10_flat_writes"] is True
    table = rows(report)
    labels = [row[0].split(".")[0] for row in table]
    assert labels[-6:] == ["9", "9b", "9c", "10", "10b", "10c"]
    detail = "\n".join(engine_markdown(report))
    assert "### 9." in detail
    assert "### 10." in detail
    assert "| 2,000 |" in detail
