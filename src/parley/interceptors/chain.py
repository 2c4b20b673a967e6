"""The interceptor chain: the one door every model call and tool call goes through.

The agent loop never calls a provider or a tool directly: it asks the chain, so that
interceptors (logging, audit, filters, usage limits, command hooks) can wrap every
call, retries and fallbacks included. Until the interceptor issue lands the chain is a
pass-through: ``stream`` is the provider's stream and ``call_tool`` is the tool's run.

What does not belong here: retries, deadlines and fallbacks (``agent/model_call.py``),
tool timeouts and output caps (``agent/tool_runner.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from parley.events import Event
from parley.providers.protocol import ModelRequest, Provider
from parley.tools.protocol import Tool, ToolContext, ToolOutput


class InterceptorChain:
    """Pass-through for now: no interceptor is installed."""

    def stream(self, provider: Provider, request: ModelRequest) -> AsyncIterator[Event]:
        return provider.stream(request)

    async def call_tool(
        self, tool: Tool, arguments: dict[str, Any], context: ToolContext
    ) -> ToolOutput:
        return await tool.run(arguments, context)
