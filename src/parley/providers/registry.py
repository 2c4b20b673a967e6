"""Model resolution: which provider serves a requested ``model`` name, as what.

A name resolves, in order, as: an alias from the config's ``models``; ``provider/model``
for a configured provider; a name some provider lists exactly; otherwise the default
provider with the name passed through (when that provider lists no fixed models). An
empty name is the configured ``default_model``. Anything else is a clear 404.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from parley.errors import InvalidRequest, NotFound, ParleyError
from parley.providers.protocol import Provider
from parley.settings import ModelAlias, ProviderSettings, Settings

log = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "smollm2-135m-instruct"
_LISTING_TTL_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    provider: Provider
    model: str
    """The upstream's own name for the model."""
    public_name: str
    """The name clients asked for, echoed in responses."""
    max_tokens: int | None = None
    temperature: float | None = None
    fallbacks: tuple[str, ...] = ()
    """Model names tried in order when this one keeps failing before any output."""
    kind: str = "openai"
    """The provider's wire format (its ordering rules matter to message repair)."""
    context_tokens: int | None = None
    """The model's context window, when known (the local model's is configured)."""
    vision: bool = True
    """Whether it reads images (an alias's ``vision``, else the provider's default)."""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    owned_by: str


class ProviderRegistry:
    def __init__(
        self,
        providers: list[tuple[ProviderSettings, Provider]],
        aliases: dict[str, ModelAlias],
        default_model: str | None,
    ) -> None:
        if not providers:
            raise ValueError("at least one provider is needed")
        self._providers = {config.name: provider for config, provider in providers}
        self._configs = {config.name: config for config, _ in providers}
        self._fixed = {config.name: _fixed_models(config) for config, _ in providers}
        self._order = [config.name for config, _ in providers]
        self._aliases = aliases
        self._default_model = default_model
        self._listing: tuple[float, list[ModelInfo]] | None = None

    @property
    def providers(self) -> dict[str, Provider]:
        return self._providers

    def resolve(self, name: str | None) -> ResolvedModel:
        if not name:
            if self._default_model:
                return self.resolve(self._default_model)
            first = self._order[0]
            fixed = self._fixed[first]
            if not fixed:
                raise InvalidRequest("'model' is required", param="model", code="missing_model")
            return self._resolved(first, fixed[0], fixed[0])
        if "://" in name or any(ch.isspace() or ord(ch) < 32 for ch in name) or len(name) > 256:
            raise InvalidRequest(f"invalid model name {name[:80]!r}", param="model")
        alias = self._aliases.get(name)
        if alias is not None:
            return self._resolved(
                alias.provider,
                alias.model,
                name,
                max_tokens=alias.max_tokens,
                temperature=alias.temperature,
                fallbacks=tuple(alias.fallbacks),
                **({} if alias.vision is None else {"vision": alias.vision}),
            )
        prefix, sep, rest = name.partition("/")
        if sep and prefix in self._providers and rest:
            return self._passthrough(prefix, rest, name)
        for provider_name in self._order:
            if name in self._fixed[provider_name]:
                return self._resolved(provider_name, name, name)
        default = self._default_provider()
        return self._passthrough(default, name, name)

    def with_fallbacks(self, model: ResolvedModel) -> list[ResolvedModel]:
        """``model``, then each of its fallbacks that resolves (an unusable one is logged
        and skipped)."""
        found = [model]
        for name in model.fallbacks:
            try:
                found.append(self.resolve(name))
            except ParleyError as exc:
                log.warning("fallback model %r of %r is unusable: %s", name, model.public_name, exc)
        return found

    def _passthrough(self, provider_name: str, model: str, public_name: str) -> ResolvedModel:
        fixed = self._fixed[provider_name]
        if fixed and model not in fixed:
            raise NotFound(
                f"model {public_name!r} is not configured; GET /v1/models lists what is",
                param="model",
                code="model_not_found",
            )
        return self._resolved(provider_name, model, public_name)

    def _resolved(
        self, provider_name: str, model: str, public_name: str, **extra: Any
    ) -> ResolvedModel:
        config = self._configs[provider_name]
        return ResolvedModel(
            self._providers[provider_name],
            model,
            public_name,
            kind=config.kind,
            context_tokens=config.context_tokens if config.kind == "local" else None,
            **{"vision": config.kind != "local", **extra},
        )

    def _default_provider(self) -> str:
        if self._default_model:
            alias = self._aliases.get(self._default_model)
            if alias is not None:
                return alias.provider
            prefix, sep, _ = self._default_model.partition("/")
            if sep and prefix in self._providers:
                return prefix
        return self._order[0]

    async def list_models(self) -> list[ModelInfo]:
        now = time.monotonic()
        if self._listing is not None and now - self._listing[0] < _LISTING_TTL_SECONDS:
            return self._listing[1]
        seen: set[str] = set()
        listing: list[ModelInfo] = []

        def add(model_id: str, owner: str) -> None:
            if model_id not in seen:
                seen.add(model_id)
                listing.append(ModelInfo(model_id, owner))

        for alias in self._aliases:
            add(alias, "parley")
        listed = await asyncio.gather(*(self._names(name) for name in self._order))
        for provider_name, names in zip(self._order, listed, strict=True):
            for model in names:
                add(f"{provider_name}/{model}", provider_name)
        self._listing = (now, listing)
        return listing

    async def _names(self, provider_name: str) -> list[str]:
        fixed = self._fixed[provider_name]
        if fixed:
            return fixed
        try:
            return await self._providers[provider_name].list_models()
        except httpx.HTTPError:
            return []

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()


def _fixed_models(config: ProviderSettings) -> list[str]:
    if config.models:
        return list(config.models)
    if config.kind == "local":
        return [LOCAL_MODEL_NAME]
    if config.kind == "scripted":
        return ["scripted"]
    return []


def build_provider(config: ProviderSettings, client: httpx.AsyncClient) -> Provider:
    match config.kind:
        case "openai":
            from parley.providers.openai_chat import OpenAIChatProvider

            return OpenAIChatProvider(config, client)
        case "anthropic":
            from parley.providers.anthropic import AnthropicProvider

            return AnthropicProvider(config, client)
        case "gemini":
            from parley.providers.gemini import GeminiProvider

            return GeminiProvider(config, client)
        case "local":
            from parley.providers.local.provider import LocalProvider

            return LocalProvider(config)
        case "scripted":
            from parley.providers.scripted import ScriptedProvider

            return ScriptedProvider(config.name)


def build_registry(
    settings: Settings,
    client: httpx.AsyncClient,
    given: Mapping[str, Provider] | None = None,
) -> ProviderRegistry:
    """The settings' providers. ``given``: provider objects by name, in place of the
    configured ones of that name; with them, the environment's and the local default
    are not added (only what the settings name is built besides)."""
    if not given:
        configs = settings.effective_providers()
        built = [(config, build_provider(config, client)) for config in configs]
        return ProviderRegistry(built, settings.models, settings.default_model)
    configured = {config.name: config for config in settings.providers}
    providers: list[tuple[ProviderSettings, Provider]] = [
        (config, given.get(config.name) or build_provider(config, client))
        for config in settings.providers
    ]
    for name, provider in given.items():
        if name not in configured:  # any model name reaches it
            providers.append((ProviderSettings(name=name, kind="openai"), provider))
    return ProviderRegistry(providers, settings.models, settings.default_model)
