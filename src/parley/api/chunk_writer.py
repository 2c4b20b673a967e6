"""A generation's events as ``chat.completion.chunk`` frames: one writer, in stages.

    generation -> DisplayStage -> CoalesceStage -> ChunkWriter -> write(bytes)
                  (the assistant's   (text and      (one exhaustive match:
                   display rules)     reasoning      OpenAI chunks, Chatchat's
                                      batched)       fields, Parley's extension)

Each stage is an async callable taking an ``Event``; a stage exists only when it does
something (most streams have neither of the first two). Whatever fails in a stage, the
response ends (``write(None)``).

The 200 waits for output: until the first event worth showing, statuses and usage are
kept back, and a failure is recorded (``ChunkWriter.failed_first``) for the HTTP error
the client gets instead of a stream.

What does not belong here: the HTTP response (``replies.stream_response``), frame
encoding (``sse.ChunkEncoder``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, assert_never

from parley.api.coalesce import Coalescer
from parley.api.sse import DONE, ChunkEncoder
from parley.api.statuses import AgentStatus, Dialect
from parley.errors import ParleyError
from parley.events import (
    FINISH_REASONS,
    Done,
    Event,
    Logprobs,
    ReasoningDelta,
    Restart,
    Status,
    StepDone,
    StopReason,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolStarted,
    UsageEvent,
)
from parley.messages import Usage
from parley.transforms.output import DisplayRewriter

Write = Callable[[bytes | None], Awaitable[None]]
"""Sends bytes to the client; None ends the response."""
Stage = Callable[[Event], Awaitable[None]]


class ChunkWriter:
    """Events to frames. ``ending`` says, when the reply ends, what its last chunk
    carries (finish status, the repeated answer, Parley's summary) from the finished
    generation."""

    def __init__(
        self,
        encoder: ChunkEncoder,
        write: Write,
        *,
        dialect: Dialect,
        legacy: bool,
        include_usage: bool,
        header: Sequence[dict[str, Any]],
        ending: Callable[[], Ending],
    ) -> None:
        self._encoder = encoder
        self._write = write
        self._dialect = dialect
        self._legacy = legacy
        self._include_usage = include_usage
        self._header = header
        self._ending = ending
        self._token = dialect.text(AgentStatus.LLM_NEW_TOKEN)
        self._usage: Usage | None = None
        self.started = False
        """The 200 and the first chunks went out."""
        self.failed_first: ParleyError | None = None
        """The reply failed before anything was shown (an HTTP error instead)."""

    async def text(self, kind: str, text: str) -> None:
        """Answer or reasoning text (the coalescer's writer)."""
        await self._write(self._encoder.delta({kind: text}, self._token))

    async def __call__(self, event: Event) -> None:
        if not self.started:
            if isinstance(event, StreamError):
                self.failed_first = event.error
                await self._write(None)
                return
            if isinstance(event, Status | Restart | UsageEvent | StepDone):
                if isinstance(event, UsageEvent):
                    self._usage = event.usage
                return  # nothing to show (or clear) yet: the 200 waits for output
            await self._start()
        await self._frame(event)

    async def _start(self) -> None:
        self.started = True
        opening = self._dialect.text(AgentStatus.LLM_START)
        for fields in self._header:
            await self._write(self._encoder.progress(opening, {}, fields))
        await self._write(self._encoder.delta({"role": "assistant", "content": ""}, opening))

    async def _frame(self, event: Event) -> None:
        encoder, write, token = self._encoder, self._write, self._token
        match event:
            case TextDelta(text=text):
                await write(encoder.delta({"content": text}, token))
            case ReasoningDelta(text=text):
                if text:
                    await write(encoder.delta({"reasoning_content": text}, token))
            case ToolCallDelta():
                await self._tool_call(event)
            case ToolStarted(call_id=call_id, name=name, arguments=arguments):
                tool = {"id": call_id, "name": name, "arguments": arguments}
                await self._tool_progress(AgentStatus.TOOL_START, tool, None, False, None)
            case ToolFinished():
                tool = {"id": event.call_id, "name": event.name, "arguments": event.arguments}
                seconds = round(event.seconds, 3)
                await self._tool_progress(
                    AgentStatus.TOOL_END, tool, event.output, event.is_error, seconds
                )
            case Restart():
                restart = {
                    "reason": event.reason,
                    "attempt": event.attempt,
                    "model": event.model,
                    "delay_seconds": round(event.delay_seconds, 3),
                    "clear": event.clear,
                    "keep_content_chars": event.keep_content_chars,
                }
                await write(encoder.progress(token, {"restart": restart}))
            case Status(name=name, detail=detail):
                # "thinking" opens each later step of an agent turn (Chatchat llm_start)
                step = AgentStatus.LLM_START if name == "thinking" else AgentStatus.LLM_NEW_TOKEN
                status = {"name": name, "detail": detail}
                await write(encoder.progress(self._dialect.text(step), {"status": status}))
            case Logprobs():
                await write(encoder.logprobs(event, token))
            case UsageEvent(usage=usage):
                self._usage = usage
            case StepDone():
                pass  # the step is saved; nothing to show
            case Done(stop_reason=reason):
                await write(self._finish(reason))
                await write(None)
            case StreamError(error=error):
                await write(encoder.error(error.message, error.type, error.code))
                await write(None)
            case _:
                assert_never(event)

    async def _tool_call(self, event: ToolCallDelta) -> None:
        """A fragment of a call to one of the client's tools."""
        if self._legacy:
            if event.index == 0:  # a legacy reply has one call (parallel calls are off)
                call = {"name": event.name, "arguments": event.arguments} if event.name else {}
                call.setdefault("arguments", event.arguments)
                await self._write(self._encoder.delta({"function_call": call}, self._token))
            return
        function: dict[str, str] = {"arguments": event.arguments}
        fragment: dict[str, Any] = {"index": event.index}
        if event.id is not None:  # a call's first fragment
            fragment["id"] = event.id
            fragment["type"] = "function"
            function = {"name": event.name or "", "arguments": event.arguments}
        elif event.name:
            function["name"] = event.name
        fragment["function"] = function
        await self._write(self._encoder.delta({"tool_calls": [fragment]}, self._token))

    async def _tool_progress(
        self,
        status: AgentStatus,
        tool: dict[str, Any],
        output: str | None,
        is_error: bool,
        seconds: float | None,
    ) -> None:
        """A server tool's start (``seconds`` None) or end: Parley's ``tool`` progress,
        and the call in Chatchat's fields."""
        result = {"tool_output": output, "is_error": is_error}
        if seconds is None:
            progress = {"tool": {"phase": "start", **tool}}
        else:
            progress = {"tool": {"phase": "end", **tool, **result, "seconds": seconds}}
        await self._write(
            self._encoder.progress(
                status,
                progress,
                {"tool_calls": [{**tool, **result}]},
                delta=_chatchat_call(self._dialect, tool, result),
            )
        )

    def _finish(self, reason: StopReason) -> bytes:
        ending = self._ending()
        frames = self._encoder.finish(
            finish_reason(reason, self._legacy),
            ending.summary,
            ending.status,
            ending.answer,
        )
        if self._include_usage:
            frames += self._encoder.usage(self._usage or Usage())
        return frames + DONE


class Ending:
    """What a reply's last chunk carries, read from the finished generation."""

    __slots__ = ("answer", "status", "summary")

    def __init__(self, summary: dict[str, Any], status: int | None, answer: str | None) -> None:
        self.summary = summary
        """Parley's extension (cost, citations, pending approvals, a stop)."""
        self.status = status
        """Chatchat's finishing status (None: not on this route)."""
        self.answer = answer
        """The whole answer again (Chatchat's routes that repeat it)."""


def finish_reason(reason: StopReason, legacy: bool) -> str:
    """OpenAI's ``finish_reason`` for a stop reason (``function_call`` for a legacy
    request's call)."""
    finish = FINISH_REASONS[reason]
    return "function_call" if legacy and finish == "tool_calls" else finish


def _chatchat_call(
    dialect: Dialect, tool: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any] | None:
    """A server tool's start or end in the delta, as Chatchat's agent chat sends it
    (``delta.tool_calls``, with ``tool_output`` and ``is_error``); None on other routes,
    whose clients would take a call in the delta for one of their own to run."""
    if not dialect.tool_calls_in_delta:
        return None
    function = {"name": tool["name"], "arguments": tool["arguments"]}
    call = {"index": 0, "id": tool["id"], "type": "function", "function": function}
    return {"content": "", "tool_calls": [{**call, **result}]}


def closing(stage: Stage, write: Write) -> Stage:
    """``stage``, ending the response whatever fails in it."""

    async def guarded(event: Event) -> None:
        try:
            await stage(event)
        except BaseException:
            await write(None)
            raise

    return guarded


def coalescing(writer: ChunkWriter, coalescer: Coalescer) -> Stage:
    """Answer and reasoning text batched (``server.coalesce_ms``); anything else sends
    what is held first."""

    async def stage(event: Event) -> None:
        try:
            if writer.started:
                if event.__class__ is TextDelta:
                    await coalescer.add("content", event.text)
                    return
                if event.__class__ is ReasoningDelta:
                    await coalescer.add("reasoning_content", event.text)
                    return
                await coalescer.flush()  # what is held goes before anything else
                if isinstance(event, Done | StreamError):
                    coalescer.close()
            await writer(event)
        except BaseException:
            coalescer.close()
            raise

    return stage


def displaying(rewriter: DisplayRewriter, then: Stage) -> Stage:
    """The assistant's display rules on the answer text: shown, never stored. What the
    rewriter holds back goes out before a step ends, a tool runs or the reply ends, and
    is dropped with output a restart clears."""

    async def stage(event: Event) -> None:
        if isinstance(event, TextDelta):
            text = rewriter.feed(event.text)
            if not text:
                return
            event = TextDelta(text)
        elif isinstance(event, Restart | StreamError):
            rewriter.finish()  # what it held belongs to output being dropped
        elif not isinstance(event, ReasoningDelta | UsageEvent):
            tail = rewriter.finish()
            if tail:
                await then(TextDelta(tail))
        await then(event)

    return stage
