"""Finding interceptors and building the chain, once, at start-up.

Three sources, in this order (the chain then sorts them by ``order``; ties keep it):

1. the built-ins enabled in the settings (``builtins/``);
2. installed packages' entry points in the group ``parley.interceptors`` (when
   ``interceptors.discover_entry_points`` is on, the default): each names a class or
   factory that returns an ``Interceptor``;
3. ``interceptors.chain`` entries whose ``use`` is an import path ``module:attribute``.

A ``chain`` entry whose ``use`` is an entry point's name configures that entry point
instead (options, order, name, failure policy, or ``enabled: false`` to leave it out),
and names it explicitly when discovery is off. Anything that cannot be loaded is a
``ConfigurationError`` at start-up, never a silently missing interceptor.

What does not belong here: running the chain (``chain.py``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from parley.errors import ConfigurationError
from parley.interceptors.builtins import builtin_interceptors
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import Interceptor
from parley.settings import Settings
from parley.settings.interceptors import InterceptorEntry

if TYPE_CHECKING:
    from parley.providers.pricing import PriceCatalog

ENTRY_POINT_GROUP = "parley.interceptors"


@dataclass(frozen=True, slots=True)
class Found:
    interceptor: Interceptor
    source: str
    """``built-in``, ``entry point NAME (DISTRIBUTION)`` or ``config MODULE:ATTR``."""


def discover(settings: Settings) -> list[Found]:
    config = settings.interceptors
    found = [Found(i, "built-in") for i in builtin_interceptors(settings)]
    entries: dict[str, InterceptorEntry] = {}
    for entry in config.chain:
        if entry.use in entries:
            raise ConfigurationError(f"interceptors.chain names {entry.use!r} twice")
        entries[entry.use] = entry
    installed = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    chosen = sorted(installed) if config.discover_entry_points else []
    chosen += [use for use in entries if use in installed and use not in chosen]
    for name in chosen:
        configured = entries.get(name)
        if configured is not None and not configured.enabled:
            continue
        point = installed[name]
        where = f"entry point {name!r} ({point.value})"
        interceptor = _build(_load_entry_point(point, where), configured, name, where)
        found.append(Found(interceptor, f"entry point {name} ({_distribution(point)})"))
    for use, entry in entries.items():
        if use in installed or not entry.enabled:
            continue
        where = f"interceptors.chain entry {use!r}"
        if ":" not in use:
            raise ConfigurationError(
                f"{where} is neither an installed entry point (group {ENTRY_POINT_GROUP}) "
                "nor an import path 'package.module:ClassOrFactory'"
            )
        interceptor = _build(_import(use, where), entry, use.rpartition(":")[2], where)
        found.append(Found(interceptor, f"config {use}"))
    return found


def build_chain(settings: Settings, pricing: PriceCatalog | None = None) -> InterceptorChain:
    found = discover(settings)
    return InterceptorChain(
        [f.interceptor for f in found],
        pricing=pricing,
        sources={id(f.interceptor): f.source for f in found},
    )


def _load_entry_point(point: EntryPoint, where: str) -> Any:
    try:
        return point.load()
    except Exception as exc:
        raise ConfigurationError(f"{where} cannot be loaded: {type(exc).__name__}: {exc}") from exc


def _import(path: str, where: str) -> Any:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigurationError(
            f"{where}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"{where}: {module_name!r} has no {attribute!r}") from None
    return target


def _build(
    factory: Any, entry: InterceptorEntry | None, default_name: str, where: str
) -> Interceptor:
    options = entry.options if entry is not None else {}
    if isinstance(factory, Interceptor):
        if options:
            raise ConfigurationError(f"{where} is an instance: it takes no options")
        interceptor: Any = factory
    elif callable(factory):
        try:
            interceptor = factory(**options)
        except TypeError as exc:
            raise ConfigurationError(f"{where}: bad options {sorted(options)}: {exc}") from exc
        except ConfigurationError:
            raise
        except Exception as exc:
            raise ConfigurationError(
                f"{where} failed to start: {type(exc).__name__}: {exc}"
            ) from exc
    else:
        raise ConfigurationError(f"{where} is not a class or factory")
    if not isinstance(interceptor, Interceptor):
        raise ConfigurationError(
            f"{where} gave a {type(interceptor).__name__}, not an Interceptor: subclass "
            "parley.interceptors.Interceptor"
        )
    if entry is not None:
        if entry.name:
            interceptor.name = entry.name
        if entry.order is not None:
            interceptor.order = entry.order
        if entry.fail_closed is not None:
            interceptor.fail_closed = entry.fail_closed
    if not interceptor.name:
        interceptor.name = default_name
    return interceptor


def _distribution(point: EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "unknown package"
