"""The built-in interceptors, each switched on by its own section of ``interceptors`` in
the settings: logging, audit, metadata injection, the sensitive-content filter, usage
limits and command hooks."""

from __future__ import annotations

from parley.interceptors.protocol import Interceptor
from parley.settings import Settings


def builtin_interceptors(settings: Settings) -> list[Interceptor]:
    """The enabled built-ins (each module is imported only when it is used)."""
    config = settings.interceptors
    chosen: list[Interceptor] = []
    if config.logging.enabled:
        from parley.interceptors.builtins.call_log import CallLogger

        chosen.append(CallLogger(config.logging))
    if config.audit.enabled:
        from parley.interceptors.builtins.audit import AuditInterceptor

        chosen.append(AuditInterceptor(config.audit))
    if config.metadata.enabled:
        from parley.interceptors.builtins.metadata import MetadataInjector

        chosen.append(MetadataInjector(config.metadata))
    if config.sensitive.enabled:
        from parley.interceptors.builtins.sensitive import SensitiveFilter

        chosen.append(SensitiveFilter(config.sensitive))
    if config.usage_limits.enabled:
        from parley.interceptors.builtins.usage_limits import UsageLimiter

        chosen.append(UsageLimiter(config.usage_limits))
    if config.hooks:
        from parley.interceptors.builtins.hooks import CommandHooks

        chosen.append(CommandHooks(config.hooks, order=config.hooks_order))
    return chosen
