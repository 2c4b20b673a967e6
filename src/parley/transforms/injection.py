"""Prompt injection: always-on mode injections and keyword-triggered lorebook entries.

Rikkahub's ``PromptInjectionTransformer``, without its entertainment-mode extras.

- A **mode injection** (``InjectionConfig``) is injected whenever it is enabled.
- A **lorebook entry** (``LorebookEntry``) is injected when one of its keywords occurs in
  the text of the last ``scan_depth`` non-system messages of the request as the client
  sent it (plain substring or regular expression, case-insensitive unless
  ``case_sensitive``), or always when ``constant``. ``scan_depth`` 0 never triggers by
  keyword. A keyword that is not a valid regular expression never matches. Regular
  expressions are compiled by ``parley.patterns``. The whole lorebook's scanning (the
  scanned texts, plain keywords and regular expressions) shares ``LOREBOOK_SECONDS``
  of the request: a keyword still unmatched when that runs out does not match. Each
  scan depth's text (and its casefolded form) is built once, and only one depth's is
  kept at a time: before, each plain keyword casefolded the whole text again, and 20
  entries of 100 keywords over a 10 MB request held the event loop 17 s.

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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from parley.messages import Message, Role, TextPart, text_message
from parley.patterns import Budget, Pattern, PatternError, compile_pattern
from parley.transforms.protocol import TransformContext, with_parts

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

    def is_triggered(self, scanned: str | ScanWindow, budget: Budget | None = None) -> bool:
        """Whether a keyword occurs in ``scanned`` (the text, or the request's window),
        within ``budget`` (the lorebook's; else one of its own): out of time, no."""
        if not self.enabled:
            return False
        if self.constant:
            return True
        if self.scan_depth <= 0:
            return False
        window = ScanWindow([scanned], self.scan_depth) if isinstance(scanned, str) else scanned
        budget = budget if budget is not None else Budget(LOREBOOK_SECONDS)
        try:
            with budget.spend() as seconds:
                ends = time.monotonic() + seconds
                return any(self._matches(k, window, ends) for k in self.keywords if k)
        except TimeoutError:
            if not budget.told:
                budget.told = True
                log.warning("lorebook entry %r: the keywords ran out of time", self.name)
            return False

    def _matches(self, keyword: str, window: ScanWindow, ends: float) -> bool:
        left = ends - time.monotonic()
        if left <= 0:
            raise TimeoutError("the lorebook's time is up")
        if self.use_regex:
            try:
                pattern = _compiled(keyword, not self.case_sensitive)
            except PatternError as exc:
                log.warning("lorebook entry %r: a keyword is refused: %s", self.name, exc)
                return False
            return pattern.search(window.text, timeout=left) is not None
        if self.case_sensitive:
            return keyword in window.text
        return keyword.casefold() in window.folded


class ScanWindow:
    """The text a lorebook entry scans: the last ``depth`` of ``texts`` joined by
    newlines, built when first read, and its casefolded form (built once, not once a
    keyword)."""

    def __init__(self, texts: Sequence[str], depth: int) -> None:
        self._texts = texts[-depth:] if depth > 0 else []
        self._text: str | None = None
        self._folded: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = "\n".join(self._texts)
        return self._text

    @property
    def folded(self) -> str:
        if self._folded is None:
            self._folded = self.text.casefold()
        return self._folded


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
        triggered = _triggered(self.config.lorebook, scanned)
        found += (
            _Injection(
                entry.name,
                entry.content,
                entry.position,
                entry.depth,
                entry.role,
                entry.priority,
                from_lorebook=True,
            )
            for index, entry in enumerate(self.config.lorebook)
            if index in triggered
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


def _triggered(lorebook: Sequence[LorebookEntry], scanned: Sequence[Message]) -> set[int]:
    """The indexes of the entries of ``lorebook`` that ``scanned`` triggers, all within
    one ``LOREBOOK_SECONDS``. Entries are taken a scan depth at a time, so that only one
    depth's text is held (500 depths of a 10 MB request would be 5 GB)."""
    texts = [m.text for m in scanned if m.role != "system"]
    by_depth: dict[int, list[int]] = {}
    for index, entry in enumerate(lorebook):
        if entry.content:
            by_depth.setdefault(max(entry.scan_depth, 0), []).append(index)
    budget = Budget(LOREBOOK_SECONDS)
    triggered: set[int] = set()
    for depth, indexes in by_depth.items():
        window = ScanWindow(texts, depth)
        triggered.update(i for i in indexes if lorebook[i].is_triggered(window, budget))
    return triggered


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
