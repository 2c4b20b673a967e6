"""Message repair for one agent turn, without redoing the history at every step.

An agent turn calls the model several times with the same history and a growing
message of its own. The full pipeline (``repair.py``) costs about 6 µs per message, so
a 2,000-message conversation would pay 12 ms of repair per step. ``TurnRepair`` checks
the history once per provider's rules: when it is already clean (what Parley itself
stores is) and the request needs no trimming, the only step with anything to do is
step 6, and the result is exactly what the full pipeline would give (a property test
holds the two paths equal). Anything unusual takes the full pipeline.

"Clean" is deliberately narrow: at most one system message, first; the first other
message a user message where the provider insists; every message with content and no
marker that repair itself makes; every tool call answered, with a sendable name and an
id that is provider-safe and unique in the request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from parley.agent.repair import (
    TOOL_NAME,
    TRUNCATED,
    ProviderRules,
    estimate_tokens,
    repair_messages,
    safe_tool_id,
)
from parley.agent.transcript import CONTINUES, has_content, is_note, is_summary, last_user_index
from parley.messages import Message, TextPart, ToolCallPart
from parley.settings import RepairSettings


@dataclass(frozen=True, slots=True)
class _Check:
    clean: bool
    ids: frozenset[str] = frozenset()
    results: bool = False
    """Whether the history holds any tool result (else step 6 has nothing to do)."""


_DIRTY = _Check(False)


class TurnRepair:
    def __init__(self, history: Sequence[Message], settings: RepairSettings) -> None:
        self._history = tuple(history)
        self._settings = settings
        self._history_tokens = estimate_tokens(self._history)
        self._checks: dict[ProviderRules, _Check] = {}
        self._truncated: list[Message] | None = None
        self._truncated_tokens: int | None = None

    def tokens(self, own: Message | None) -> int:
        """The estimated size of the history plus the turn's own message (an upper bound
        of what step 1 computes)."""
        return self._history_tokens + (estimate_tokens((own,)) if own is not None else 0)

    def messages(
        self, own: Message | None, *, context_tokens: int | None, rules: ProviderRules
    ) -> list[Message]:
        """The repaired request: the history, then the turn's own message (if any)."""
        check = self._checks.get(rules)
        if check is None:
            check = self._checks[rules] = _check(self._history, rules)
        if (
            check.clean
            and (own is None or _own_clean(own, rules, check.ids))
            and not self._may_trim(own, context_tokens)
        ):
            # the turn's own message comes after the request, so step 6 leaves it alone
            if self._truncated is None:
                limit = self._settings.old_tool_result_chars
                self._truncated = (
                    truncate_old_results(self._history, limit)
                    if check.results
                    else list(self._history)
                )
            return [*self._truncated, own] if own is not None else list(self._truncated)
        messages = [*self._history, own] if own is not None else list(self._history)
        return repair_messages(
            messages, context_tokens=context_tokens, settings=self._settings, rules=rules
        )

    def _may_trim(self, own: Message | None, context_tokens: int | None) -> bool:
        """Whether step 1 might cut anything, before or after step 6 (which can make a
        result a little longer: 801 characters become 800 plus the marker)."""
        if context_tokens is None:
            return False
        settings = self._settings
        budget = context_tokens * settings.context_fraction / settings.estimate_safety
        if self._truncated_tokens is None:
            truncated = truncate_old_results(self._history, settings.old_tool_result_chars)
            self._truncated_tokens = estimate_tokens(truncated)
        history = max(self._history_tokens, self._truncated_tokens)
        own_tokens = estimate_tokens((own,)) if own is not None else 0
        return history + own_tokens > budget


def _check(history: Sequence[Message], rules: ProviderRules) -> _Check:
    ids: set[str] = set()
    started = False
    for index, message in enumerate(history):
        if message.role == "system":
            if (
                index != 0
                or is_summary(message)
                or not message.text.strip()
                or any(not isinstance(p, TextPart) for p in message.parts)
            ):
                return _DIRTY
            continue
        if not started:
            started = True
            if rules.first_message_user and message.role != "user":
                return _DIRTY
        if message.role == "user" and (
            is_note(message) or is_summary(message) or message.text == CONTINUES
        ):
            return _DIRTY
        if not has_content(message) or not _calls_clean(message, rules, ids):
            return _DIRTY
    return _Check(True, frozenset(ids), bool(ids)) if started else _DIRTY


def _own_clean(own: Message, rules: ProviderRules, history_ids: frozenset[str]) -> bool:
    ids = set(history_ids)
    return own.role == "assistant" and has_content(own) and _calls_clean(own, rules, ids)


def _calls_clean(message: Message, rules: ProviderRules, ids: set[str]) -> bool:
    """Every call answered, sendable and uniquely, safely named (``ids`` grows)."""
    for part in message.parts:
        if not isinstance(part, ToolCallPart):
            continue
        if (
            message.role != "assistant"
            or part.result is None
            or not TOOL_NAME.fullmatch(part.name)
            or part.id in ids
            or part.id != safe_tool_id(part.id, rules.max_tool_id_length)
        ):
            return False
        ids.add(part.id)
    return True


def truncate_old_results(messages: Iterable[Message], max_chars: int) -> list[Message]:
    """Step 6 on a folded history: results before the current request are cut."""
    messages = list(messages)
    boundary = last_user_index(messages)
    if boundary is None:
        return messages
    out: list[Message] = []
    for index, message in enumerate(messages):
        if index < boundary and any(
            isinstance(p, ToolCallPart) and p.result and len(p.result.content) > max_chars
            for p in message.parts
        ):
            message = Message(
                message.role,
                tuple(
                    p.answered(replace(p.result, content=p.result.content[:max_chars] + TRUNCATED))
                    if isinstance(p, ToolCallPart)
                    and p.result is not None
                    and len(p.result.content) > max_chars
                    else p
                    for p in message.parts
                ),
                message.name,
            )
        out.append(message)
    return out
