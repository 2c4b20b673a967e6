"""Fitting a chat into a small context window: the system message and the newest turns.

Pure logic over a ``Tokenizer``, so it is tested without a model; the llama backend
gives it the GGUF's own tokenizer and chat template.
"""

from __future__ import annotations

from typing import Protocol

MESSAGE_OVERHEAD = 8
"""Estimated template tokens per message (role markers, separators)."""


class Tokenizer(Protocol):
    def tokens(self, text: str) -> list[int]: ...

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of the whole formatted prompt, as the chat template builds it."""
        ...

    def truncate(self, text: str, limit: int, *, keep_end: bool) -> str:
        """``text`` cut to at most ``limit`` tokens, keeping its end or its start."""
        ...


def message_tokens(tokenizer: Tokenizer, message: dict[str, str]) -> int:
    return len(tokenizer.tokens(message["content"])) + MESSAGE_OVERHEAD


def fit_context(
    tokenizer: Tokenizer, messages: list[dict[str, str]], budget: int
) -> tuple[list[dict[str, str]], int]:
    """Keep the system message and the newest messages whose prompt fits ``budget`` tokens.

    Returns the kept messages and their prompt's token count. Never fails: a single
    message too long on its own is cut, keeping its end (the system message: its start).
    """
    budget = max(budget, 16)
    total = tokenizer.prompt_tokens(messages)
    if total <= budget:
        return messages, total
    system = _fitted_system(tokenizer, messages, budget)
    rest = messages[len(system) :]
    room = budget - sum(message_tokens(tokenizer, m) for m in system) - MESSAGE_OVERHEAD
    kept = _newest(tokenizer, rest, room)
    # the per-message sums are estimates: drop more until the exact count fits
    while True:
        fitted = system + kept
        total = tokenizer.prompt_tokens(fitted)
        if total <= budget or len(kept) <= 1:
            break
        kept = kept[1:]
    if total > budget and kept:
        content = kept[-1]["content"]
        limit = max(len(tokenizer.tokens(content)) - (total - budget) - MESSAGE_OVERHEAD, 1)
        cut = tokenizer.truncate(content, limit, keep_end=True)
        kept[-1] = {"role": kept[-1]["role"], "content": cut}
        fitted = system + kept
        total = tokenizer.prompt_tokens(fitted)
    return fitted, total


def _fitted_system(
    tokenizer: Tokenizer, messages: list[dict[str, str]], budget: int
) -> list[dict[str, str]]:
    """The leading system message, cut to half the budget (keeping its start)."""
    system = [m for m in messages[:1] if m["role"] == "system"]
    limit = budget // 2
    if system and message_tokens(tokenizer, system[0]) > limit:
        content = tokenizer.truncate(system[0]["content"], limit, keep_end=False)
        return [{"role": "system", "content": content}]
    return system


def _newest(tokenizer: Tokenizer, rest: list[dict[str, str]], room: int) -> list[dict[str, str]]:
    """The newest messages that fit ``room``; at least the last one, cut to fit."""
    kept: list[dict[str, str]] = []
    for message in reversed(rest):
        cost = message_tokens(tokenizer, message)
        if cost > room:
            break
        kept.insert(0, message)
        room -= cost
    if not kept and rest:
        last = rest[-1]
        limit = max(room - MESSAGE_OVERHEAD, 1)
        content = tokenizer.truncate(last["content"], limit, keep_end=True)
        kept = [{"role": last["role"], "content": content}]
    return kept
