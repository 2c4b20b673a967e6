"""The body of ``POST /v1/chat/completions`` as pydantic models: OpenAI's
``CreateChatCompletionRequest`` (every field it defines, with its limits), Parley's
extension fields, and ``options_model`` for the routes that answer like chat completions.
Unknown top-level fields are accepted (clients send many).

What does not belong here: turning a body into a ``ChatTurn`` (``wire.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    create_model,
)

MAX_DECISIONS = 256
"""Decisions in one request's ``approvals``."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextContent(_Wire):
    type: Literal["text"]
    text: str


class ImageURL(_Wire):
    url: str
    detail: str | None = None


class ImageContent(_Wire):
    type: Literal["image_url"]
    image_url: ImageURL


class FileData(_Wire):
    file_data: str | None = None
    """A ``data:`` URL or bare base64."""
    filename: str | None = Field(default=None, max_length=255)
    file_id: str | None = None


class FileContent(_Wire):
    type: Literal["file"]
    file: FileData


Content = Annotated[TextContent | ImageContent | FileContent, Field(discriminator="type")]


class FunctionCall(_Wire):
    name: str
    arguments: str = ""


class WireToolCall(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class WireMessage(_Wire):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[Content] | None = None
    name: str | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None
    function_call: FunctionCall | None = None
    """Legacy: an assistant's one call (``role: "function"`` messages answer it)."""


class FunctionDefinition(_Wire):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class WireTool(_Wire):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class StreamOptions(_Wire):
    include_usage: bool = False
    coalesce_ms: int = Field(default=0, ge=0, le=1000)
    """Parley: join text arriving within this many milliseconds into one chunk."""


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
"""OpenAI's levels, and Parley's ``max``: the highest every reasoning model takes."""


class LegacyFunctionChoice(_Wire):
    name: str = Field(min_length=1, max_length=128)


class ApprovalDecision(BaseModel):
    """A person's decision on a server tool call waiting for approval."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str = Field(min_length=1, max_length=128)
    decision: Literal["approve", "deny", "answer"]
    reason: str | None = Field(default=None, max_length=4000)
    """Why it was denied (the model is told)."""
    answer: str | None = Field(default=None, max_length=200_000)
    """The call's result, written by the person (``answer``)."""
    arguments: str | None = None
    """The arguments the decision was made on: the call's must be the same."""


class ChatCompletionRequest(_Wire):
    messages: list[WireMessage]
    model: str | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    tools: list[WireTool | str] | None = None
    tool_choice: str | dict[str, Any] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    response_format: dict[str, Any] | None = None
    user: str | None = None
    parallel_tool_calls: bool | None = None
    logit_bias: dict[str, float] | None = None
    store: bool | None = None
    """False: Parley keeps no record of the turn (and an upstream that stores
    completions is told the same); sent on as given."""
    reasoning_effort: ReasoningEffort | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    verbosity: Literal["low", "medium", "high"] | None = None
    metadata: (
        dict[
            Annotated[str, StringConstraints(max_length=64)],
            Annotated[str, StringConstraints(max_length=512)],
        ]
        | None
    ) = Field(default=None, max_length=16)
    prompt_cache_key: str | None = Field(default=None, max_length=1024)
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = Field(default=None, max_length=64)
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    audio: dict[str, Any] | None = None
    functions: list[FunctionDefinition] | None = Field(default=None, min_length=1, max_length=128)
    """Legacy: as ``tools`` (the reply then names its call in ``function_call``)."""
    function_call: Literal["none", "auto"] | LegacyFunctionChoice | None = None
    """Legacy: as ``tool_choice``."""
    # extensions
    conversation_id: str | None = Field(default=None, min_length=1, max_length=64)
    tool_config: dict[str, Any] | None = None
    """Langchain-Chatchat: server tools to enable, by name (the values are their options)."""
    extra_body: dict[str, Any] | None = None
    use_mcp: StrictBool | None = None
    """Offer every enabled MCP server's tools (Langchain-Chatchat's flag); None: the
    ``mcp.use_by_default`` setting on /v1, off on Chatchat's route."""
    assistant: str | None = Field(default=None, min_length=1, max_length=100)
    """An assistant preset (id or name): its prompt, model, sampling, tools, policies."""
    approvals: list[ApprovalDecision] | None = Field(default=None, max_length=MAX_DECISIONS)
    """Decisions on the calls a paused reply of ``conversation_id`` waits on: it carries
    on (``messages`` are then not used and may be empty)."""
    knowledge_bases: (
        list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] | None
    ) = Field(default=None, max_length=20)
    """Knowledge bases (ids or names) to search for this turn, instead of the assistant's."""


def options_model(name: str, doc: str, drop: Iterable[str], **fields: Any) -> type[BaseModel]:
    """A model that documents the body of a route answering like chat completions: the
    fields of ``ChatCompletionRequest`` but ``drop``, and ``fields`` as (type, Field)."""
    dropped = set(drop)
    kept: dict[str, Any] = {
        field: (info.annotation, copy.copy(info))
        for field, info in ChatCompletionRequest.model_fields.items()
        if field not in dropped
    }
    return create_model(name, __base__=_Wire, __doc__=doc, **kept, **fields)
