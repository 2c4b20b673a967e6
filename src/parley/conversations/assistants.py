"""Assistants: what a client may set on one (validated here) and what tools it may run.

An assistant is a named preset an owner keeps and names in a chat request: system
prompt, model, sampling, reasoning effort, server tools and their approval policies,
knowledge bases, memory, regex rules and the input transformers' settings.

- The wire models (``AssistantCreate``, ``AssistantUpdate``) validate a client's body;
  ``fields()`` turns a valid body into the values ``store.assistants.AssistantStore``
  takes. Unknown keys are refused everywhere, so a misspelt option is a 400 naming it,
  never a setting silently ignored.
- ``resolve_tool_policy``: auto, ask or deny for one tool call.
- ``transformer_settings`` and ``sampling_settings``: typed views of the JSON settings.

The ``Assistant`` row type and its parts are defined in ``store/assistants.py`` (the
store is the lowest layer) and re-exported here. What does not belong here: storage
(``store/assistants.py``), the HTTP routes and the checks that need the running server,
such as known models and tools (``api/assistants.py``), applying the settings to a turn
(the conversation service, the transformers).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from parley.patterns import MAX_PATTERN_CHARS, PatternError, compile_pattern
from parley.store.assistants import (
    ID_PREFIX,
    Assistant,
    AssistantMemory,
    MemoryScope,
    ReasoningEffort,
    RegexRole,
    RegexRule,
    ToolPolicy,
)
from parley.transforms.output import RegexRule as OutputRule

__all__ = [
    "Assistant",
    "AssistantCreate",
    "AssistantMemory",
    "AssistantUpdate",
    "RegexRule",
    "Sampling",
    "ToolPolicy",
    "TransformerSettings",
    "regex_rules",
    "resolve_tool_policy",
    "sampling_settings",
    "tool_policies",
    "transformer_settings",
]

# --- tool policies ------------------------------------------------------------------------

_POLICIES: tuple[ToolPolicy, ...] = ("auto", "ask", "deny")
_STRICTNESS = {policy: rank for rank, policy in enumerate(_POLICIES)}
log = logging.getLogger(__name__)
_GLOB = re.compile(r"[*?\[]")
_WILDCARDS = re.compile(r"\[!?\]?[^\]]*\]|[*?]")
"""What in a glob is not a literal character: ``*``, ``?`` and ``[...]`` classes."""
T = TypeVar("T")


def resolve_tool_policy(
    assistant: Assistant | None, configured: Mapping[str, str], tool: str
) -> ToolPolicy:
    """Whether a call of ``tool`` runs (auto), waits for approval (ask) or is refused (deny).

    Keys of both maps are tool names or ``fnmatch`` globs (``mcp__github__*``, matched
    case-sensitively). Within one map an exact name beats every glob, and among matching
    globs the most specific wins (the most characters that are not wildcards; on a tie,
    the stricter policy). The stricter of the assistant's and the configuration's answer
    stands: an assistant (which any key holder may write) can ask for approval where the
    operator did not, never run what the operator made ``ask`` or ``deny``. Nothing
    matching: auto. A configured value that is not a policy is a ``ValueError``.
    """
    found = [
        _match(policies, tool) or "auto"
        for policies in (assistant.tool_policies if assistant else {}, configured)
    ]
    return max(found, key=lambda policy: _STRICTNESS[policy])


CONFIRMED_MEMORY_TOOLS = ("memory_remember", "memory_forget")


def tool_policies(
    server_tools: Sequence[str],
    assistant: Assistant | None,
    configured: Mapping[str, str],
    *,
    confirm_remember: bool,
) -> dict[str, ToolPolicy]:
    """Each server tool's approval policy (only those that are not auto). With
    ``confirm_remember`` (``memory.confirm_remember``), ``memory_remember`` and
    ``memory_forget`` are at least ``ask``: text injected into a page or a document must
    not plant or wipe memories silently."""
    found = {name: resolve_tool_policy(assistant, configured, name) for name in server_tools}
    for name in CONFIRMED_MEMORY_TOOLS:
        if confirm_remember and found.get(name) == "auto":
            found[name] = "ask"
    return {name: policy for name, policy in found.items() if policy != "auto"}


def regex_rules(assistant: Assistant | None) -> tuple[OutputRule, ...]:
    """An assistant's regex rules, ready to run. A stored rule that today's checks refuse
    (saved before they existed) is left out and logged, not a failed turn."""
    if assistant is None:
        return ()
    rules: list[OutputRule] = []
    for index, rule in enumerate(assistant.regex_rules):
        name = f"rule {index}"
        try:
            rules.append(
                OutputRule(
                    rule.pattern,
                    rule.replacement,
                    frozenset(rule.roles),
                    rule.display_only,
                    name=name,
                )
            )
        except ValueError as exc:
            log.warning("assistant %s: regex %s is left out: %s", assistant.id, name, exc)
    return tuple(rules)


def _match(policies: Mapping[str, str], tool: str) -> ToolPolicy | None:
    exact = policies.get(tool)
    if exact is not None:
        return _policy(exact)
    best: tuple[int, int] | None = None
    chosen: ToolPolicy | None = None
    for pattern, value in policies.items():
        if not _GLOB.search(pattern) or not fnmatchcase(tool, pattern):
            continue
        policy = _policy(value)
        rank = (len(_WILDCARDS.sub("", pattern)), _STRICTNESS[policy])
        if best is None or rank > best:
            best, chosen = rank, policy
    return chosen


def _policy(value: str) -> ToolPolicy:
    for policy in _POLICIES:
        if value == policy:
            return policy
    raise ValueError(f"{value!r} is not a tool policy (auto, ask or deny)")


# --- validation helpers ---------------------------------------------------------------------


def _compiles(pattern: str) -> str:
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        raise PydanticCustomError(
            "invalid_regex", "invalid regular expression: {error}", {"error": str(exc)}
        ) from None
    return pattern


def _check_name(name: str) -> str:
    if name.startswith(ID_PREFIX):
        raise PydanticCustomError(
            "reserved_name", f"a name may not start with {ID_PREFIX!r} (ids do)"
        )
    if "/" in name or any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise PydanticCustomError("invalid_name", "a name may not hold '/' or control characters")
    return name


def _unique(values: list[T]) -> list[T]:
    return list(dict.fromkeys(values))


Name = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=100),
    AfterValidator(_check_name),
]
ShortText = Annotated[str, StringConstraints(max_length=200)]
LongText = Annotated[str, StringConstraints(max_length=200_000)]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^\S+$")]
Pattern = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_PATTERN_CHARS),
    AfterValidator(_compiles),
]
Position = Literal["before_system", "after_system", "top", "bottom", "at_depth"]
"""Where an injection goes: around the system prompt, at the top or bottom of the
conversation, or ``depth`` messages above its end."""
InjectionRole = Literal["system", "user", "assistant"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- the parts of an assistant -------------------------------------------------------------


INT64_MAX = 2**63 - 1
"""OpenAI's integers are 64-bit: a larger one could not even be sent (every chat of the
assistant failed)."""


class Sampling(_Strict):
    """Sampling options, OpenAI's names; what is left unset is left to the request/model."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    seed: int | None = Field(default=None, ge=-INT64_MAX - 1, le=INT64_MAX)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    stop: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        default=None, max_length=4
    )
    logit_bias: dict[str, float] | None = None


class Memory(_Strict):
    enabled: bool = False
    retrieval: bool = False
    scope: MemoryScope = "assistant"


class RegexRuleIn(_Strict):
    pattern: Pattern
    replacement: str = Field(default="", max_length=10_000)
    roles: list[RegexRole] = Field(default=["user", "assistant"], min_length=1)
    display_only: bool = False

    @field_validator("roles")
    @classmethod
    def _distinct_roles(cls, roles: list[RegexRole]) -> list[RegexRole]:
        return _unique(roles)

    @field_validator("replacement")
    @classmethod
    def _expands(cls, replacement: str, info: ValidationInfo) -> str:
        """Group references and escapes must make sense for the pattern."""
        pattern = info.data.get("pattern")
        if pattern is None:
            return replacement
        compiled = re.compile(pattern)
        names = {index: name for name, index in compiled.groupindex.items()}
        # a pattern that always matches, with the same groups: expand() checks the template
        mirror = "".join(
            f"(?P<{names[i]}>)" if i in names else "()" for i in range(1, compiled.groups + 1)
        )
        match = re.compile(mirror).match("")
        assert match is not None
        try:
            match.expand(replacement)
        except (re.error, IndexError) as exc:
            raise PydanticCustomError(
                "invalid_replacement", "invalid replacement: {error}", {"error": str(exc)}
            ) from None
        return replacement


class PromptInjection(_Strict):
    """A fixed text put into every request (Rikkahub's modes)."""

    name: ShortText | None = None
    content: LongText = ""
    position: Position = "after_system"
    depth: int = Field(default=0, ge=0, le=1_000)
    role: InjectionRole = "system"
    enabled: bool = True


class LorebookEntry(_Strict):
    """A text put into a request when one of its keywords appears in the recent messages
    (the last ``scan_depth``), or always when ``constant``."""

    name: ShortText | None = None
    use_regex: bool = False
    case_sensitive: bool = False
    keywords: list[Annotated[str, StringConstraints(min_length=1, max_length=2_000)]] = Field(
        default=[], max_length=100
    )
    scan_depth: int = Field(default=4, ge=1, le=1_000)
    content: LongText = ""
    position: Position = "after_system"
    depth: int = Field(default=0, ge=0, le=1_000)
    role: InjectionRole = "system"
    constant: bool = False
    enabled: bool = True

    @field_validator("keywords")
    @classmethod
    def _regex_keywords_compile(cls, keywords: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("use_regex"):
            for index, keyword in enumerate(keywords):
                try:
                    compile_pattern(keyword)
                except PatternError as exc:
                    raise PydanticCustomError(
                        "invalid_regex",
                        "keyword {index} is not a valid regular expression: {error}",
                        {"index": index, "error": str(exc)},
                    ) from None
        return keywords


class TransformerSettings(_Strict):
    """Settings of the input transformers, which change the outgoing request only."""

    time_reminder: bool = False
    """Tell the model the current date and time."""
    prompt_injections: list[PromptInjection] = Field(default=[], max_length=100)
    lorebook: list[LorebookEntry] = Field(default=[], max_length=500)
    placeholders: bool = True
    """Replace ``{{placeholders}}`` (date, time, model name ...) in the prompts."""
    documents: bool = True
    """Turn attached text documents into prompt text."""
    template: Annotated[str, StringConstraints(max_length=100_000)] | None = None
    """A template each user message is rendered through; None: sent as written."""
    workspace_reminder: bool = False
    """Tell the model where the conversation's workspace is."""


# --- create and update ------------------------------------------------------------------------


class _AssistantFields(_Strict):
    """Every field but the name, each with its default."""

    description: Annotated[str, StringConstraints(max_length=2_000)] = ""
    system_prompt: LongText = ""
    model: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    """A public model name (GET /v1/models); null: the server's default model."""
    sampling: Sampling = Sampling()
    reasoning_effort: ReasoningEffort | None = None
    tools: list[ToolName] = Field(default=[], max_length=200)
    """Server tools to enable, by name."""
    tool_policies: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=200)], ToolPolicy
    ] = Field(default={}, max_length=200)
    """Tool name or glob (``mcp__github__*``) -> auto, ask or deny."""
    knowledge_bases: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default=[], max_length=100
    )
    mcp_servers: list[Annotated[str, StringConstraints(min_length=1, max_length=32)]] = Field(
        default=[], max_length=100
    )
    """MCP servers whose tools are offered, by name."""
    memory: Memory = Memory()
    regex_rules: list[RegexRuleIn] = Field(default=[], max_length=100)
    transformers: TransformerSettings = TransformerSettings()
    generate_titles: bool = True
    generate_suggestions: bool = True

    @field_validator("tools", "knowledge_bases", "mcp_servers")
    @classmethod
    def _distinct(cls, values: list[str]) -> list[str]:
        return _unique(values)

    def fields(self) -> dict[str, Any]:
        """The values ``AssistantStore.create``/``update`` take: the fields the client
        sent (for an update) or all of them (for a create), typed as ``Assistant``'s."""
        chosen = self.model_fields_set if isinstance(self, AssistantUpdate) else None
        values: dict[str, Any] = {}
        for name in type(self).model_fields:
            if chosen is not None and name not in chosen:
                continue
            values[name] = _stored(name, getattr(self, name))
        return values


class AssistantCreate(_AssistantFields):
    name: Name


class AssistantUpdate(_AssistantFields):
    """Only the fields sent change, each replaced whole (``sampling``, ``memory`` and
    ``transformers`` too: send the whole object)."""

    name: Name = ""


def _stored(name: str, value: Any) -> Any:
    match name:
        case "sampling":
            return value.model_dump(exclude_none=True)
        case "memory":
            return AssistantMemory(value.enabled, value.retrieval, value.scope)
        case "regex_rules":
            return tuple(
                RegexRule(rule.pattern, rule.replacement, tuple(rule.roles), rule.display_only)
                for rule in value
            )
        case "transformers":
            return value.model_dump(mode="json")
        case "tools" | "knowledge_bases" | "mcp_servers":
            return tuple(value)
        case "tool_policies":
            return dict(value)
        case _:
            return value


# --- typed views --------------------------------------------------------------------------


def transformer_settings(assistant: Assistant | None) -> TransformerSettings:
    """The assistant's transformer settings (the defaults without an assistant)."""
    if assistant is None:
        return TransformerSettings()
    return TransformerSettings.model_validate(assistant.transformers)


def sampling_settings(assistant: Assistant | None) -> Sampling:
    if assistant is None:
        return Sampling()
    return Sampling.model_validate(assistant.sampling)
