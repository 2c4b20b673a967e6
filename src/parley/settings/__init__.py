"""The one Settings object, from a YAML file and the environment.

Precedence, highest first: keyword arguments, ``PARLEY_*`` environment variables (nested
keys joined by ``__``, e.g. ``PARLEY_SERVER__PORT=9000``), the YAML file (``--config`` or
``PARLEY_CONFIG``), then the defaults written here. The well-known provider variables
``OPENAI_BASE_URL``/``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` add
a provider named ``openai`` or ``anthropic`` unless the file already defines one by that
name. With no provider at all, the embedded local model is the provider.

This is the only module that reads the environment. ``examples/parley.yaml`` documents
every key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from parley.settings.extraction import DocumentSettings
from parley.settings.interceptors import InterceptorSettings
from parley.settings.knowledge import KnowledgeSettings, MemorySettings
from parley.settings.mcp import McpSettings

ProviderKind = Literal["openai", "anthropic", "gemini", "local", "scripted"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProviderSettings(_Section):
    name: str
    kind: ProviderKind
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = Field(
        default=None, description="Read the key from this environment variable instead."
    )
    models: list[str] = Field(
        default_factory=list,
        description="Models this provider serves. Empty: any name is passed through.",
    )
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = 600.0
    connect_timeout_seconds: float = 10.0
    list_upstream_models: bool = True
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = Field(
        default=None,
        description="How an openai-kind upstream is sent an output cap the client did "
        "not name (an assistant's or a model alias's max_tokens; a client's max_tokens or "
        "max_completion_tokens is sent as given, and none is sent when nobody set one). "
        "Default: max_completion_tokens for api.openai.com (its reasoning models refuse "
        "max_tokens), max_tokens elsewhere.",
    )
    # local provider only
    model_path: str | None = None
    context_tokens: int = 4096
    threads: int | None = None
    backend: str = Field(
        default="llama",
        description="The runtime the local model's worker process loads: llama "
        "(llama-cpp-python), or module:function returning a model (see "
        "parley.providers.local.backend).",
    )
    load_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long the local model's worker may take to load and check the model.",
    )
    cancel_grace_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How long a cancelled local generation may take to stop before its "
        "worker process is killed (and restarted for the next request).",
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not value or "/" in value:
            raise ValueError("provider names are non-empty and contain no '/'")
        return value

    @model_validator(mode="after")
    def _key_from_environment(self) -> ProviderSettings:
        if self.api_key is None and self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                self.api_key = SecretStr(value)
        return self


class ModelAlias(_Section):
    provider: str
    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    description: str | None = None
    vision: bool | None = Field(
        default=None,
        description="Whether the model reads images (None: its provider's default; the "
        "local model does not). Images for one that does not are read by chat.ocr_model.",
    )
    fallbacks: list[str] = Field(
        default_factory=list,
        description="Models (aliases or provider/model) tried in order when this one keeps "
        "failing before any output.",
    )


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 10 * 1024 * 1024
    max_json_depth: int = Field(
        default=64,
        ge=2,
        le=200,
        description="JSON bodies nested deeper get 400 before anything reads them (at most "
        "200: orjson writes 254 levels, and an upstream request nests a little deeper).",
    )
    keepalive_seconds: float = 15.0
    on_disconnect: Literal["auto", "continue", "cancel"] = Field(
        default="auto",
        description="When a client leaves before its reply ends (its Stop): auto cancels a "
        "stateless request (no conversation_id: the client keeps its own history, so nobody "
        "comes back for the rest) or an unsaved one (store: false), and lets a reply in a "
        "conversation the client named finish and be saved for when the user returns; "
        "continue finishes every reply; cancel cancels every one. A cancelled reply's "
        "upstream request is closed and its text so far saved as interrupted.",
    )
    log_level: str = "info"
    max_in_flight: int = Field(
        default=2048,
        ge=1,
        description="Chat requests in flight (streams count until done); a key with less "
        "than its fair share in flight may still use a reserve of 1/20 more.",
    )
    max_in_flight_per_key: int = Field(
        default=64,
        ge=1,
        description="Chat requests in flight for one API key, so that one key cannot take "
        "every slot; more get 429 (keyless loopback use has only the overall limit).",
    )
    max_other_in_flight_per_key: int = Field(
        default=16,
        ge=1,
        description="Other authenticated requests in flight for one API key (reads, "
        "searches, uploads ...); more get 429 (keyless loopback use: no limit).",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A connection must send a request's headers within this; else closed.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A chat request's body must arrive within this (408); it is read before "
        "the request counts as in flight.",
    )
    max_loop_lag_ms: float = Field(
        default=100.0,
        description="While the loop runs this late, new chat requests of keys with their "
        "fair share in flight get 429 (keyless loopback use: 503); others are admitted "
        "unless it runs 5 times this late (at least 0.5 s).",
    )
    idempotency_ttl_seconds: float = Field(
        default=86_400.0,
        gt=0,
        description="How long a POST's Idempotency-Key and its response are kept: the same "
        "key and request again within this gets that response, never a second run.",
    )
    idempotency_max_response_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="A response kept for an Idempotency-Key is at most this large (a larger "
        "one is answered once; a retry gets 409 idempotency_response_too_large).",
    )


class ChatSettings(_Section):
    default_max_tokens: int = Field(
        default=4096,
        description="The room kept for the reply when the context is fitted to the model's "
        "window, when nobody set a cap. It is not sent: an upstream gets a max_tokens only "
        "when the client, its assistant or the model alias set one.",
    )
    checkpoint_seconds: float = 1.0
    session_idle_seconds: float = Field(
        default=5.0, gt=0, description="An idle conversation session leaves memory after this."
    )
    max_messages: int = 10_000
    max_message_chars: int = 2_000_000
    max_tools: int = 128
    max_tool_calls: int = Field(
        default=1024, ge=1, description="Tool calls one message of a request may carry."
    )
    max_parts: int = Field(
        default=20_000,
        ge=1,
        description="Content parts and tool calls of all a request's messages together "
        "(each costs work on the event loop: 20,000 tool calls about 0.3 s).",
    )
    max_tokens_limit: int = 1_000_000
    fast_model: str | None = Field(
        default=None,
        description="The model for titles, suggestions and summaries (None: the "
        "conversation's own model).",
    )
    generate_titles: bool = Field(
        default=True,
        description="After a successful turn in a conversation the client named "
        "(conversation_id), a title for an untitled chat; never for stateless requests.",
    )
    generate_suggestions: bool = Field(
        default=True,
        description="After a successful turn in a conversation the client named "
        "(conversation_id), follow-up suggestions; never for stateless requests.",
    )
    max_suggestions: int = Field(default=10, ge=0, le=10)
    ocr_model: str | None = Field(
        default=None,
        description="A model that reads images: for a chat model that cannot, each image "
        "is replaced by its text and description (None: images are left as they are, "
        "with a note in the reply).",
    )


class ContextSettings(_Section):
    """Rolling context summaries (behaviours.md section 4): what a long conversation sends."""

    enabled: bool = True
    threshold_tokens: int = Field(
        default=32_000, description="Summarise beyond this many estimated tokens."
    )
    minimum_threshold_tokens: int = Field(default=4_000, ge=256)
    recent_fraction: float = Field(
        default=0.55, gt=0, lt=1, description="The part of the threshold kept verbatim."
    )
    segment_tokens: int = Field(
        default=12_000, ge=1000, description="Longer summary inputs are summarised in segments."
    )
    summary_model: str | None = Field(
        default=None, description="None: chat.fast_model, else the conversation's model."
    )


class RepairSettings(_Section):
    """Message repair before every model call (behaviours.md section 2)."""

    min_messages_to_trim: int = 8
    context_fraction: float = Field(default=0.8, gt=0, le=1)
    estimate_safety: float = Field(default=1.2, ge=1)
    keep_recent_messages: int = 6
    summary_fraction: float = Field(default=0.4, gt=0, le=1)
    old_tool_result_chars: int = 800


class AgentSettings(_Section):
    """The agent loop: budgets, deadlines, retries and loop detection."""

    max_iterations: int = Field(default=50, ge=1, le=256)
    no_progress_seconds: float = Field(default=300.0, gt=0)
    wall_clock_seconds: float = Field(default=1200.0, gt=0)
    max_turn_tokens: int | None = Field(
        default=None, ge=1, description="Input + output tokens a turn may use (all steps)."
    )
    max_turn_cost_usd: float | None = Field(default=None, gt=0)
    first_token_base_seconds: float = Field(default=30.0, gt=0)
    first_token_seconds_per_1k_input: float = Field(default=1.0, ge=0)
    first_token_max_seconds: float = Field(default=180.0, gt=0)
    between_chunks_seconds: float = Field(default=30.0, gt=0)
    retry_backoff_seconds: list[float] = Field(default_factory=lambda: [1.0, 2.0, 4.0])
    max_retry_after_seconds: float = Field(
        default=30.0, description="A longer Retry-After skips to the fallback model."
    )
    client_retries: Literal["defer", "ignore"] = Field(
        default="defer",
        description="A request whose client retries by itself (it sends "
        "x-stainless-retry-count, as every official OpenAI SDK does, or Idempotency-Key): "
        "defer tries each model once (the alias's fallbacks still follow) and lets the "
        "client retry, its error saying x-should-retry; ignore retries it like any other.",
    )
    loop_window: int = Field(default=12, ge=2)
    loop_max_cycle: int = Field(default=3, ge=1)
    loop_repeats: int = Field(default=3, ge=2)
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    repair: RepairSettings = Field(default_factory=RepairSettings)


class WebFetchSettings(_Section):
    timeout_seconds: float = Field(default=20.0, gt=0)
    max_bytes: int = Field(default=5 * 1024 * 1024, gt=0)
    max_redirects: int = Field(default=5, ge=0)
    allow_hosts: list[str] = Field(
        default_factory=list,
        description="Host names or IP networks (CIDR) exempt from the private-address guard.",
    )


class ShellSettings(_Section):
    enabled: bool = False
    timeout_seconds: float = Field(default=30.0, gt=0)
    max_output_chars: int = Field(default=20_000, gt=0)
    max_memory_mb: int = Field(default=512, gt=0)
    network: bool = Field(
        default=False,
        description="Let sandboxed commands use the network (the host's; off: none at all).",
    )
    bubblewrap: str | None = Field(
        default=None, description="The bwrap binary (None: found on PATH)."
    )
    unsafe_without_sandbox: bool = Field(
        default=False,
        description="Run commands without bubblewrap, with the server's own rights (they "
        "can read its config, database and environment): only for a single trusted user.",
    )


class ToolSettings(_Section):
    """Server-side tools: which are on by default, and the limits they run under."""

    default_tools: list[str] = Field(
        default_factory=list, description="Server tools offered on every request."
    )
    pinned_tools: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=600.0, gt=0)
    max_active: int = Field(default=15, ge=1)
    idle_iterations: int = Field(default=5, ge=1)
    warn_active: int = Field(default=25, ge=1)
    max_output_chars: int = Field(default=50_000, ge=100)
    head_fraction: float = Field(default=0.7, gt=0, lt=1)
    spill_bytes: int = Field(default=32 * 1024, ge=1024)
    preview_bytes: int = Field(default=4 * 1024, ge=256)
    workspace_dir: Path | None = Field(
        default=None, description="Per-conversation folders. Default: data_dir/workspaces."
    )
    approval: dict[str, Literal["auto", "ask", "deny"]] = Field(
        default_factory=dict,
        description="Approval policy by tool name or glob (mcp__github__*): auto runs, "
        "ask pauses the turn for a person's decision, deny refuses. An assistant may "
        "make a tool stricter, never looser.",
    )
    approval_ttl_seconds: float = Field(
        default=86_400.0, gt=0, description="A pending approval expires after this."
    )
    web_fetch: WebFetchSettings = Field(default_factory=WebFetchSettings)
    shell: ShellSettings = Field(default_factory=ShellSettings)


class ModelPrice(_Section):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)


class AuthSettings(_Section):
    allow_loopback_without_keys: bool = True
    revocation_check_seconds: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="How often every instance looks for revoked keys: their running "
        "replies end (saved as interrupted, the client told) and their next request fails.",
    )


class WebSettings(_Section):
    """The browser UI: its bundle, and the sessions a signed-in browser holds."""

    enabled: bool = Field(
        default=True,
        description="Serve the web UI at / (when its bundle is installed); off: / is the "
        "page saying how to connect a client, as it is without the bundle.",
    )
    static_dir: Path | None = Field(
        default=None,
        description="The built bundle (index.html and assets/). Default: the one in the "
        "installed package (parley/web/static).",
    )
    session_ttl_seconds: float = Field(
        default=30 * 86_400.0,
        gt=0,
        description="How long a browser stays signed in (POST /v1/session) before the key "
        "must be given again; revoking the key or signing out ends it sooner.",
    )


class DatabaseSettings(_Section):
    url: str | None = Field(
        default=None, description="SQLAlchemy URL. Default: SQLite in data_dir."
    )
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL"
    busy_timeout_ms: int = 10_000
    echo: bool = False
    readers: int = Field(default=4, ge=1, description="SQLite reader threads.")
    heavy_readers: int = Field(
        default=2,
        ge=1,
        description="Searches read at most this many at once, apart from other reads "
        "(threads on SQLite), the waiting keys served in turn.",
    )
    pool_size: int = Field(
        default=10, ge=1, description="PostgreSQL: connections kept open per instance."
    )
    max_overflow: int = Field(
        default=10, ge=0, description="PostgreSQL: connections opened past pool_size at peaks."
    )
    statement_timeout_ms: int = Field(
        default=30_000,
        ge=0,
        description="PostgreSQL: a statement running longer is cancelled (0: no limit).",
    )


class RedisSettings(_Section):
    url: str | None = Field(
        default=None,
        description="redis://host:6379/0: what several instances share (one reply at a "
        "time per conversation, cancel and supersede). None: one instance, as alone.",
    )
    lease_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A conversation's reply lease lasts this long unless its instance "
        "renews it: a dead instance's replies are found interrupted within about this.",
    )
    key_prefix: str = Field(default="parley", min_length=1, max_length=64)


def default_data_dir() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "parley"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "parley"
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "parley"


def default_cache_dir() -> Path:
    """Where files Parley can make again are kept (converted models): the user's cache."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "parley"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "parley" / "cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "parley"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PARLEY_", env_nested_delimiter="__", extra="forbid", yaml_file=None
    )

    data_dir: Path = Field(default_factory=default_data_dir)
    default_model: str | None = None
    server: ServerSettings = Field(default_factory=ServerSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    providers: list[ProviderSettings] = Field(default_factory=list)
    models: dict[str, ModelAlias] = Field(default_factory=dict)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    interceptors: InterceptorSettings = Field(default_factory=InterceptorSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    pricing: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Prices by model name or name prefix; added to and overriding the "
        "built-in catalog.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = settings_cls.model_config.get("yaml_file") or os.environ.get("PARLEY_CONFIG")
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)

    @model_validator(mode="after")
    def _check(self) -> Settings:
        names = [p.name for p in self.providers]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"duplicate provider names: {sorted(duplicates)}")
        for alias, target in self.models.items():
            if target.provider not in names and target.provider not in _env_provider_names():
                raise ValueError(
                    f"model alias {alias!r} names unknown provider {target.provider!r}"
                )
        return self

    @property
    def workspace_dir(self) -> Path:
        return self.tools.workspace_dir or self.data_dir / "workspaces"

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite:///{self.data_dir / 'parley.db'}"

    def effective_providers(self) -> list[ProviderSettings]:
        """Configured providers, plus those from the well-known variables, else local."""
        providers = list(self.providers)
        names = {p.name for p in providers}
        for env_provider in _env_providers():
            if env_provider.name not in names:
                providers.append(env_provider)
        if not providers:
            providers.append(ProviderSettings(name="local", kind="local"))
        return providers


def _env_provider_names() -> set[str]:
    return {p.name for p in _env_providers()}


def _env_providers() -> list[ProviderSettings]:
    found: list[ProviderSettings] = []
    openai_url = os.environ.get("OPENAI_BASE_URL")
    openai_key = os.environ.get("OPENAI_API_KEY")
    if openai_url or openai_key:
        found.append(
            ProviderSettings(
                name="openai",
                kind="openai",
                base_url=openai_url or "https://api.openai.com/v1",
                api_key=SecretStr(openai_key) if openai_key else None,
            )
        )
    anthropic_key = os.environ.get("ANTHROPIC_API_KEY")
    if anthropic_key:
        found.append(
            ProviderSettings(
                name="anthropic",
                kind="anthropic",
                base_url=os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
                api_key=SecretStr(anthropic_key),
            )
        )
    gemini_key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
    if gemini_key:
        found.append(
            ProviderSettings(
                name="gemini",
                kind="gemini",
                base_url=os.environ.get("GEMINI_BASE_URL")
                or "https://generativelanguage.googleapis.com",
                api_key=SecretStr(gemini_key),
            )
        )
    return found


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build the Settings; ``config_file`` wins over ``PARLEY_CONFIG``."""
    path = config_file or (
        Path(os.environ["PARLEY_CONFIG"]) if os.environ.get("PARLEY_CONFIG") else None
    )
    if path is None:
        return Settings(**overrides)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")

    class FileSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=str(path))

    return FileSettings(**overrides)
