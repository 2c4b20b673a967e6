"""Prompt injection: always-on mode injections and keyword-triggered lorebook entries.

Rikkahub's ``PromptInjectionTransformer``, without its entertainment-mode extras.

- A **mode injection** (``InjectionConfig``) is injected whenever it is enabled.
- A **lorebook entry** (``LorebookEntry``) is injected when one of its keywords occurs in
  the text of the last ``scan_depth`` non-system messages of the request as the client
  sent it (plain substring or regular expression, case-insensitive unless
  ``case_sensitive``), or always when ``constant``. ``scan_depth`` 0 never triggers by
  keyword. A keyword that is not a valid regular expression never matches. Regular
  expressions are compiled by ``parley.patterns`` and the whole lorebook's matching
  shares ``LOREBOOK_SECONDS``: a keyword still unmatched when that runs out does not
  match.

Everything active is sorted by ``priority`` (highest first, ties in configuration order),
cut to ``budget_chars`` when set, grouped by position and applied:

- ``before_system_prompt`` / ``after_system_prompt``: joined by newlines and put before
  or after the text of the leading system message, the system prompt (one is created
  at the start when the list does not begin with a system message);
- ``top_of_chat``: before the first user message;
- ``bottom_of_chat``: before the last message;
- ``at_depth``: ``depth`` messages from the end (1: before the last message), deepest
  first.

At the last three positions the contents of one role are merged into one message of that
role. Nothing is ever put between a user message and the assistant message with tool
calls that answers it (some providers refuse that); the insertion moves earlier instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from parley.messages import Message, Role, TextPart, text_message
from parley.patterns import Budget, Pattern, PatternError, compile_pattern
from parley.transforms.context import TransformContext, with_parts

log = logging.getLogger(__name__)
LOREBOOK_SECONDS = 0.1
"""What the regular-expression keywords of one request's lorebook may take in all."""

InjectionPosition = Literal[
    "before_system_prompt", "after_system_prompt", "top_of_chat", "bottom_of_chat", "at_depth"
]


@dataclass(frozen=True, slots=True)
class InjectionConfig:
    """A mode injection: ``content`` put at ``position`` while ``enabled``.

    ``depth`` is used by ``at_depth`` only; ``role`` is the role of the message made for
    the chat positions (the system-prompt positions always edit the system message).
    """

    name: str
    content: str
    position: InjectionPosition = "after_system_prompt"
    depth: int = 4
    role: Role = "user"
    priority: int = 0
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class LorebookEntry:
    """A lorebook entry: ``content`` injected when a keyword is found in the last
    ``scan_depth`` messages (or always, when ``constant``). See the module docstring."""

    name: str
    content: str
    keywords: tuple[str, ...] = ()
    use_regex: bool = False
    case_sensitive: bool = False
    scan_depth: int = 4
    constant: bool = False
    position: InjectionPosition = "after_system_prompt"
    depth: int = 4
    role: Role = "user"
    priority: int = 0
    enabled: bool = True

    def is_triggered(self, text: str, budget: Budget | None = None) -> bool:
        if not self.enabled:
            return False
        if self.constant:
            return True
        if self.scan_depth <= 0:
            return False
        budget = budget if budget is not None else Budget(LOREBOOK_SECONDS)
        return any(self._matches(keyword, text, budget) for keyword in self.keywords if keyword)

    def _matches(self, keyword: str, text: str, budget: Budget) -> bool:
        if self.use_regex:
            try:
                pattern = _compiled(keyword, not self.case_sensitive)
                with budget.spend() as seconds:
                    return pattern.search(text, timeout=seconds) is not None
            except PatternError as exc:
                log.warning("lorebook entry %r: a keyword is refused: %s", self.name, exc)
            except TimeoutError:
                log.warning("lorebook entry %r: its keywords ran out of time", self.name)
            return False
        if self.case_sensitive:
            return keyword in text
        return keyword.casefold() in text.casefold()


@functools.lru_cache(maxsize=1024)
def _compiled(keyword: str, ignore_case: bool) -> Pattern:
    return compile_pattern(keyword, ignore_case=ignore_case)


@dataclass(frozen=True, slots=True)
class PromptInjectionConfig:
    """``modes``: always-on injections; ``lorebook``: triggered entries;
    ``budget_chars``: the most characters of content injected in all (0: no limit;
    lower-priority items that do not fit are dropped)."""

    enabled: bool = True
    modes: tuple[InjectionConfig, ...] = ()
    lorebook: tuple[LorebookEntry, ...] = ()
    budget_chars: int = 0


@dataclass(frozen=True, slots=True)
class _Injection:
    name: str
    content: str
    position: InjectionPosition
    depth: int
    role: Role
    priority: int
    from_lorebook: bool = False


class PromptInjectionTransformer:
    name = "prompt_injection"

    def __init__(self, config: PromptInjectionConfig) -> None:
        self.config = config

    async def transform(self, messages: list[Message], context: TransformContext) -> list[Message]:
        active = self._active(context.original or tuple(messages))
        if not active:
            return messages
        context.report.lorebook_entries.extend(i.name for i in active if i.from_lorebook)
        return apply_injections(messages, active)

    def _active(self, scanned: Sequence[Message]) -> list[_Injection]:
        found: list[_Injection] = [
            _Injection(m.name, m.content, m.position, m.depth, m.role, m.priority)
            for m in self.config.modes
            if m.enabled and m.content
        ]
        visible = [m for m in scanned if m.role != "system"]
        texts: dict[int, str] = {}
        keyword_time = Budget(LOREBOOK_SECONDS)
        for entry in self.config.lorebook:
            depth = max(entry.scan_depth, 0)
            if depth not in texts:
                window = visible[-depth:] if depth else []
                texts[depth] = "\n".join(m.text for m in window)
            if entry.content and entry.is_triggered(texts[depth], keyword_time):
                found.append(
                    _Injection(
                        entry.name,
                        entry.content,
                        entry.position,
                        entry.depth,
                        entry.role,
                        entry.priority,
                        from_lorebook=True,
                    )
                )
        found.sort(key=lambda i: -i.priority)
        budget = self.config.budget_chars
        if budget <= 0:
            return found
        kept: list[_Injection] = []
        for item in found:
            if len(item.content) <= budget:
                kept.append(item)
                budget -= len(item.content)
        return kept


def apply_injections(
    messages: Sequence[Message], injections: Sequence[_Injection]
) -> list[Message]:
    """``messages`` with ``injections`` (already in priority order) put in place."""
    result = list(messages)
    by_position: dict[InjectionPosition, list[_Injection]] = {}
    for item in injections:
        by_position.setdefault(item.position, []).append(item)

    before = "\n".join(i.content for i in by_position.get("before_system_prompt", []))
    after = "\n".join(i.content for i in by_position.get("after_system_prompt", []))
    if before or after:
        if result and result[0].role == "system":
            system = result[0]
            text = "\n".join(t for t in (before, system.text, after) if t)
            others = [p for p in system.parts if not isinstance(p, TextPart)]
            result[0] = with_parts(system, [TextPart(text), *others])
        else:
            result.insert(0, text_message("system", "\n".join(t for t in (before, after) if t)))

    top = by_position.get("top_of_chat")
    if top:
        first_user = next((n for n, m in enumerate(result) if m.role == "user"), len(result))
        _insert(result, first_user, top)
    bottom = by_position.get("bottom_of_chat")
    if bottom:
        _insert(result, max(len(result) - 1, 0), bottom)
    by_depth: dict[int, list[_Injection]] = {}
    for item in by_position.get("at_depth", []):
        by_depth.setdefault(item.depth, []).append(item)
    for depth in sorted(by_depth, reverse=True):
        _insert(result, len(result) - max(depth, 1), by_depth[depth])
    return result


def _insert(result: list[Message], target: int, items: Sequence[_Injection]) -> None:
    index = safe_insert_index(result, target)
    merged: dict[Role, list[str]] = {}
    for item in items:
        merged.setdefault(item.role, []).append(item.content)
    for role, contents in merged.items():
        result.insert(index, text_message(role, "\n".join(contents)))
        index += 1


def safe_insert_index(messages: Sequence[Message], target: int) -> int:
    """``target`` (clamped), moved earlier while it would split a user message from the
    assistant message with tool calls that follows it."""
    index = min(max(target, 0), len(messages))
    while index > 0:
        previous = messages[index - 1]
        current = messages[index] if index < len(messages) else None
        if previous.role == "user" and current is not None and current.tool_calls:
            index -= 1
        else:
            break
    return index
