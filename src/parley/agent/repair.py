"""Message repair: make a history valid for the provider before every model call.

What belongs here: the repair pipeline (octos's, behaviours.md section 2), steps 2 to 7,
and the provider ordering rules it applies. Step 1 lives in ``agent/trim.py``, the flat
transcript it works on (a folded history cannot express the faults it repairs) in
``agent/transcript.py``. Only the outgoing request is repaired; stored messages are
never changed. ``repair_messages`` is the entry point for a folded history (the agent
loop); ``repair`` takes a flat one. The seven steps, in this order:

1. ``trim_to_context_window`` (``agent/trim.py``, which documents its choices).
2. ``normalize_system_messages``: the system messages before the first user or
   assistant message are merged into the first, joined by a blank line. A system
   message after the conversation started, or the step-1 summary, is conversation
   content: it becomes a user message ``[System note] <text>``. Empty notes are dropped.
3. ``repair_message_order``: each result belongs to the nearest assistant message before
   it that made a call with its id, or, when none did, the first such one after it. The
   results move to sit right after their assistant message, in call order, one per id,
   the last wins. An id called k times by one message (a model that reuses ids) keeps
   its last k results, answering those calls in order. Results no call claims stay
   where they are for step 4. Then the provider's ordering rules: with
   ``first_message_user`` (Anthropic, local chat templates) a history whose first
   message with content is not a user message gets the user message
   ``[conversation continues]`` before it: the one user message repair adds besides
   the step-1 summary. It claims nothing the history does not show.
4. ``repair_tool_pairs``: results not directly after an assistant message with a call of
   their id are removed. Unanswered calls are left to step 5 (the model then sees that
   a result was lost, and the history keeps its shape, which "[Called tools]" text
   does not: models copy it). A call loses its place only when no provider can take
   it: its tool name is outside ``^[A-Za-z0-9_-]{1,64}$``, which every provider demands
   of tool names, so no offered tool can have it (a hallucinated call). Its result goes
   with it, and an assistant message left without text starts
   ``[Called tools: a, b]``.
5. ``synthesize_missing_results``: an unanswered call gets the error result
   ``[Tool '<name>' result was lost - no output available]``.
6. ``truncate_old_tool_results``: results before the most recent user message (notes
   and the placeholder do not count) longer than ``old_tool_result_chars`` are cut to
   that length plus ``"\\n\\n[... truncated for brevity]"``. The current turn is never
   cut.
7. ``normalize_tool_call_ids``: characters outside ``[A-Za-z0-9_-]`` become ``_``, a
   ``call_`` prefix is added when missing, an id longer than the provider allows is
   shortened with a hash of the original, and ids are made unique over the whole
   history (``_2``, ``_3`` ...). Calls and their results are renamed together.

Guarantees: every call is answered exactly once, right after it and before the next
message; user messages are never dropped or reordered (only step 1 replaces old ones
with its summary, under budget pressure, and never the most recent); repair is
idempotent. Steps 2 to 7 change less than step 1 assumed (a synthesised result adds
tokens, a removed orphan takes an entry away), so when the repaired history would be
trimmed again, the pipeline is run again on it until step 1 leaves it alone; every
such round shortens the history, and it is rare.
"""

from __future__ import annotations

import hashlib
import math
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from parley.agent.transcript import (
    CONTINUES,
    SYSTEM_NOTE,
    Entry,
    ToolResultEntry,
    block_end,
    calls_of,
    entry_tokens,
    flatten,
    fold,
    has_content,
    is_summary,
    last_user_index,
    pair_results,
)
from parley.agent.trim import UNKNOWN_TOOL, trim_or_none, trim_to_context_window
from parley.messages import Message, TextPart, ToolCallPart, ToolResult, text_message
from parley.settings import RepairSettings

__all__ = [
    "ANTHROPIC_RULES",
    "OPENAI_RULES",
    "ProviderRules",
    "estimate_tokens",
    "lost_result",
    "normalize_system_messages",
    "normalize_tool_call_ids",
    "repair",
    "repair_message_order",
    "repair_messages",
    "repair_tool_pairs",
    "rules_for",
    "safe_tool_id",
    "synthesize_missing_results",
    "synthesize_missing_tool_results",
    "trim_to_context_window",
    "truncate_old_tool_results",
]

TRUNCATED = "\n\n[... truncated for brevity]"
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
ID_PREFIX = "call_"
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class ProviderRules:
    """What one provider's wire demands beyond the rules all of them share (each call
    answered once, right after it; no stray results; ids of ``[A-Za-z0-9_-]``)."""

    name: str
    first_message_user: bool
    """The first message after the system prompt must be a user message with content."""
    max_tool_id_length: int


OPENAI_RULES = ProviderRules("openai", first_message_user=False, max_tool_id_length=40)
"""Chat Completions has answered 400 "maximum length 40" for longer tool-call ids."""

ANTHROPIC_RULES = ProviderRules("anthropic", first_message_user=True, max_tool_id_length=64)


GEMINI_RULES = ProviderRules("gemini", first_message_user=True, max_tool_id_length=64)
"""Gemini's contents begin with a user turn."""


def rules_for(kind: str) -> ProviderRules:
    """The rules for a provider kind; local chat templates want a user message first."""
    if kind == "gemini":
        return GEMINI_RULES
    return ANTHROPIC_RULES if kind in ("anthropic", "local") else OPENAI_RULES


def estimate_tokens(messages: Iterable[Message]) -> int:
    """The step-1 estimate of a folded history, rounded up."""
    return math.ceil(sum(entry_tokens(e) for e in flatten(messages)))


def repair_messages(
    messages: Iterable[Message],
    *,
    context_tokens: int | None,
    settings: RepairSettings,
    rules: ProviderRules,
) -> list[Message]:
    """Repair a folded history: ``fold(repair(flatten(messages)))``."""
    return fold(
        repair(flatten(messages), context_tokens=context_tokens, settings=settings, rules=rules)
    )


def repair(
    entries: Iterable[Entry],
    *,
    context_tokens: int | None,
    settings: RepairSettings,
    rules: ProviderRules,
) -> list[Entry]:
    """Run the seven steps in order, again while step 1 would still change the result."""
    current = list(entries)
    for _ in range(len(current) + 1):
        current = trim_to_context_window(current, context_tokens=context_tokens, settings=settings)
        current = normalize_system_messages(current)
        current = repair_message_order(current, rules=rules)
        current = repair_tool_pairs(current)
        current = synthesize_missing_results(current)
        current = truncate_old_tool_results(current, max_chars=settings.old_tool_result_chars)
        current = normalize_tool_call_ids(current, rules=rules)
        if trim_or_none(current, context_tokens=context_tokens, settings=settings) is None:
            break
    return current


# --- step 2 ---------------------------------------------------------------------------


def normalize_system_messages(entries: Sequence[Entry]) -> list[Entry]:
    """Step 2: one system message first; later ones become ``[System note]`` users."""
    instructions: list[Message] = []
    rest: list[Entry] = []
    started = False  # by a user or assistant message (results may still move)
    for entry in entries:
        if not isinstance(entry, Message) or entry.role != "system":
            started = started or isinstance(entry, Message)
            rest.append(entry)
        elif started or is_summary(entry):
            started = True
            if entry.text.strip():
                rest.append(text_message("user", f"{SYSTEM_NOTE} {entry.text}"))
        else:
            instructions.append(entry)
    if len(instructions) > 1:
        text = "\n\n".join(m.text for m in instructions if m.text.strip())
        instructions = [Message("system", (TextPart(text),), instructions[0].name)]
    return [*instructions, *rest]


# --- step 3 ---------------------------------------------------------------------------


def repair_message_order(
    entries: Sequence[Entry], *, rules: ProviderRules = OPENAI_RULES
) -> list[Entry]:
    """Step 3: results right after their call, in call order; then the provider's rules."""
    callers: defaultdict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(entries):
        for call_id in dict.fromkeys(c.id for c in calls_of(entry)):
            callers[call_id].append(index)
    gathered: defaultdict[int, list[ToolResultEntry]] = defaultdict(list)
    moved: set[int] = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, ToolResultEntry) and entry.call_id in callers:
            owners = callers[entry.call_id]
            before = bisect_left(owners, index)
            gathered[owners[before - 1] if before else owners[0]].append(entry)
            moved.add(index)
    out: list[Entry] = []
    for index, entry in enumerate(entries):
        if index in moved:
            continue
        out.append(entry)
        results = gathered.get(index)
        if results:
            out.extend(results[m] for m in pair_results(calls_of(entry), results) if m is not None)
    return _user_first(out) if rules.first_message_user else out


def _user_first(entries: list[Entry]) -> list[Entry]:
    """Put ``[conversation continues]`` before a history's first message with content
    unless that is a user message (or at the end, when no message has content)."""
    for index, entry in enumerate(entries):
        if isinstance(entry, Message) and entry.role != "system" and has_content(entry):
            if entry.role == "user":
                return entries
            return [*entries[:index], text_message("user", CONTINUES), *entries[index:]]
    return [*entries, text_message("user", CONTINUES)] if entries else entries


# --- step 4 ---------------------------------------------------------------------------


def repair_tool_pairs(entries: Sequence[Entry]) -> list[Entry]:
    """Step 4: stray results go, and so do calls whose tool name no provider takes."""
    out: list[Entry] = []
    for entry, calls, block in _blocks(entries):
        if not isinstance(entry, Message):
            continue  # a result no call owns
        if calls:
            entry, calls = _without_unsendable_calls(entry)
        out.append(entry)
        out.extend(block[m] for m in pair_results(calls, block) if m is not None)
    return out


def _without_unsendable_calls(message: Message) -> tuple[Message, tuple[ToolCallPart, ...]]:
    lost = [c for c in message.tool_calls if not TOOL_NAME.fullmatch(c.name)]
    if not lost:
        return message, message.tool_calls
    gone = {id(c) for c in lost}
    parts = [p for p in message.parts if id(p) not in gone]
    if not message.text.strip():
        names = ", ".join(c.name or UNKNOWN_TOOL for c in lost)
        parts.insert(0, TextPart(f"[Called tools: {names}]"))
    message = replace(message, parts=tuple(parts))
    return message, message.tool_calls


def _blocks(
    entries: Sequence[Entry],
) -> Iterator[tuple[Entry, tuple[ToolCallPart, ...], list[ToolResultEntry]]]:
    """Each entry with its calls and the run of results right after it; an entry
    without calls comes alone (results after it come one by one: they are stray)."""
    index = 0
    while index < len(entries):
        entry = entries[index]
        calls = calls_of(entry)
        if not calls:
            yield entry, (), []
            index += 1
            continue
        end = block_end(entries, index)
        yield entry, calls, [e for e in entries[index + 1 : end] if isinstance(e, ToolResultEntry)]
        index = end


# --- step 5 ---------------------------------------------------------------------------


def lost_result(name: str) -> ToolResult:
    return ToolResult(f"[Tool '{name}' result was lost - no output available]", is_error=True)


def synthesize_missing_results(entries: Sequence[Entry]) -> list[Entry]:
    """Step 5 on a flat history: every call's result block is completed, in call order."""
    out: list[Entry] = []
    for entry, calls, block in _blocks(entries):
        out.append(entry)
        if not calls:
            continue
        matched = pair_results(calls, block)
        for call, found in zip(calls, matched, strict=True):
            if found is not None:
                out.append(block[found])
            else:
                lost = lost_result(call.name)
                out.append(ToolResultEntry(call.id, lost.content, lost.is_error, call.name))
        answering = set(matched)
        out.extend(r for i, r in enumerate(block) if i not in answering)
    return out


def synthesize_missing_tool_results(messages: Iterable[Message]) -> list[Message]:
    """Step 5 on a folded history: every unanswered call gets the lost-result error."""
    repaired: list[Message] = []
    for message in messages:
        if any(isinstance(p, ToolCallPart) and p.result is None for p in message.parts):
            message = Message(
                message.role,
                tuple(
                    p.answered(lost_result(p.name))
                    if isinstance(p, ToolCallPart) and p.result is None
                    else p
                    for p in message.parts
                ),
                message.name,
            )
        repaired.append(message)
    return repaired


# --- step 6 ---------------------------------------------------------------------------


def truncate_old_tool_results(entries: Sequence[Entry], *, max_chars: int = 800) -> list[Entry]:
    """Step 6: long results of earlier turns are cut."""
    boundary = last_user_index(entries)
    if boundary is None:
        return list(entries)
    return [
        replace(e, content=e.content[:max_chars] + TRUNCATED)
        if index < boundary and isinstance(e, ToolResultEntry) and len(e.content) > max_chars
        else e
        for index, e in enumerate(entries)
    ]


# --- step 7 ---------------------------------------------------------------------------


def normalize_tool_call_ids(
    entries: Sequence[Entry], *, rules: ProviderRules = OPENAI_RULES
) -> list[Entry]:
    """Step 7: provider-safe ids, unique over the history, on calls and results alike."""
    limit = rules.max_tool_id_length
    used: set[str] = set()
    tried: dict[str, int] = {}
    out: list[Entry] = []
    for entry, calls, block in _blocks(entries):
        if isinstance(entry, ToolResultEntry):  # a stray result: made safe, not unique
            out.append(replace(entry, call_id=safe_tool_id(entry.call_id, limit)))
            continue
        if not calls:
            out.append(entry)
            continue
        new_ids = [_unique(safe_tool_id(c.id, limit), used, limit, tried) for c in calls]
        if new_ids == [c.id for c in calls] and all(
            r.call_id == safe_tool_id(r.call_id, limit) for r in block
        ):
            out.append(entry)  # the common case: nothing to rename
            out.extend(block)
            continue
        renamed = iter(new_ids)
        parts = tuple(
            replace(p, id=next(renamed)) if isinstance(p, ToolCallPart) else p for p in entry.parts
        )
        out.append(replace(entry, parts=parts))
        answers = {m: new_ids[k] for k, m in enumerate(pair_results(calls, block)) if m is not None}
        out.extend(
            replace(r, call_id=answers.get(i) or safe_tool_id(r.call_id, limit))
            for i, r in enumerate(block)
        )
    return out


def safe_tool_id(raw: str, limit: int) -> str:
    """``raw`` in the form every provider takes. An id already in that form (``call_``
    prefix, safe characters, within ``limit``) is returned unchanged."""
    safe = _UNSAFE_ID_CHARS.sub("_", raw)
    if not safe.startswith(ID_PREFIX):
        safe = ID_PREFIX + safe
    if len(safe) > limit:
        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[: limit - len(digest) - 1]}_{digest}"
    return safe


def _unique(candidate: str, used: set[str], limit: int, tried: dict[str, int]) -> str:
    """``candidate``, or the first of ``candidate_2``, ``_3`` ... not ``used``. ``tried``
    remembers where each candidate's numbers stopped (every one below was taken, and
    ``used`` only grows): 1,024 calls sharing an id cost 1,024 tries, not half a million."""
    unique, number = candidate, tried.get(candidate, 2)
    while unique in used:
        suffix = f"_{number}"
        unique = candidate[: limit - len(suffix)] + suffix
        number += 1
    tried[candidate] = number
    used.add(unique)
    return unique
