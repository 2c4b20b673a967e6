"""Model prices and the cost of a model call, in US dollars.

The built-in catalog is ``prices.json`` beside this module (USD per million tokens, with
its ``as_of`` date and source); the ``pricing`` setting adds entries and overrides
built-in ones. A model's price is found by its exact name, else by the longest catalog
key that its name starts with (so ``gpt-4o-mini-2024-07-18`` is priced as
``gpt-4o-mini``, not ``gpt-4o``), ignoring case. A name with a ``provider/`` prefix is
tried as given first, then without the prefix.

Usage contract, shared with the adapters (``usage_from_openai``,
``usage_from_anthropic``): ``input_tokens`` is the whole prompt *including* cached
tokens, ``cached_input_tokens`` is the part read from cache, and ``output_tokens``
already includes ``reasoning_tokens``. So reasoning is never charged twice, and cached
tokens are charged once, at the cached rate.

What does not belong here: summing usage over a turn or a session (the agent loop and
the store do that) and rounding for display (callers do that; costs keep full float
precision).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from types import MappingProxyType

from parley.messages import Usage
from parley.settings import ModelPrice

PRICES_FILE = "prices.json"
TOKENS_PER_PRICE_UNIT = 1_000_000


@dataclass(frozen=True, slots=True)
class PriceList:
    """The built-in catalog as read from ``prices.json``; keys are lower case."""

    as_of: str
    source: str
    prices: Mapping[str, ModelPrice]


@cache
def builtin_prices() -> PriceList:
    """Read and validate ``prices.json`` (once per process)."""
    raw = json.loads(files("parley.providers").joinpath(PRICES_FILE).read_text(encoding="utf-8"))
    return PriceList(
        as_of=str(raw["as_of"]),
        source=str(raw["source"]),
        prices=MappingProxyType(
            _normalised(
                {name: ModelPrice.model_validate(entry) for name, entry in raw["models"].items()}
            )
        ),
    )


def usage_cost(price: ModelPrice, usage: Usage) -> float:
    """USD for ``usage`` at ``price``: uncached input at the input rate, cached input at
    the cached rate (the input rate when there is none), output at the output rate."""
    cached = min(max(usage.cached_input_tokens, 0), max(usage.input_tokens, 0))
    uncached = max(usage.input_tokens, 0) - cached
    cached_rate = price.input if price.cached_input is None else price.cached_input
    micro_usd = (
        uncached * price.input + cached * cached_rate + max(usage.output_tokens, 0) * price.output
    )
    return micro_usd / TOKENS_PER_PRICE_UNIT


class PriceCatalog:
    """Prices by model name: the built-in catalog with ``overrides`` on top.

    ``base`` replaces the built-in catalog (tests, or a deployment that wants only its
    own prices).
    """

    def __init__(
        self,
        overrides: Mapping[str, ModelPrice] | None = None,
        *,
        base: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        prices = dict(builtin_prices().prices if base is None else _normalised(base))
        prices.update(_normalised(overrides or {}))
        self._prices: Mapping[str, ModelPrice] = MappingProxyType(prices)
        # Longest first, so the first key a name starts with is the longest such key.
        self._by_length = sorted(prices, key=len, reverse=True)
        self._found: dict[str, ModelPrice | None] = {}
        """Lookups already made (model names are few; this is asked once per call)."""

    @property
    def prices(self) -> Mapping[str, ModelPrice]:
        """Every entry, keyed by lower-case name or prefix."""
        return self._prices

    def price(self, model: str) -> ModelPrice | None:
        """The price of ``model``, or None when no entry matches."""
        try:
            return self._found[model]
        except KeyError:
            pass
        found = self._lookup(model)
        if len(self._found) < 10_000:  # bounded: names come from configuration and clients
            self._found[model] = found
        return found

    def _lookup(self, model: str) -> ModelPrice | None:
        for name in _candidates(model):
            exact = self._prices.get(name)
            if exact is not None:
                return exact
            for key in self._by_length:
                if name.startswith(key):
                    return self._prices[key]
        return None

    def cost(self, model: str, usage: Usage) -> float | None:
        """USD for ``usage`` of ``model``; None when the model is unknown (unknown is
        not free)."""
        price = self.price(model)
        return None if price is None else usage_cost(price, usage)


def _candidates(model: str) -> Iterator[str]:
    """``a/b/c`` -> ``a/b/c``, ``b/c``, ``c`` (lower case, blanks skipped)."""
    name = model.strip().lower()
    while name:
        yield name
        _, slash, name = name.partition("/")
        if not slash:
            return


def _normalised(prices: Mapping[str, ModelPrice]) -> dict[str, ModelPrice]:
    normalised: dict[str, ModelPrice] = {}
    for name, price in prices.items():
        key = name.strip().lower()
        if not key:
            raise ValueError("a price entry needs a model name or prefix")
        normalised[key] = price
    return normalised
