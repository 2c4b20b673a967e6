"""What every input transformer sees and shares: the request context, the report it
writes to, the protocol it implements, and small helpers for editing an outgoing list.

A transformer never mutates the list or the messages it is given: it returns a new list,
keeps every message it did not change as the very same object, and puts a changed
message where the original was. The pipeline (``input.py``) relies on that to keep
``TransformContext.message_times`` aligned with the list each transformer receives.

What does not belong here: the transformers themselves and the pipeline (``input.py``
and the modules it names), reading documents (``parley.documents``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from parley.messages import Message, Part, TextPart

log = logging.getLogger(__name__)

CAPABILITY_VISION = "vision"
"""In ``TransformContext.capabilities``: the model reads images itself (no OCR needed)."""
CAPABILITY_TOOLS = "tools"
"""In ``TransformContext.capabilities``: the model can call tools."""


@dataclass(frozen=True, slots=True)
class Snippet:
    """One retrieved piece of knowledge or memory, as a retriever returns it."""

    id: str
    title: str
    text: str
    score: float | None = None
    page: int | None = None
    section: str | None = None
    document_id: str | None = None
    kb_id: str | None = None


@dataclass(frozen=True, slots=True)
class UsedSnippet:
    """A snippet that went into the request: its 1-based ``rank`` (the source number the
    model sees) and the ``excerpt`` actually sent (the text, possibly cut to fit)."""

    rank: int
    snippet: Snippet
    excerpt: str


@dataclass(slots=True)
class TransformReport:
    """What the transformers of one request tell the caller, filled in as they run."""

    notes: list[str] = field(default_factory=list)
    """Short human-readable statements of what could not be done (an unreadable file,
    images without OCR, a failed template), for logs, status and capability notes."""
    used_snippets: list[UsedSnippet] = field(default_factory=list)
    """Knowledge sent to the model: save these as the reply's citations."""
    used_memories: list[UsedSnippet] = field(default_factory=list)
    knowledge_searched: bool = False
    """Knowledge retrieval ran for this request (with ``used_snippets`` empty: nothing
    matched, and the model was told to say so)."""
    lorebook_entries: list[str] = field(default_factory=list)
    """Names of the lorebook entries that were injected."""

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


@dataclass(frozen=True, slots=True)
class TransformContext:
    """The request a message list is being prepared for. Build one per request; the
    pipeline fills in ``original`` and ``report`` and realigns ``message_times``."""

    now: datetime
    """The current time, timezone-aware."""
    timezone: str = "UTC"
    """IANA name of the user's timezone; times shown to the model are in it."""
    model: str = ""
    assistant_name: str | None = None
    user_name: str | None = None
    """The user's name or nickname, if known."""
    conversation_id: str | None = None
    message_times: tuple[datetime | None, ...] = ()
    """Each message's own ``created_at``, aligned with the messages (None: not saved
    yet, i.e. being sent now). Empty: all unknown."""
    workspace: Path | None = None
    """The conversation's workspace folder, when it has one."""
    locale: str = "en-US"
    capabilities: frozenset[str] = frozenset()
    """What the model can do: ``CAPABILITY_VISION``, ``CAPABILITY_TOOLS``, ..."""
    owner: str = ""
    """Whose request it is: retrievers search only this owner's data."""
    knowledge_bases: tuple[str, ...] = ()
    """The knowledge bases a service-bound retriever searches for this request."""
    memory_scope: str | None = None
    """Whose memories a service-bound retriever searches (an assistant id, "global")."""
    wants_knowledge: bool = True
    """False: the request has no knowledge to retrieve; the knowledge step does nothing."""
    wants_memory: bool = True
    """False: memories are not retrieved for this request."""
    original: tuple[Message, ...] = ()
    """The messages as the pipeline received them, before any transformer."""
    report: TransformReport = field(default_factory=TransformReport)

    def __post_init__(self) -> None:
        if self.now.tzinfo is None or self.now.utcoffset() is None:
            raise ValueError("TransformContext.now must be timezone-aware")

    @property
    def zone(self) -> tzinfo:
        """The user's timezone (the one of ``now`` when the name is unknown)."""
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            zone = self.now.tzinfo
            assert zone is not None
            return zone

    def local(self, when: datetime | None) -> datetime:
        """``when`` (``now`` when None) in the user's timezone; naive times count as UTC."""
        moment = self.now if when is None else when
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=ZoneInfo("UTC"))
        return moment.astimezone(self.zone)

    def time_of(self, index: int) -> datetime | None:
        """The ``created_at`` of message ``index`` (None when unknown or unsaved)."""
        if 0 <= index < len(self.message_times):
            return self.message_times[index]
        return None

    @property
    def query(self) -> str:
        """The text of the last user message as the client sent it (retrieval queries)."""
        source = self.original
        index = last_user_index(source)
        return "" if index is None else source[index].text.strip()


class InputTransformer(Protocol):
    """One step of the outgoing-request pipeline. It returns a new list and leaves the
    one it is given, and every message in it, untouched."""

    name: str

    async def transform(
        self, messages: list[Message], context: TransformContext
    ) -> list[Message]: ...


# --- helpers for editing an outgoing list ----------------------------------------------


def last_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return None


def with_parts(message: Message, parts: Sequence[Part]) -> Message:
    return Message(role=message.role, parts=tuple(parts), name=message.name)


def map_text(message: Message, rewrite: Callable[[str], str]) -> Message:
    """``message`` with ``rewrite`` applied to each text part; the same object when no
    text changed."""
    changed = False
    parts: list[Part] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            text = rewrite(part.text)
            if text != part.text:
                changed = True
                part = TextPart(text)
        parts.append(part)
    return with_parts(message, parts) if changed else message


def add_to_system(messages: Sequence[Message], text: str) -> list[Message]:
    """``text`` appended (after a blank line) to the leading system message (the system
    prompt), or as a new system message at the start when the list does not begin with
    one. System messages further down are never used: they are not the system prompt."""
    result = list(messages)
    if result and result[0].role == "system":
        first = result[0]
        current = first.text
        merged = f"{current}\n\n{text}" if current.strip() else text
        others = [p for p in first.parts if not isinstance(p, TextPart)]
        result[0] = with_parts(first, [TextPart(merged), *others])
        return result
    return [Message(role="system", parts=(TextPart(text),)), *result]


def carry_times(
    before: Sequence[Message], times: Sequence[datetime | None], after: Sequence[Message]
) -> list[datetime | None]:
    """The times of ``after``, given those of ``before`` and one transformer's edit.

    A message kept as the same object keeps its time. Between two kept messages, changed
    messages take the times of the ones they replaced: one for one when the counts match,
    otherwise each takes the next unmatched original of its own role, and the rest are
    inserted messages, with no time (None: shown as now).
    """
    result: list[datetime | None] = [None] * len(after)
    where: dict[int, list[int]] = {}
    for i, message in enumerate(before):
        where.setdefault(id(message), []).append(i)
    anchors: list[tuple[int, int]] = []
    start = 0
    for k, message in enumerate(after):
        kept = next((i for i in where.get(id(message), ()) if i >= start), None)
        if kept is not None:
            anchors.append((kept, k))
            start = kept + 1
    anchors.append((len(before), len(after)))
    previous_i, previous_k = 0, 0
    for i, k in anchors:
        old = range(previous_i, i)
        new = range(previous_k, k)
        if len(old) == len(new):
            for a, b in zip(old, new, strict=True):
                result[b] = times[a]
        else:
            unused = list(old)
            for b in new:
                match = next((a for a in unused if before[a].role == after[b].role), None)
                if match is not None:
                    unused = [a for a in unused if a > match]
                    result[b] = times[match]
        if i < len(before):
            result[k] = times[i]
        previous_i, previous_k = i + 1, k + 1
    return result
