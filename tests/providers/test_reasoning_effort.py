"""Reasoning effort levels, MAX included, are mapped per provider; a level a provider does
not know is never sent."""

from __future__ import annotations

import pytest

from parley.messages import text_message
from parley.providers import anthropic, openai_chat
from parley.providers.protocol import ModelRequest


def request(effort: str) -> ModelRequest:
    return ModelRequest(
        model="m",
        messages=(text_message("user", "hi"),),
        max_tokens=1000,
        options={"reasoning_effort": effort},
    )


@pytest.mark.parametrize(
    ("level", "sent"),
    [("low", "low"), ("HIGH", "high"), ("max", "high"), ("minimal", "minimal"), ("ultra", None)],
)
def test_openai_gets_only_levels_it_knows(level: str, sent: str | None) -> None:
    body = openai_chat.request_body(request(level))
    assert body.get("reasoning_effort") == sent


@pytest.mark.parametrize(
    ("level", "budget"), [("low", 1024), ("high", 16384), ("max", 32000), ("ultra", None)]
)
def test_anthropic_turns_levels_into_thinking_budgets(level: str, budget: int | None) -> None:
    body = anthropic.request_body(request(level))
    assert "reasoning_effort" not in body
    if budget is None:
        assert "thinking" not in body
    else:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert body["max_tokens"] >= budget + 1024
