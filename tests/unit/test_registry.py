"""Model resolution: aliases, provider/model, listed names, pass-through, clear errors."""

from __future__ import annotations

import pytest

from parley.errors import InvalidRequest, NotFound
from parley.providers.registry import ProviderRegistry
from parley.providers.scripted import ScriptedProvider
from parley.settings import ModelAlias, ProviderSettings


def registry(default_model: str | None = None) -> ProviderRegistry:
    return ProviderRegistry(
        [
            (ProviderSettings(name="up", kind="openai"), ScriptedProvider("up")),
            (ProviderSettings(name="fixed", kind="openai", models=["m1"]), ScriptedProvider("f")),
        ],
        {"nice": ModelAlias(provider="fixed", model="m1", max_tokens=99)},
        default_model,
    )


def test_alias() -> None:
    resolved = registry().resolve("nice")
    assert (resolved.provider.name, resolved.model, resolved.max_tokens) == ("f", "m1", 99)


def test_provider_slash_model_and_listed_names() -> None:
    assert registry().resolve("up/anything").model == "anything"
    assert registry().resolve("m1").provider.name == "f"
    assert registry().resolve("whatever").provider.name == "up"


def test_fixed_list_is_enforced() -> None:
    with pytest.raises(NotFound):
        registry().resolve("fixed/m2")


def test_default_model_for_empty_names() -> None:
    assert registry("nice").resolve(None).public_name == "nice"
    with pytest.raises(InvalidRequest):
        registry().resolve("")


@pytest.mark.parametrize("bad", ["https://evil/v1", "a b", "x\x00", "m" * 300])
def test_invalid_names(bad: str) -> None:
    with pytest.raises(InvalidRequest):
        registry().resolve(bad)


@pytest.mark.anyio
async def test_listing() -> None:
    ids = [m.id for m in await registry().list_models()]
    assert ids == ["nice", "up/scripted", "fixed/m1"]
