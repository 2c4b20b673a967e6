"""Figure 9: an agent step with N parallel tools, measured in-process (``inprocess.py``).

Figure 9, an agent step with N parallel tools of 200 ms: each turn is K steps of N
calls (distinct arguments: identical calls would trip the loop detector) and a short
final answer. The sink time-stamps every event it receives. Per step:

- tool phase: first ``ToolStarted`` to last ``ToolFinished``, as a ratio to 200 ms;
  ``phase_engine_ms`` is the phase minus the slowest tool's own time (the engine's part:
  starting N tasks, validating arguments, collecting results);
- step overhead: the step (one "thinking" status to the next) minus its tool phase and
  its model time. It includes everything else the engine does per step: the budget
  check, message repair, the model call's machinery, the stream reader, the loop
  detector, and the step's commit to SQLite (``step_commit_ms``, also given apart);
- turn overhead per step: (turn wall time - tool phases - model time) / K, which also
  charges the turn's fixed costs to its steps: the turn's first write, the final answer's
  step and the final write.

The same is measured with a 0 ms tool (``engine_only``, warm: nothing idles between
steps), which is what compares with LangGraph's 0.65 ms per step (a number taken in a
tight loop); ``engine_ms_per_step`` there is the whole step but its model time, tool
phase included. ``idle_penalty`` calibrates the difference between the two: the same
fixed work, back to back and right after a wait as long as the tools'.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import orjson

from parley.bench.inprocess import (
    TOOL,
    Engine,
    StepTimes,
    dist,
    engine,
    pct,
    run_turn,
    script,
    to_ms,
)

# --- figure 9 -------------------------------------------------------------------------------


async def _level(
    eng: Engine, *, tools: int, tool_ms: float, turns: int, steps: int
) -> dict[str, Any]:
    for _ in range(2):  # warm up: first calls, code paths, the writer connection
        script(eng, steps=steps, tools=tools, tool_ms=0.0, tokens=5)
        await run_turn(eng, None, expect_tools=steps * tools)
    eng.recorder.reset()
    samples: list[StepTimes] = []
    commits: list[float] = []
    turn_overheads: list[float] = []
    for _ in range(turns):
        script(eng, steps=steps, tools=tools, tool_ms=tool_ms, tokens=5)
        eng.recorder.reset()
        times = await run_turn(eng, None, expect_tools=steps * tools)
        samples += times.steps
        commits += eng.recorder.write_seconds("step")
        spent = sum(s.phase for s in times.steps) + sum(times.model)
        turn_overheads.append((times.wall - spent) / steps)
    overhead = [s.interval - s.phase - s.model for s in samples]
    db = commits if len(commits) == len(samples) else [float("nan")] * len(samples)
    tool_seconds = tool_ms / 1000
    out: dict[str, Any] = {
        "tools": tools,
        "steps": len(samples),
        "tool_phase_ms": dist([s.phase for s in samples]),
        "slowest_tool_own_ms": dist([s.slowest_tool for s in samples]),
        "phase_engine_ms": dist([s.phase - s.slowest_tool for s in samples]),
        "step_overhead_ms": dist(overhead),
        "step_commit_ms": dist(commits),
        "step_overhead_without_commit_ms": dist([o - c for o, c in zip(overhead, db, strict=True)]),
        "turn_overhead_ms_per_step": dist(turn_overheads),
        "model_ms": dist([s.model for s in samples]),
    }
    if tool_seconds > 0:
        ratios = [s.phase / tool_seconds for s in samples]
        out["tool_phase_ratio"] = {
            "median": round(statistics.median(ratios), 4),
            "p90": round(pct(ratios, 90), 4),
            "max": round(max(ratios), 4),
        }
    else:
        out["engine_ms_per_step"] = dist([s.interval - s.model for s in samples])
    return out


def _fixed_work() -> None:
    """About 0.1 ms of plain Python: objects, JSON, arithmetic (the engine's kind of work)."""
    rows: list[dict[str, Any]] = [
        {"id": f"call_{i}", "name": TOOL, "n": i, "arguments": {"n": i}} for i in range(40)
    ]
    orjson.dumps(rows)
    total = 0
    for i in range(1500):
        total += i * i
    statistics.median([row["n"] for row in rows])


async def idle_penalty(pause: float, rounds: int = 15) -> dict[str, float]:
    """The same fixed work right after another vs after the process idled ``pause`` s.

    On this kind of machine (shared vCPUs) code that runs after an idle wait is slower:
    caches and branch predictors are cold, the core may be clocked down or descheduled.
    Every step of figure 9 starts after its tools' wait, so this calibrates it.
    """
    out: dict[str, float] = {}
    for label, wait in (("warm_ms", 0.0), ("after_idle_ms", pause)):
        samples = []
        for _ in range(rounds):
            await asyncio.sleep(wait)
            began = time.perf_counter()
            _fixed_work()
            samples.append(time.perf_counter() - began)
        out[label] = to_ms(statistics.median(samples))
    out["ratio"] = round(out["after_idle_ms"] / out["warm_ms"], 3)
    return out


async def agent_steps(
    tool_counts: tuple[int, ...] = (1, 4, 16, 64),
    *,
    turns: int = 20,
    steps: int = 3,
    tool_ms: float = 200.0,
) -> dict[str, Any]:
    """Figure 9: tool phase and engine overhead per step, N parallel tools of ``tool_ms``."""
    async with engine() as eng:
        levels = [
            await _level(eng, tools=n, tool_ms=tool_ms, turns=turns, steps=steps)
            for n in tool_counts
        ]
        engine_only = [
            await _level(eng, tools=n, tool_ms=0.0, turns=max(turns, 20), steps=steps)
            for n in tool_counts
        ]
        penalty = await idle_penalty(tool_ms / 1000, rounds=max(3, min(15, turns)))
    return {
        "tool_ms": tool_ms,
        "turns": turns,
        "steps_per_turn": steps,
        "method": (
            "in-process: ConversationService + Generation + AgentLoop + SQLite (WAL), "
            "scripted provider answering at once (its time subtracted), GC paced as in "
            "the server; no interceptors (the server's default audit log adds its "
            "rows: docs/performance.md); step overhead includes the step's SQLite "
            "commit (step_commit_ms, also given apart)"
        ),
        "levels": levels,
        "engine_only": engine_only,
        "idle_penalty": penalty,
    }
