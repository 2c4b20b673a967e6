"""Figure 10: database work per turn as a conversation grows, measured in-process
(``inprocess.py``).

Figure 10, database work per turn as a conversation grows: each measured turn (K tool
steps with a 0 ms tool, then a final answer) continues a conversation of exactly L
messages of its own, written through ``ConversationStore.start_turn`` (the store's own
API). What reaches SQLite is read from SQLite
itself (``sqlite3`` trace callback on every connection: each executed statement, BEGIN
and COMMIT included; an ``executemany`` counts once per row), labelled by the store call
that ran it: the turn's start, each step's commit, timed checkpoints, the final write, and
reads (the turn-start read of the branch, on the reader threads). The final answer is
streamed in many deltas to show writes do not follow tokens: once instantly (few vs
many tokens: the same writes), once paced over about a second and a half (timed
checkpoints follow the clock, at most one per ``chat.checkpoint_seconds``).
"""

from __future__ import annotations

import time
from typing import Any

from parley.bench.inprocess import (
    OWNER,
    TOOL,
    Engine,
    Recorder,
    dist,
    engine,
    run_turn,
    script,
)
from parley.events import (
    Status,
    TextDelta,
)
from parley.ids import new_id
from parley.messages import Part, TextPart, ToolCallPart, ToolResult
from parley.store.repository import ConversationStore, NewMessage, NewTurn

# --- figure 10 ------------------------------------------------------------------------------


def _history(length: int) -> list[NewMessage]:
    """A plausible conversation: user questions and assistant answers, every fifth
    answer with a tool call and its result; it ends with an assistant message."""
    rows: list[NewMessage] = []
    for index in range(length):
        if index % 2 == 0:
            parts: tuple[Part, ...] = (TextPart(f"Question {index}: " + "lorem ipsum " * 15),)
            rows.append(NewMessage(new_id("msg"), "user", parts))
            continue
        text = TextPart(f"Answer {index}: " + "dolor sit amet " * 50)
        if index % 10 == 1:
            call = ToolCallPart(
                f"call_h{index}", TOOL, f'{{"ms": 0, "n": {index}}}', ToolResult("x" * 500)
            )
            parts = (call, text)
        else:
            parts = (text,)
        rows.append(NewMessage(new_id("msg"), "assistant", parts, model="agent"))
    return rows


def _per_label(rec: Recorder) -> dict[str, dict[str, int]]:
    labels = ("read", "start", "step", "timed", "final", "other")
    return {label: rec.counts(label) for label in labels}


async def _history_level(
    eng: Engine, *, length: int, turns: int, steps: int, tokens: int
) -> dict[str, Any]:
    # Every turn continues a conversation of exactly ``length`` messages of its own.
    conversations = [new_id("conv") for _ in range(turns + 1)]
    for conversation_id in conversations:
        await eng.store.start_turn(NewTurn(OWNER, conversation_id, _history(length), create=True))
    script(eng, steps=steps, tools=1, tool_ms=0.0, tokens=5)  # warm up
    await run_turn(eng, conversations.pop(), expect_tools=steps)
    reads: list[float] = []
    commits: list[float] = []
    engine_steps: list[float] = []
    per_turn: list[dict[str, dict[str, int]]] = []
    for conversation_id in conversations:
        script(eng, steps=steps, tools=1, tool_ms=0.0, tokens=tokens)
        eng.recorder.reset()
        times = await run_turn(eng, conversation_id, expect_tools=steps)
        step_commits = eng.recorder.write_seconds("step")
        reads.append(times.prepare)
        commits += step_commits
        engine_steps += [
            s.interval - s.model - c for s, c in zip(times.steps, step_commits, strict=True)
        ]
        per_turn.append(_per_label(eng.recorder))
    isolated = await _isolated_writes(eng, conversations[0], steps=steps, rounds=max(30, turns))
    if any(p != per_turn[0] for p in per_turn):
        raise RuntimeError(f"database work differed between turns: {per_turn}")
    counts = per_turn[0]
    step = counts["step"]
    return {
        "messages": length,
        "turns": turns,
        "steps_per_turn": steps,
        "per_turn": counts,
        "transactions_per_step": step["transactions"] / steps,
        "statements_per_step": step["statements"] / steps,
        "data_statements_per_step": (step["statements"] - step["control"]) / steps,
        "write_transactions_per_turn": sum(
            counts[k]["transactions"] for k in ("start", "step", "timed", "final")
        ),
        "step_write_ms": dist(commits),
        "step_write_isolated_ms": dist(isolated),
        "turn_start_read_ms": dist(reads),
        "engine_ms_per_step_without_db": dist(engine_steps),
    }


async def _isolated_writes(
    eng: Engine, conversation_id: str, *, steps: int, rounds: int
) -> list[float]:
    """The step write alone, back to back: a streaming reply in this conversation gets
    ``rounds`` checkpoints of a ``steps``-step turn's parts (what ``_commit_step``
    writes), with nothing else running in between."""
    reply = new_id("msg")
    question = NewMessage(new_id("msg"), "user", (TextPart("Please do the work."),))
    await eng.store.start_turn(
        NewTurn(
            OWNER,
            conversation_id,
            [question, NewMessage(reply, "assistant", (), status="streaming", model="agent")],
        )
    )
    parts = tuple(
        ToolCallPart(f"call_i{n}", TOOL, f'{{"ms": 0, "n": {n}}}', ToolResult(f"done {n}"))
        for n in range(steps)
    )
    seconds: list[float] = []
    for _ in range(rounds):
        began = time.perf_counter()
        await ConversationStore.checkpoint(eng.store, reply, parts)  # uninstrumented
        seconds.append(time.perf_counter() - began)
    await ConversationStore.finish(
        eng.store,
        reply,
        parts=parts,
        status="complete",
        model="agent",
        usage=None,
        finish_reason="stop",
    )
    return seconds


async def _tokens_check(
    eng: Engine, *, steps: int, tokens: int, paced_seconds: float
) -> dict[str, Any]:
    """Writes per turn with a final answer of few vs many deltas, then paced."""
    conversation_id = new_id("conv")
    await eng.store.start_turn(NewTurn(OWNER, conversation_id, _history(10), create=True))
    out: dict[str, Any] = {}
    for label, count, pace in (
        ("few", 5, 0.0),
        ("many", tokens, 0.0),
        ("many_paced", tokens, paced_seconds / tokens),
    ):
        if pace and paced_seconds <= 0:
            continue
        script(eng, steps=steps, tools=1, tool_ms=0.0, tokens=count, pace=pace)
        eng.recorder.reset()
        times = await run_turn(eng, conversation_id, expect_tools=steps)
        counts = _per_label(eng.recorder)
        deltas = sum(
            1 for _, e in times.events if isinstance(e, TextDelta) and e.text.startswith(" w")
        )
        thinking = [t for t, e in times.events if isinstance(e, Status) and e.name == "thinking"]
        streaming = times.events[-1][0] - thinking[-1] if thinking else 0.0
        out[label] = {
            "deltas": deltas,
            "final_answer_seconds": round(streaming, 3),
            "write_transactions": sum(
                counts[k]["transactions"] for k in ("start", "step", "timed", "final")
            ),
            "timed_checkpoints": counts["timed"]["transactions"],
            "write_statements": sum(
                counts[k]["statements"] for k in ("start", "step", "timed", "final")
            ),
        }
    checkpoint_seconds = eng.settings.chat.checkpoint_seconds
    paced = out.get("many_paced")
    out["checkpoint_seconds"] = checkpoint_seconds
    out["per_token_writes"] = out["many"]["write_transactions"] != out["few"]["write_transactions"]
    if paced is not None:
        allowed = int(paced["final_answer_seconds"] // checkpoint_seconds) + 1
        out["paced_checkpoints_allowed"] = allowed
        out["per_token_writes"] = out["per_token_writes"] or paced["timed_checkpoints"] > allowed
    return out


async def database_per_turn(
    histories: tuple[int, ...] = (10, 100, 500, 2000),
    *,
    turns: int = 10,
    steps: int = 3,
    tokens: int = 500,
    paced_seconds: float = 1.5,
) -> dict[str, Any]:
    """Figure 10: transactions, statements and write time per step as history grows."""
    async with engine() as eng:
        levels = [
            await _history_level(eng, length=n, turns=turns, steps=steps, tokens=tokens)
            for n in histories
        ]
        tokens_check = await _tokens_check(
            eng, steps=steps, tokens=tokens, paced_seconds=paced_seconds
        )
    first, last = levels[0], levels[-1]

    def ratio(key: str) -> float:
        base = first[key]["median"]
        return round(last[key]["median"] / base, 3) if base else float("nan")

    return {
        "steps_per_turn": steps,
        "final_answer_deltas": tokens,
        "method": (
            "in-process, real SQLite (WAL); statements as SQLite executed them (sqlite3 "
            "trace callback; BEGIN/COMMIT included, executemany once per row), labelled by "
            "the store call; write times around the whole store call (JSON encoding "
            "included); turn-start read = ConversationService.prepare (loads the branch)"
        ),
        "levels": levels,
        "step_write_ratio_last_vs_first": ratio("step_write_ms"),
        "step_write_isolated_ratio_last_vs_first": ratio("step_write_isolated_ms"),
        "turn_start_read_ratio_last_vs_first": ratio("turn_start_read_ms"),
        "engine_ratio_last_vs_first": ratio("engine_ms_per_step_without_db"),
        "same_work_at_every_length": all(
            level["per_turn"] == first["per_turn"] for level in levels
        ),
        "tokens": tokens_check,
    }
