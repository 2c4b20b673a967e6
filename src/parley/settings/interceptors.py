"""The ``interceptors`` section of the settings: the chain and each built-in interceptor's
options (``settings.py`` holds the rest and includes this). ``examples/parley.yaml``
documents every key.

What does not belong here: the YAML file and the ``PARLEY_*`` variables (``settings.py``);
the interceptors themselves (``chain.py``, ``builtins/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InterceptorEntry(_Section):
    """An interceptor from an installed package (entry point) or an import path."""

    use: str = Field(
        description="An entry-point name (group parley.interceptors) or an import path "
        "'package.module:ClassOrFactory'."
    )
    name: str | None = None
    order: int | None = Field(default=None, description="Overrides the interceptor's own.")
    enabled: bool = True
    fail_closed: bool | None = Field(
        default=None, description="Overrides the interceptor's own failure policy."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the class or factory."
    )


class LoggingInterceptorSettings(_Section):
    enabled: bool = False
    order: int = 100
    include_content: bool = Field(
        default=False,
        description="Also log prompts, replies and tool arguments (they may hold secrets).",
    )


class AuditSettings(_Section):
    enabled: bool = True
    order: int = 110
    flush_seconds: float = Field(default=1.0, gt=0, description="Rows are written in batches.")
    max_pending: int = Field(
        default=100_000, ge=100, description="Rows kept in memory while the database lags."
    )
    retention_days: float | None = Field(
        default=90, gt=0, description="Older rows are deleted (daily). None: keep forever."
    )


class MetadataSettings(_Section):
    enabled: bool = False
    order: int = 200
    include_identity: bool = True
    include_source: bool = True
    fields: dict[str, str] = Field(
        default_factory=dict, description="Extra lines for the system prompt: name -> value."
    )
    purposes: list[Literal["chat", "summary", "title"]] = Field(
        default_factory=lambda: ["chat"],  # type: ignore[arg-type]
        description="Which model calls get the metadata (the server's own calls: not).",
    )


class SensitiveSettings(_Section):
    enabled: bool = False
    order: int = 210
    fail_closed: bool = True
    word_files: list[Path] = Field(
        default_factory=list, description="Files of words, one per line ('#' comments)."
    )
    pattern_files: list[Path] = Field(
        default_factory=list,
        description="Files of regular expressions (Python syntax), one per line.",
    )
    words: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    case_sensitive: bool = False
    on_request: Literal["replace", "reject"] = "replace"
    replacement: str = "***"
    redact_responses: bool = True
    redact_tool_results: bool = Field(
        default=True, description="Server tools' results, before the model and client see them."
    )
    max_pattern_chars: int = Field(
        default=64,
        ge=1,
        description="The longest text a pattern may match: how much a stream holds back.",
    )


class UsageLimit(_Section):
    tokens_per_day: int | None = Field(default=None, ge=0)
    tokens_per_month: int | None = Field(default=None, ge=0)
    cost_per_day_usd: float | None = Field(default=None, ge=0)
    cost_per_month_usd: float | None = Field(default=None, ge=0)


class UsageLimitSettings(_Section):
    enabled: bool = False
    order: int = 50
    default: UsageLimit = Field(default_factory=UsageLimit)
    keys: dict[str, UsageLimit] = Field(
        default_factory=dict,
        description="Per key, by key id, key name or 'local' (keyless loopback callers).",
    )
    reserve_output_tokens: int = Field(
        default=1024,
        ge=0,
        description="Reserved for a call's reply (less when its max_tokens is smaller); "
        "the real usage is settled after the call.",
    )


HookEvent = Literal[
    "before_model_call", "after_model_call", "before_tool_call", "after_tool_call", "turn_end"
]


class HookSettings(_Section):
    """A command hook (octos): run without a shell, a JSON payload on stdin."""

    event: HookEvent
    command: list[str] = Field(min_length=1)
    name: str | None = None
    tools: list[str] = Field(
        default_factory=list, description="Only for these tools (tool events). Empty: all."
    )
    timeout_seconds: float = Field(default=5.0, gt=0)
    env: dict[str, str] = Field(
        default_factory=dict, description="Added to a minimal environment (PATH, HOME, LANG)."
    )
    max_failures: int = Field(
        default=3, ge=1, description="Failures in a row that disable the hook."
    )


class InterceptorSettings(_Section):
    """The interceptor chain: built-ins, installed packages, import paths, command hooks."""

    discover_entry_points: bool = True
    chain: list[InterceptorEntry] = Field(default_factory=list)
    logging: LoggingInterceptorSettings = Field(default_factory=LoggingInterceptorSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    metadata: MetadataSettings = Field(default_factory=MetadataSettings)
    sensitive: SensitiveSettings = Field(default_factory=SensitiveSettings)
    usage_limits: UsageLimitSettings = Field(default_factory=UsageLimitSettings)
    hooks: list[HookSettings] = Field(default_factory=list)
    hooks_order: int = 60
