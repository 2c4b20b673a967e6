"""Runs one step's server-side tool calls, all at once.

Each call: arguments parsed (malformed JSON or a non-object is an error result and the
tool does not run), the tool looked up among those offered this step (an unknown or
hidden tool is an error result naming what is available), then run through the
interceptor chain, each under the same timeout (600 s default; they start together, so
one timer per step serves them all). Output is made valid Unicode,
spilled to the workspace when large and capped (``tools/output.py``). Calls start
together and report as each finishes (each result handed on at once, so a finished
call survives an interrupted step); cancelling the runner cancels every call still
running and gives it an "interrupted" result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Collection
from typing import Any

import orjson

from parley.events import Event, ToolFinished, ToolStarted
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallInfo, TurnInfo
from parley.messages import ToolCallPart, ToolResult, ToolSpec
from parley.settings import ToolSettings
from parley.tools.output import finish_output
from parley.tools.protocol import ToolContext, ToolOutput
from parley.tools.registry import ToolRegistry

ContextFor = Callable[[ToolCallPart], ToolContext]


def parse_arguments(call: ToolCallPart) -> dict[str, Any] | ToolOutput:
    """The call's arguments as an object, or the error result the model should see."""
    text = call.arguments.strip()
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return ToolOutput(
            f"Invalid arguments for tool '{call.name}': malformed JSON ({exc}). "
            "The tool did not run; call it again with a valid JSON object.",
            is_error=True,
        )
    if not isinstance(value, dict):
        return ToolOutput(
            f"Invalid arguments for tool '{call.name}': expected a JSON object, got "
            f"{type(value).__name__}. The tool did not run.",
            is_error=True,
        )
    return value


class ToolRunner:
    def __init__(
        self, registry: ToolRegistry, settings: ToolSettings, chain: InterceptorChain
    ) -> None:
        self._registry = registry
        self._settings = settings
        self._chain = chain

    async def run(
        self,
        calls: list[ToolCallPart],
        offered: Collection[str],
        context_for: ContextFor,
        on_result: Callable[[ToolCallPart], None],
        turn: TurnInfo | None = None,
        registry: ToolRegistry | None = None,
    ) -> AsyncGenerator[Event]:
        """Run ``calls`` concurrently, yielding start and finish events; each call,
        answered, goes to ``on_result`` the moment it finishes. Cancelling this cancels
        the calls still running; those get an "interrupted" result. ``registry`` is the
        request's own (with its MCP tools), else the server's."""
        tools = registry or self._registry
        tasks: dict[asyncio.Task[tuple[ToolOutput, float, float]], ToolCallPart] = {}
        finished: set[str] = set()
        # Each task reports itself when done: waiting is O(1) per call, where asyncio.wait
        # on the pending set would re-register callbacks on all of them every time.
        ready: asyncio.Queue[asyncio.Task[tuple[ToolOutput, float, float]]] = asyncio.Queue()
        # The calls start together, so one timer gives each the same timeout.
        timeout = self._settings.timeout_seconds
        expired = False
        began = time.time()

        def expire() -> None:
            nonlocal expired
            expired = True
            for task in tasks:
                task.cancel()  # those already done ignore it

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            for call in calls:
                yield ToolStarted(call.id, call.name, call.arguments)
                task = asyncio.create_task(
                    self._one(tools, call, offered, context_for, turn or TurnInfo()),
                    name=f"tool {call.name} {call.id}",
                )
                task.add_done_callback(ready.put_nowait)
                tasks[task] = call
            for _ in range(len(tasks)):
                task = await ready.get()
                call = tasks[task]
                if task.cancelled():
                    if expired:
                        text = f"Tool '{call.name}' timed out after {timeout:g} s"
                    else:  # the tool cancelled itself: not the turn's business
                        text = f"Tool '{call.name}' was cancelled"
                    output = ToolOutput(text, is_error=True)
                    started_at, seconds = round(began, 3), round(time.time() - began, 6)
                else:
                    output, started_at, seconds = task.result()
                content = _valid_text(output.content)
                result = ToolResult(content, output.is_error, started_at, seconds)
                on_result(call.answered(result))
                finished.add(call.id)
                yield ToolFinished(
                    call.id, call.name, call.arguments, content, output.is_error, seconds
                )
        finally:
            timer.cancel()
            for task, call in tasks.items():
                task.cancel()
                if call.id not in finished:
                    note = f"[Tool '{call.name}' was interrupted before it finished]"
                    on_result(call.answered(ToolResult(note, is_error=True)))
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(
        self,
        registry: ToolRegistry,
        call: ToolCallPart,
        offered: Collection[str],
        context_for: ContextFor,
        turn: TurnInfo,
    ) -> tuple[ToolOutput, float, float]:
        started_at = time.time()
        started = time.monotonic()
        output = await self._output(registry, call, offered, context_for, turn)
        return output, round(started_at, 3), round(time.monotonic() - started, 6)

    async def _output(
        self,
        registry: ToolRegistry,
        call: ToolCallPart,
        offered: Collection[str],
        context_for: ContextFor,
        turn: TurnInfo,
    ) -> ToolOutput:
        tool = registry.get(call.name) if call.name in offered else None
        arguments = parse_arguments(call)
        context = context_for(call)
        info = CallInfo("tool", call.name, turn, purpose="tool", call_id=call.id)
        if tool is None or isinstance(arguments, ToolOutput):
            # Not run, but still a tool call the interceptors see (and audit).
            if tool is None:
                available = ", ".join(sorted(offered)) or "none"
                answer = ToolOutput(
                    f"Unknown tool '{call.name}'. Available tools: {available}.", is_error=True
                )
            else:
                assert isinstance(arguments, ToolOutput)
                answer = arguments
            return await self._chain.call_tool(_Refused(call.name, answer), {}, context, info)
        # The step's timer (in ``run``) cancels it when its time is up; the chain turns
        # any failure into an error result.
        output = await self._chain.call_tool(tool, arguments, context, info)
        if len(output.content) * 4 <= self._settings.spill_bytes and (
            len(output.content) <= self._settings.max_output_chars
        ):
            return output  # too small to spill or cap, whatever its encoding
        return await asyncio.to_thread(
            finish_output,
            output,
            call_id=call.id,
            workspace=context.workspace,
            settings=self._settings,
        )


class _Refused:
    """A stand-in for a call that cannot run (an unknown tool, unreadable arguments):
    its "run" is the error the model is told."""

    pinned = False

    def __init__(self, name: str, answer: ToolOutput) -> None:
        self.spec = ToolSpec(name, "", {})
        self._answer = answer

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        return self._answer


def _valid_text(text: str) -> str:
    """Text that can be stored and sent as JSON: lone surrogates (a file name that was
    not UTF-8, say) become U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
