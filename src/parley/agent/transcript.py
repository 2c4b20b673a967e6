"""The flat transcript: a history in the shape the wire sees, for message repair.

Parley's neutral messages are *folded*: a tool call holds its own result, so a folded
history cannot even express an orphan result, two results for one call or a result in
the wrong place. Repair therefore works on the *flat* form, the shape of the OpenAI
wire: system, user and assistant ``Message``s (an assistant's ``ToolCallPart``s carry
``result=None``) and ``ToolResultEntry`` items that name the call they answer.

What belongs here: the flat types, ``flatten`` and ``fold`` between the two forms, and
the small vocabulary the repair steps share (tool blocks, result pairing, the token
estimate). The steps themselves live in ``agent/repair.py`` and ``agent/trim.py``.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from parley.messages import (
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResult,
)


@dataclass(frozen=True, slots=True)
class ToolResultEntry:
    """A tool result in flat form: what an OpenAI ``role: tool`` message carries."""

    call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    started_at: float | None = None
    """Kept from the folded result, so repair never drops what it does not change."""
    seconds: float | None = None


Entry = Message | ToolResultEntry


def flatten(messages: Iterable[Message]) -> list[Entry]:
    """Folded -> flat: each assistant message is followed by the results of its answered
    calls, in call order; unanswered calls stay unanswered."""
    out: list[Entry] = []
    for message in messages:
        calls = message.tool_calls if message.role == "assistant" else ()
        if not calls:
            out.append(message)
            continue
        parts = tuple(p.answered(None) if isinstance(p, ToolCallPart) else p for p in message.parts)
        out.append(replace(message, parts=parts))
        out.extend(
            ToolResultEntry(
                c.id,
                c.result.content,
                c.result.is_error,
                c.name,
                c.result.started_at,
                c.result.seconds,
            )
            for c in calls
            if c.result is not None
        )
    return out


def fold(entries: Iterable[Entry]) -> list[Message]:
    """Flat -> folded: each result is attached to the first unanswered call with its id
    in the assistant message it directly follows.

    Meant for repaired transcripts; a result that does not directly follow an assistant
    message with a matching unanswered call raises ``ValueError``.
    """
    out: list[Message] = []
    owner: int | None = None  # index in ``out`` of the assistant whose results follow
    waiting: dict[str, deque[ToolResultEntry]] = {}  # its results so far, by call id

    def attach() -> None:
        if owner is None or not waiting:
            return
        message = out[owner]
        parts = list(message.parts)
        for index, part in enumerate(parts):
            if isinstance(part, ToolCallPart) and part.result is None:
                queue = waiting.get(part.id)
                if queue:
                    entry = queue.popleft()
                    parts[index] = part.answered(
                        ToolResult(entry.content, entry.is_error, entry.started_at, entry.seconds)
                    )
        for queue in waiting.values():
            if queue:
                raise ValueError(f"tool result {queue[0].call_id!r} matches no unanswered call")
        out[owner] = replace(message, parts=tuple(parts))
        waiting.clear()

    for entry in entries:
        if isinstance(entry, Message):
            attach()
            out.append(entry)
            owner = len(out) - 1 if entry.role == "assistant" else None
            continue
        if owner is None:
            raise ValueError(f"tool result {entry.call_id!r} does not follow an assistant message")
        waiting.setdefault(entry.call_id, deque()).append(entry)
    attach()
    return out


# --- shared vocabulary of the repair steps -------------------------------------------


def calls_of(entry: Entry) -> tuple[ToolCallPart, ...]:
    """The tool calls of an assistant message; nothing for any other entry."""
    if isinstance(entry, Message) and entry.role == "assistant":
        return entry.tool_calls
    return ()


def block_end(entries: Sequence[Entry], index: int) -> int:
    """The end of the run of tool results that directly follows ``entries[index]``."""
    end = index + 1
    while end < len(entries) and isinstance(entries[end], ToolResultEntry):
        end += 1
    return end


def pair_results(
    calls: Sequence[ToolCallPart], results: Sequence[ToolResultEntry]
) -> list[int | None]:
    """For each call, the index in ``results`` of the result that answers it, or None.

    Results are matched by id. An id called k times (once, normally) keeps the last k of
    its results, which answer its calls in order: "one per id, the last wins".
    """
    if (
        len(calls) == len(results)
        and all(c.id == r.call_id for c, r in zip(calls, results, strict=True))
        and len({c.id for c in calls}) == len(calls)
    ):
        return list(range(len(calls)))  # the common case: one result per call, in order
    wanted = Counter(c.id for c in calls)
    by_id: defaultdict[str, list[int]] = defaultdict(list)
    for index, result in enumerate(results):
        if result.call_id in wanted:
            by_id[result.call_id].append(index)
    kept = {call_id: found[-wanted[call_id] :] for call_id, found in by_id.items()}
    used: Counter[str] = Counter()
    matched: list[int | None] = []
    for call in calls:
        found = kept.get(call.id, [])
        position = used[call.id]
        matched.append(found[position] if position < len(found) else None)
        used[call.id] += 1
    return matched


def has_content(message: Message) -> bool:
    """Whether a provider is sent anything for this message (Anthropic drops empty and
    whitespace-only text, and unsigned reasoning)."""
    for part in message.parts:
        if isinstance(part, TextPart) and part.text.strip():
            return True
        if isinstance(part, ImagePart) and message.role == "user":
            return True
        if message.role == "assistant" and (
            isinstance(part, ToolCallPart) or (isinstance(part, ReasoningPart) and part.signature)
        ):
            return True
    return False


def text_tokens(text: str) -> float:
    """ASCII characters / 4 + other characters / 1.5 (behaviours.md section 2)."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars / 4 + (len(text) - ascii_chars) / 1.5


MESSAGE_OVERHEAD_TOKENS = 4


def entry_tokens(entry: Entry) -> float:
    """The estimate for one entry: its text, its calls' names and arguments, or its
    result, plus 4 per message. Images and reasoning are not counted."""
    if isinstance(entry, ToolResultEntry):
        text = entry.content
    else:
        text = "".join(
            p.text if isinstance(p, TextPart) else p.name + p.arguments
            for p in entry.parts
            if isinstance(p, TextPart | ToolCallPart)
        )
    return text_tokens(text) + MESSAGE_OVERHEAD_TOKENS


SYSTEM_NOTE = "[System note]"
"""Marks a user message that was a system message carrying conversation content."""

SUMMARY_MARKER = "[Conversation summary]"
"""Starts the note that stands for the messages trimmed out of the context window."""


def is_note(entry: Entry) -> bool:
    return (
        isinstance(entry, Message) and entry.role == "user" and entry.text.startswith(SYSTEM_NOTE)
    )


def is_summary(entry: Entry) -> bool:
    """The trim summary: a system message before step 2, a user note after it."""
    if not isinstance(entry, Message):
        return False
    if entry.role == "system":
        return entry.text.startswith(SUMMARY_MARKER)
    return entry.role == "user" and entry.text.startswith(f"{SYSTEM_NOTE} {SUMMARY_MARKER}")


CONTINUES = "[conversation continues]"
"""The user message repair puts first for providers that want a user message first."""


def last_user_index(entries: Sequence[Entry]) -> int | None:
    """The most recent user message that repair did not make (a system note or the
    ``[conversation continues]`` placeholder): the current request."""
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if (
            isinstance(entry, Message)
            and entry.role == "user"
            and not is_note(entry)
            and entry.text != CONTINUES
        ):
            return index
    return None
