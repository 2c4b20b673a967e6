"""Message repair: make a history valid for every provider before a model call.

Only the outgoing request is repaired; stored messages are never changed. Today this
holds one step of the pipeline (behaviours.md section 2, step 5): a tool call without a
result gets a synthetic one, so that a history where a client never answered its tool
calls can still be continued (OpenAI and Anthropic refuse an unanswered call).
"""

from __future__ import annotations

from collections.abc import Iterable

from parley.messages import Message, ToolCallPart, ToolResult


def lost_result(name: str) -> ToolResult:
    return ToolResult(f"[Tool '{name}' result was lost - no output available]", is_error=True)


def synthesize_missing_tool_results(messages: Iterable[Message]) -> list[Message]:
    repaired: list[Message] = []
    for message in messages:
        if any(isinstance(p, ToolCallPart) and p.result is None for p in message.parts):
            message = Message(
                message.role,
                tuple(
                    p.answered(lost_result(p.name))
                    if isinstance(p, ToolCallPart) and p.result is None
                    else p
                    for p in message.parts
                ),
                message.name,
            )
        repaired.append(message)
    return repaired
