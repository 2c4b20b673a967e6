"""The time reminder and the workspace reminder: notes about when and where.

**Time reminder** (Rikkahub's ``TimeReminderTransformer``). Before the first user
message, and before every later user message sent more than ``gap_seconds`` (one hour)
after the message before it, a user message
``<time_reminder>Current time: Monday, 2025-01-06 14:30 Europe/Paris (2 h since last
message)</time_reminder>`` is inserted (no gap part for the first one). The time shown is
that user message's own ``created_at`` (now for the message being sent), in the user's
timezone, so the reminders of old turns never change and never break prompt caching. The
gap is whole minutes under an hour, whole hours under a day, else whole days. A gap
cannot be measured when the previous message's time is unknown: then nothing is added.

**Workspace reminder** (``WorkspaceReminderTransformer``). When the conversation has a
workspace, a ``<workspace>`` block saying how to use it, and listing its first
``max_entries`` top-level entries, is appended to the system prompt (the leading
system message, created when missing).

What does not belong here: creating or locating workspaces (``tools/workspaces.py``).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from parley.messages import Message, text_message
from parley.transforms.protocol import TransformContext, add_to_system


@dataclass(frozen=True, slots=True)
class TimeReminderConfig:
    """``enabled``: add time reminders (off by default, as in Rikkahub).
    ``gap_seconds``: a user message more than this long after the previous message gets
    a reminder."""

    enabled: bool = False
    gap_seconds: float = 3600.0


class TimeReminderTransformer:
    name = "time_reminder"

    def __init__(self, config: TimeReminderConfig) -> None:
        self.config = config

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        result: list[Message] = []
        seen_user = False
        for index, message in enumerate(messages):
            if message.role == "user":
                when = context.time_of(index)
                if not seen_user:
                    seen_user = True
                    result.append(_reminder(context, when, None))
                elif index > 0:
                    previous = context.time_of(index - 1)
                    if previous is not None:
                        gap = ((when or context.now) - previous).total_seconds()
                        if gap > self.config.gap_seconds:
                            result.append(_reminder(context, when, gap))
            result.append(message)
        return result


def _reminder(context: TransformContext, when: datetime | None, gap: float | None) -> Message:
    local = context.local(when)
    stamp = f"{local:%A}, {local:%Y-%m-%d %H:%M} {context.timezone}"
    if gap is not None:
        stamp += f" ({format_gap(gap)} since last message)"
    return text_message("user", f"<time_reminder>Current time: {stamp}</time_reminder>")


def format_gap(seconds: float) -> str:
    """``42 min``, ``3 h``, ``2 d``: whole units, Rikkahub's format."""
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min"
    if whole < 86400:
        return f"{whole // 3600} h"
    return f"{whole // 86400} d"


@dataclass(frozen=True, slots=True)
class WorkspaceReminderConfig:
    """``enabled``: describe the workspace when there is one. ``max_entries``: how many
    top-level entries to list (0: none; the listing changes the system prompt, and so
    its cache, whenever the folder changes)."""

    enabled: bool = True
    max_entries: int = 20


class WorkspaceReminderTransformer:
    name = "workspace_reminder"

    def __init__(self, config: WorkspaceReminderConfig) -> None:
        self.config = config

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        if context.workspace is None:
            return messages
        entries: list[str] | None = None
        if self.config.max_entries > 0:
            entries = await asyncio.to_thread(
                _top_entries, context.workspace, self.config.max_entries + 1
            )
        return add_to_system(messages, workspace_note(entries, self.config.max_entries))


def workspace_note(entries: list[str] | None, limit: int) -> str:
    lines = [
        "<workspace>",
        "This conversation has a workspace: a folder whose files persist across its turns.",
        "- Paths given to the workspace tools are relative to that folder "
        "(for example `notes.md`).",
        "- Use workspace_list and workspace_read to explore, workspace_search to find text, "
        "and workspace_write to create or change files; workspace_shell, when offered, "
        "runs commands there.",
        "- Long tool outputs may be saved under `tool_outputs/` in it.",
    ]
    if entries is not None:
        if not entries:
            lines.append("It is empty.")
        else:
            shown = ", ".join(entries[:limit])
            more = " (and more)" if len(entries) > limit else ""
            lines.append(f"Top-level entries: {shown}{more}")
    lines.append("</workspace>")
    return "\n".join(lines)


def _top_entries(folder: Path, limit: int) -> list[str]:
    """Up to ``limit`` sorted top-level names (folders end with ``/``); [] when missing."""
    try:
        with os.scandir(folder) as scan:
            names = sorted(
                (entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name)
                for entry in scan
            )
    except OSError:
        return []
    return names[:limit]
