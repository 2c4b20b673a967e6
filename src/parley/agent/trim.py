"""Step 1 of message repair: fit a flat history into the model's context window.

behaviours.md section 2, ``trim_to_context_window``, with Parley's choices where it is
silent:

- Nothing happens without a window (``context_tokens`` None), below
  ``min_messages_to_trim`` entries (tool results count as entries, as in octos), or
  when the estimate fits the budget ``window x context_fraction / estimate_safety``.
- The system messages before the first user or assistant message (the instructions)
  are always kept. The recent part keeps at least ``keep_recent_messages`` entries and
  grows, newest first, while the instructions and the recent part fit
  ``(1 - summary_fraction)`` of the budget. Only text, tool names, arguments and results
  are estimated (images and reasoning are not).
- The cut never falls inside a tool block (it moves back to the assistant message that
  made the calls) and never after the most recent user message: the current request
  and everything after it are always sent verbatim, even over budget, because the model
  cannot answer a request it does not see.
- Everything between the instructions and the cut becomes one system message starting
  with ``[Conversation summary]``, one line per message (``User: <first line, 200
  chars>``, ``Called <tool>``, ``Assistant: <first line>``, ``-> <tool>: ok|error -
  <first line, 100 chars>``, ``Note: <first line>``), capped at ``summary_fraction`` of
  the budget and then ending ``... (N earlier messages omitted)``. Step 2 turns it into a
  user message marked ``[System note]``. A summary already at that spot (repair run on
  its own output) is merged into the new one instead of being summarised again.
"""

from __future__ import annotations

from collections.abc import Sequence

from parley.agent.transcript import (
    MESSAGE_OVERHEAD_TOKENS,
    Entry,
    ToolResultEntry,
    calls_of,
    entry_tokens,
    is_summary,
    last_user_index,
    text_tokens,
)
from parley.messages import ImagePart, Message, text_message
from parley.settings import RepairSettings

SUMMARY_HEADER = "[Conversation summary] Earlier in this conversation:"
UNKNOWN_TOOL = "unknown_tool"


def trim_to_context_window(
    entries: Sequence[Entry], *, context_tokens: int | None, settings: RepairSettings
) -> list[Entry]:
    trimmed = trim_or_none(entries, context_tokens=context_tokens, settings=settings)
    return list(entries) if trimmed is None else trimmed


def trim_or_none(
    entries: Sequence[Entry], *, context_tokens: int | None, settings: RepairSettings
) -> list[Entry] | None:
    """The trimmed history, or None when step 1 leaves ``entries`` as they are."""
    if context_tokens is None or len(entries) < settings.min_messages_to_trim:
        return None
    budget = context_tokens * settings.context_fraction / settings.estimate_safety
    costs = [entry_tokens(e) for e in entries]
    if sum(costs) <= budget:
        return None
    prefix = 0
    while prefix < len(entries) and _is_head(entries[prefix]):
        prefix += 1
    pinned = entries[prefix] if prefix < len(entries) and is_summary(entries[prefix]) else None
    start = prefix + (pinned is not None)
    room = budget * (1 - settings.summary_fraction) - sum(costs[:prefix])
    split = _recent_start(entries, costs, start, room, settings.keep_recent_messages)
    if split <= start:
        return None
    note = _summary(entries, pinned, entries[start:split], budget * settings.summary_fraction)
    return [*entries[:prefix], note, *entries[split:]]


def _is_head(entry: Entry) -> bool:
    """The system messages before the first user or assistant message (and any results
    stranded among them, which step 3 moves or step 4 removes) are kept as they are."""
    if isinstance(entry, ToolResultEntry):
        return True
    return entry.role == "system" and not is_summary(entry)


def _recent_start(
    entries: Sequence[Entry], costs: list[float], start: int, room: float, keep: int
) -> int:
    """Where the verbatim recent part begins."""
    count = len(entries)
    split, used = count, 0.0
    for index in range(count - 1, start - 1, -1):
        if count - index > keep and used + costs[index] > room:
            break
        used += costs[index]
        split = index
    last_user = last_user_index(entries)
    if last_user is not None and last_user >= start:
        split = min(split, last_user)
    while start < split < count and isinstance(entries[split], ToolResultEntry):
        split -= 1
    return split


def _summary(
    entries: Sequence[Entry], pinned: Entry | None, old: Sequence[Entry], cap: float
) -> Message:
    names = {c.id: c.name for e in entries for c in calls_of(e)}
    blocks = [_pinned_lines(pinned)] if pinned is not None else []
    blocks.extend(_lines(e, names) for e in old)
    running = text_tokens(SUMMARY_HEADER) + MESSAGE_OVERHEAD_TOKENS
    body: list[str] = []
    for index, lines in enumerate(blocks):
        cost = sum(text_tokens(line + "\n") for line in lines)
        if running + cost > cap:
            body.append(f"... ({len(blocks) - index} earlier messages omitted)")
            break
        running += cost
        body.extend(lines)
    return text_message("system", "\n".join([SUMMARY_HEADER, *body]))


def _pinned_lines(summary: Entry) -> list[str]:
    """The lines of an earlier summary, without its header."""
    return summary.text.split("\n")[1:] if isinstance(summary, Message) else []


def _lines(entry: Entry, names: dict[str, str]) -> list[str]:
    if isinstance(entry, ToolResultEntry):
        name = entry.name or names.get(entry.call_id) or UNKNOWN_TOOL
        status = "error" if entry.is_error else "ok"
        return [f"-> {name}: {status} - {_first_line(entry.content, 100)}"]
    text = _first_line(entry.text, 200)
    if entry.role == "user":
        images = " [image]" * any(isinstance(p, ImagePart) for p in entry.parts)
        return [f"User: {text}{images}"] if text or images else []
    if entry.role == "system":
        return [f"Note: {text}"] if text else []
    lines = [f"Called {c.name or UNKNOWN_TOOL}" for c in entry.tool_calls]
    return [*lines, f"Assistant: {text}"] if text else lines


def _first_line(text: str, limit: int) -> str:
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else ""
    return line if len(line) <= limit else line[:limit] + "..."
