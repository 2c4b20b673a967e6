"""The logging interceptor (Snail AI's ``LoggingInterceptor``, order 100): one line per
model call, tool call and turn, on the ``parley.calls`` logger.

A model call logs its purpose, model, message count, attempt, finish reason, latency
(first event and total) and tokens; a tool call its name, outcome and time; a turn its
stop reason, tokens and cost. Prompts, replies and tool arguments are logged only with
``include_content`` (they may hold secrets); API keys never are.
"""

from __future__ import annotations

import logging

from parley.errors import ParleyError
from parley.events import FINISH_REASONS
from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    Interceptor,
    ModelResponse,
    ToolCall,
    TurnEnd,
)
from parley.providers.protocol import ModelRequest
from parley.settings.interceptors import LoggingInterceptorSettings
from parley.tools.protocol import ToolOutput

log = logging.getLogger("parley.calls")


class CallLogger(Interceptor):
    name = "logging"

    def __init__(self, settings: LoggingInterceptorSettings) -> None:
        self.order = settings.order
        self._content = settings.include_content

    def describe(self) -> dict[str, object]:
        return {"include_content": self._content}

    async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
        log.info(
            "model call %s -> %s (%s) by %s: messages=%d tools=%d attempt=%d",
            call.purpose,
            call.name,
            call.provider,
            call.caller.owner,
            len(request.messages),
            len(request.tools),
            call.attempt,
        )
        if self._content:
            log.info("model call %s request: %r", call.name, request.messages)

    async def after_response(self, response: ModelResponse, call: CallInfo) -> None:
        usage = response.usage
        first = response.first_event_seconds
        log.info(
            "model call %s -> %s finished: %s in %.0f ms (first event %s), "
            "tokens %s in / %s out, cost %s",
            call.purpose,
            call.name,
            FINISH_REASONS[response.stop_reason],
            response.seconds * 1000,
            "-" if first is None else f"{first * 1000:.0f} ms",
            "?" if usage is None else usage.input_tokens,
            "?" if usage is None else usage.output_tokens,
            "?" if response.cost_usd is None else f"${response.cost_usd:.6f}",
        )
        if self._content:
            log.info("model call %s reply: %r", call.name, response.text)

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        if isinstance(error, CallCancelled):
            log.info(
                "model call %s -> %s abandoned after %.0f ms",
                call.purpose,
                call.name,
                call.elapsed * 1000,
            )
            return
        log.warning(
            "model call %s -> %s failed after %.0f ms: %s (%s)",
            call.purpose,
            call.name,
            call.elapsed * 1000,
            error.code or error.type,
            error.message,
        )

    async def before_tool_call(self, tool_call: ToolCall, call: CallInfo) -> None:
        if self._content:
            log.info("tool %s %s arguments: %r", tool_call.name, tool_call.id, tool_call.arguments)

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> None:
        log.info(
            "tool %s %s: %s in %.0f ms, %d chars",
            tool_call.name,
            tool_call.id,
            "error" if output.is_error else "ok",
            call.elapsed * 1000,
            len(output.content),
        )
        if self._content:
            log.info("tool %s %s result: %r", tool_call.name, tool_call.id, output.content)

    async def on_turn_end(self, end: TurnEnd) -> None:
        log.info(
            "turn %s ended: %s, %d tool calls, tokens %d in / %d out, cost $%.6f%s",
            end.turn.message_id,
            "error " + (end.error.code or end.error.type) if end.error else end.stop_reason,
            end.tool_calls,
            end.usage.input_tokens,
            end.usage.output_tokens,
            end.cost_usd,
            "" if end.turn.conversation_id is None else f" ({end.turn.conversation_id})",
        )
