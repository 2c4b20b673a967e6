"""A turn's sampling, by precedence: what the request sets, else its assistant's preset,
else the model's configured defaults.

Pure: the request, the assistant and the model in; the model request's template out
(its messages and server tools are filled per step by the loop).
"""

from __future__ import annotations

from typing import Any

from parley.conversations.assistants import Assistant, sampling_settings
from parley.conversations.turns import ChatTurn
from parley.providers.protocol import SAMPLING_OPTIONS, ModelRequest
from parley.providers.registry import ResolvedModel

_NO_PRESET = sampling_settings(None)
"""The sampling of a turn without an assistant (built once: it is on every turn's path)."""


def request_template(
    turn: ChatTurn, assistant: Assistant | None, model: ResolvedModel
) -> ModelRequest:
    """The turn's model request without messages: sampling, the client's tools, the cap."""
    preset = sampling_settings(assistant) if assistant is not None else _NO_PRESET
    return ModelRequest(
        model=model.model,
        messages=(),
        tools=turn.tools,
        tool_choice=turn.tool_choice,
        max_tokens=turn.max_tokens or preset.max_tokens or model.max_tokens,
        tokens_field=turn.tokens_field if turn.max_tokens else None,
        temperature=_first(turn.temperature, preset.temperature, model.temperature),
        top_p=_first(turn.top_p, preset.top_p),
        stop=turn.stop or tuple(preset.stop or ()),
        options=sampling_options(turn, assistant),
        incremental=turn.stream,
    )


def sampling_options(turn: ChatTurn, assistant: Assistant | None) -> dict[str, Any]:
    """Provider options: the request's over the assistant's preset (its sampling
    options, then its reasoning effort)."""
    if assistant is None:
        return turn.options
    options = turn.options
    if assistant.sampling:
        preset = {
            name: value
            for name, value in assistant.sampling.items()
            if name in SAMPLING_OPTIONS and value is not None
        }
        options = {**preset, **turn.options}
    if assistant.reasoning_effort and "reasoning_effort" not in options:
        options = {**options, "reasoning_effort": assistant.reasoning_effort}
    return options


def _first(*values: float | None) -> float | None:
    return next((value for value in values if value is not None), None)
