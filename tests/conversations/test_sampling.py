"""Sampling precedence: the request's values, else the assistant's preset, else the
model's configured defaults (conversations/sampling.py)."""

from __future__ import annotations

from parley.conversations.sampling import request_template
from parley.conversations.turns import ChatTurn
from parley.providers.registry import ResolvedModel
from parley.providers.scripted import ScriptedProvider
from parley.store.assistants import Assistant

MODEL = ResolvedModel(ScriptedProvider(), "upstream-name", "fast", max_tokens=900, temperature=0.9)
PRESET = Assistant(
    id="asst_1",
    owner="alice",
    name="careful",
    sampling={"temperature": 0.2, "top_p": 0.5, "max_tokens": 300, "stop": ["END"], "seed": 7},
    reasoning_effort="low",
)


def turn(**fields: object) -> ChatTurn:
    return ChatTurn(owner="alice", model="fast", messages=(), **fields)  # type: ignore[arg-type]


def test_the_models_defaults_apply_when_nothing_else_is_set() -> None:
    template = request_template(turn(), None, MODEL)
    assert template.model == "upstream-name"
    assert (template.temperature, template.max_tokens, template.top_p) == (0.9, 900, None)
    assert template.stop == ()
    assert template.options == {}


def test_the_assistants_preset_is_over_the_models_defaults() -> None:
    template = request_template(turn(), PRESET, MODEL)
    assert (template.temperature, template.top_p, template.max_tokens) == (0.2, 0.5, 300)
    assert template.stop == ("END",)
    assert template.options == {"seed": 7, "reasoning_effort": "low"}


def test_the_requests_values_are_over_the_preset() -> None:
    asked = turn(
        temperature=0.0,
        top_p=1.0,
        max_tokens=50,
        tokens_field="max_completion_tokens",
        stop=("STOP",),
        options={"seed": 1, "reasoning_effort": "high"},
        stream=False,
    )
    template = request_template(asked, PRESET, MODEL)
    # 0.0 is a value, not "unset"
    assert (template.temperature, template.top_p, template.max_tokens) == (0.0, 1.0, 50)
    assert template.tokens_field == "max_completion_tokens"
    assert template.stop == ("STOP",)
    assert template.options == {"seed": 1, "reasoning_effort": "high"}
    assert template.incremental is False


def test_the_tokens_field_is_kept_only_with_the_requests_own_cap() -> None:
    """A cap from the preset goes upstream under the provider's usual field."""
    template = request_template(turn(tokens_field="max_completion_tokens"), PRESET, MODEL)
    assert template.max_tokens == 300
    assert template.tokens_field is None
