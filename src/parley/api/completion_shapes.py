"""The shapes of chat completions, their stream chunks and tasks, for the OpenAPI schema.

They are OpenAI's ``chat.completion`` and ``chat.completion.chunk`` with Parley's
extensions: the ``parley`` object and Langchain-Chatchat's ``status``, ``message_type``,
``message_id`` (and, on a tool's progress chunk, a top-level ``tool_calls``). The bodies
themselves are written by ``api/chat.py``, ``api/sse.py`` and ``api/tasks.py``; the
schema fuzzing suite checks that they match. What does not belong here: the request
models (``api/wire.py``), Parley's other shapes (``api/shapes.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from parley.api.openapi import ErrorObject
from parley.api.shapes import Citation, Shape

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]
"""``function_call`` only for a request that gave the legacy ``functions``."""


class Function(Shape):
    name: str
    arguments: str


class ToolCall(Shape):
    id: str
    type: Literal["function"]
    function: Function


class TopLogprob(Shape):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Shape):
    """The upstream's log probabilities, relayed (the request set ``logprobs``)."""

    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None


class CachedTokens(Shape):
    cached_tokens: int


class ReasoningTokens(Shape):
    reasoning_tokens: int


class CompletionUsage(Shape):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: CachedTokens | None = None
    completion_tokens_details: ReasoningTokens | None = None


class Cost(Shape):
    response_usd: float
    conversation_usd: float
    complete: bool = Field(description="False when a model without a price was used.")


class PendingApproval(Shape):
    id: str
    tool: str
    arguments: str


class Stopped(Shape):
    code: str
    message: str


class ServerToolCall(Shape):
    """A server tool call as a reply reports it (``parley.tools``, a task's ``steps``)."""

    id: str
    name: str
    arguments: str
    tool_output: str | None
    is_error: bool


class ParleyExtension(Shape):
    """``parley`` on responses and chunks: where the reply is stored, and what the last
    chunk (or the whole response) adds; progress chunks carry ``tool``, ``restart`` or
    ``status``."""

    conversation_id: str | None = Field(
        description="None when the turn is not kept (`store: false`)."
    )
    message_id: str
    cost: Cost | None = None
    notes: list[str] | None = None
    citations: list[Citation] | None = None
    pending_approvals: list[PendingApproval] | None = None
    stopped: Stopped | None = None
    tools: list[ServerToolCall] | None = Field(default=None, description="Responses only.")
    tool: dict[str, Any] | None = Field(default=None, description="A server tool's progress.")
    restart: dict[str, Any] | None = Field(default=None, description="The reply starts over.")
    status: dict[str, Any] | None = Field(default=None, description="What the agent does.")


class AssistantMessage(Shape):
    role: Literal["assistant"]
    content: str | None
    refusal: None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: Function | None = Field(
        default=None, description="Legacy: the call, for a request that gave `functions`."
    )


class Choice(Shape):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None
    finish_reason: FinishReason


class ChatCompletion(Shape):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    parley: ParleyExtension
    status: int | None = Field(
        description="Langchain-Chatchat's agent status: 3 (the model's answer), 5 (an agent "
        "that ran tools, or Chatchat's route with `tools`), null on Chatchat's route without."
    )
    message_type: Literal[1]
    message_id: str


class DeltaFunction(Shape):
    name: str | None = None
    arguments: str


class DeltaToolCall(Shape):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunction


class Delta(Shape):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None
    function_call: DeltaFunction | None = Field(
        default=None, description="Legacy: for a request that gave `functions`."
    )


class ChunkChoice(Shape):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None
    finish_reason: FinishReason | None


class ChatchatToolCall(Shape):
    id: str
    name: str
    arguments: str
    tool_output: str | None
    is_error: bool


class ChatCompletionChunk(Shape):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice] = Field(description="Empty in the usage chunk.")
    usage: CompletionUsage | None = Field(
        default=None, description="With stream_options.include_usage: null, then the totals."
    )
    parley: ParleyExtension
    status: int | None = Field(
        default=None,
        description="Langchain-Chatchat's AgentStatus: 1 llm_start, 2 llm_new_token, 3 "
        "llm_end, 5 agent_finish, 6 tool_start, 7 tool_end; null for text on Chatchat's "
        "route without `tools`.",
    )
    message_type: Literal[1] | None = None
    message_id: str
    tool_calls: list[ChatchatToolCall] | None = Field(
        default=None, description="Langchain-Chatchat: a server tool's start or end."
    )
    is_ref: bool | None = Field(
        default=None,
        description="Langchain-Chatchat's direct tool call (`tool_choice` with `tool_input`): "
        "the first chunk, the tool's result to show apart, with `tool_call`, `tool_output`, "
        "`is_error` and `content` (its text).",
    )
    tool_call: str | None = None
    tool_output: Any = None
    is_error: bool | None = None
    content: str | None = None


class StreamErrorEvent(Shape):
    """A failure after the stream began; the stream then closes without ``[DONE]``."""

    error: ErrorObject
    parley: ParleyExtension
    status: Literal[8] = Field(description="Langchain-Chatchat's AgentStatus error.")
    message_id: str


class Task(Shape):
    id: str
    object: Literal["task"]
    created: int
    model: str
    status: Literal["stopped", "completed"]
    result: str | None
    finish_reason: FinishReason
    steps: list[ServerToolCall]
    usage: CompletionUsage
    parley: ParleyExtension
