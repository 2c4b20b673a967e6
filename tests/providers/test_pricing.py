"""The price catalog: lookup rules, overrides, cost arithmetic and the shipped JSON."""

from __future__ import annotations

import json
import math
from importlib.resources import files

import pytest

from parley.messages import Usage
from parley.providers.anthropic import usage_from_anthropic
from parley.providers.openai_chat import usage_from_openai
from parley.providers.pricing import PriceCatalog, builtin_prices, usage_cost
from parley.providers.registry import LOCAL_MODEL_NAME
from parley.settings import ModelPrice, Settings

A = ModelPrice(input=1.0, output=2.0)
B = ModelPrice(input=3.0, output=4.0)
C = ModelPrice(input=5.0, output=6.0)


@pytest.fixture
def catalog() -> PriceCatalog:
    return PriceCatalog(base={"gpt-4o": A, "gpt-4o-mini": B, "gpt-4o-2024-05-13": C})


# --- lookup ----------------------------------------------------------------------------


def test_exact_name(catalog: PriceCatalog) -> None:
    assert catalog.price("gpt-4o") is A
    assert catalog.price("gpt-4o-mini") is B


def test_exact_name_beats_a_prefix(catalog: PriceCatalog) -> None:
    assert catalog.price("gpt-4o-2024-05-13") is C


def test_prefix(catalog: PriceCatalog) -> None:
    assert catalog.price("gpt-4o-2024-08-06") is A


def test_longest_prefix_wins(catalog: PriceCatalog) -> None:
    assert catalog.price("gpt-4o-mini-2024-07-18") is B


def test_case_is_ignored() -> None:
    catalog = PriceCatalog(base={"Claude-Sonnet-4": A})
    assert catalog.price("claude-sonnet-4") is A
    assert catalog.price("CLAUDE-SONNET-4-20250514") is A


@pytest.mark.parametrize("name", ["openai/gpt-4o-mini", "OpenRouter/openai/gpt-4o-mini-2024"])
def test_provider_prefix_is_stripped(catalog: PriceCatalog, name: str) -> None:
    assert catalog.price(name) is B


def test_name_with_provider_prefix_is_tried_first() -> None:
    catalog = PriceCatalog(base={"gpt-4o": A, "groq/gpt-4o": B})
    assert catalog.price("groq/gpt-4o") is B
    assert catalog.price("other/gpt-4o") is A


def test_unknown_model_has_no_price_and_no_cost(catalog: PriceCatalog) -> None:
    assert catalog.price("mystery-model") is None
    assert catalog.price("") is None
    assert catalog.price("gpt-4") is None  # shorter than every key: not a match
    assert catalog.cost("mystery-model", Usage(input_tokens=10)) is None


def test_override_wins() -> None:
    catalog = PriceCatalog({"GPT-4o": C}, base={"gpt-4o": A})
    assert catalog.price("gpt-4o") is C


def test_override_adds_entries() -> None:
    catalog = PriceCatalog({"my-model": C}, base={"gpt-4o": A})
    assert catalog.price("my-model-v2") is C
    assert catalog.price("gpt-4o") is A


def test_overrides_extend_the_builtin_catalog() -> None:
    catalog = PriceCatalog({"gpt-4o": C, "my-model": A})
    assert catalog.price("gpt-4o") is C
    assert catalog.price("my-model") is A
    assert catalog.price("gpt-4o-mini") == builtin_prices().prices["gpt-4o-mini"]


def test_catalog_from_settings() -> None:
    settings = Settings.model_validate({"pricing": {"house-model": {"input": 1, "output": 1}}})
    catalog = PriceCatalog(settings.pricing)
    assert catalog.cost("house-model", Usage(input_tokens=1_000_000)) == 1.0


def test_empty_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="model name"):
        PriceCatalog({" ": A})


# --- cost ------------------------------------------------------------------------------


def test_cost_without_cache() -> None:
    price = ModelPrice(input=2.5, output=10.0)
    usage = Usage(input_tokens=1_000, output_tokens=500)
    assert usage_cost(price, usage) == pytest.approx((1_000 * 2.5 + 500 * 10.0) / 1e6)


def test_cached_tokens_are_charged_once_at_the_cached_rate() -> None:
    price = ModelPrice(input=2.0, output=8.0, cached_input=0.5)
    usage = Usage(input_tokens=1_000, cached_input_tokens=600, output_tokens=100)
    expected = (400 * 2.0 + 600 * 0.5 + 100 * 8.0) / 1e6
    assert usage_cost(price, usage) == pytest.approx(expected, rel=1e-12)


def test_cached_tokens_without_a_cached_rate_cost_the_input_rate() -> None:
    price = ModelPrice(input=2.0, output=8.0)
    with_cache = Usage(input_tokens=1_000, cached_input_tokens=600, output_tokens=100)
    without = Usage(input_tokens=1_000, output_tokens=100)
    assert usage_cost(price, with_cache) == usage_cost(price, without)


def test_reasoning_tokens_are_not_charged_twice() -> None:
    price = ModelPrice(input=1.0, output=4.0)
    usage = Usage(input_tokens=0, output_tokens=1_000, reasoning_tokens=800)
    assert usage_cost(price, usage) == pytest.approx(1_000 * 4.0 / 1e6)


def test_cached_count_above_input_is_clamped() -> None:
    price = ModelPrice(input=2.0, output=0.0, cached_input=1.0)
    assert usage_cost(price, Usage(input_tokens=10, cached_input_tokens=50)) == pytest.approx(
        10 * 1.0 / 1e6
    )


def test_cost_keeps_full_precision() -> None:
    price = ModelPrice(input=0.15, output=0.6, cached_input=0.075)
    cost = usage_cost(price, Usage(input_tokens=7, cached_input_tokens=3, output_tokens=1))
    assert cost == pytest.approx((4 * 0.15 + 3 * 0.075 + 0.6) / 1e6, rel=1e-12)
    assert cost != round(cost, 6)


def test_local_model_is_free() -> None:
    usage = Usage(input_tokens=5_000, output_tokens=5_000, cached_input_tokens=1_000)
    assert PriceCatalog().cost(LOCAL_MODEL_NAME, usage) == 0.0


def test_openai_usage_matches_the_cost_contract() -> None:
    """OpenAI's prompt_tokens include cached_tokens; completion_tokens include reasoning."""
    usage = usage_from_openai(
        {
            "prompt_tokens": 1_000,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 600},
            "completion_tokens_details": {"reasoning_tokens": 200},
        }
    )
    assert usage == Usage(
        input_tokens=1_000, output_tokens=300, reasoning_tokens=200, cached_input_tokens=600
    )
    cost = PriceCatalog().cost("gpt-4.1-2025-04-14", usage)
    assert cost == pytest.approx((400 * 2.0 + 600 * 0.5 + 300 * 8.0) / 1e6)


def test_anthropic_usage_matches_the_cost_contract() -> None:
    """Anthropic's input_tokens exclude cache reads and writes; the adapter adds them."""
    usage = usage_from_anthropic(
        {
            "input_tokens": 7,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20,
            "output_tokens": 42,
        }
    )
    assert usage == Usage(input_tokens=127, output_tokens=42, cached_input_tokens=100)
    cost = PriceCatalog().cost("anthropic/claude-sonnet-4-20250514", usage)
    assert cost == pytest.approx((27 * 3.0 + 100 * 0.3 + 42 * 15.0) / 1e6)


# --- the shipped catalog -------------------------------------------------------------


def test_builtin_json_loads_and_every_entry_is_valid() -> None:
    raw = json.loads(files("parley.providers").joinpath("prices.json").read_text(encoding="utf-8"))
    assert raw["as_of"]
    assert raw["source"]
    assert raw["currency"] == "USD"
    models = raw["models"]
    assert len(models) >= 20
    assert len({name.lower() for name in models}) == len(models)
    for name, entry in models.items():
        assert name == name.strip().lower(), name
        price = ModelPrice.model_validate(entry)
        for rate in (price.input, price.output, price.cached_input):
            assert rate is None or (math.isfinite(rate) and rate >= 0), name
        if price.cached_input is not None:
            assert price.cached_input <= price.input, name
    assert set(builtin_prices().prices) == set(models)


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("gpt-4.1-nano", "gpt-4.1-nano"),
        ("o3-2025-04-16", "o3"),
        ("o3-mini", "o3-mini"),
        ("o4-mini-2025-04-16", "o4-mini"),
        ("gpt-5-2025-08-07", "gpt-5"),
        ("gpt-5-mini", "gpt-5-mini"),
        ("gpt-5-nano-2025-08-07", "gpt-5-nano"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-opus-4-1-20250805", "claude-opus-4"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-haiku-4-5", "claude-haiku-4-5"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("meta-llama/llama-3.3-70b-versatile", "llama-3.3-70b"),
        ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
    ],
)
def test_builtin_catalog_resolves_common_models(model: str, key: str) -> None:
    assert PriceCatalog().price(model) == builtin_prices().prices[key]
