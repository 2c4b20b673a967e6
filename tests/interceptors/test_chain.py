"""The chain itself: the onion order, replacement, failure policies, stream events,
rewrites, errors, cancellation, and tool calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from parley.errors import InvalidRequest, ParleyError, ProviderError
from parley.events import Done, Event, Restart, TextDelta, ToolCallDelta, UsageEvent
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    Interceptor,
    InterceptorFailed,
    ModelResponse,
    ToolCall,
    TurnInfo,
)
from parley.messages import Usage, text_message
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.tools.function import function_tool
from parley.tools.protocol import ToolContext, ToolOutput
from tests.tools.contexts import tool_context

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(model="m", messages=(text_message("user", "hi"),))


def call(kind: str = "model", name: str = "m") -> CallInfo:
    return CallInfo(kind, name, TurnInfo(), provider="p", upstream_model=name)  # type: ignore[arg-type]


def upstream(*events: Event, seen: list[ModelRequest] | None = None) -> Any:
    async def open(request: ModelRequest) -> AsyncGenerator[Event]:
        if seen is not None:
            seen.append(request)
        for event in events:
            yield event

    return open


async def collect(chain: InterceptorChain, info: CallInfo, open: Any) -> list[Event]:
    return [event async for event in chain.stream(info, REQUEST, open)]


class Recorder(Interceptor):
    """Writes each hook it runs into a shared journal."""

    def __init__(self, name: str, order: int, journal: list[str]) -> None:
        self.name = name
        self.order = order
        self.journal = journal

    async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
        self.journal.append(f"before {self.name}")

    def on_stream_event(self, event: Event, call: CallInfo) -> None:
        if isinstance(event, Done):
            self.journal.append(f"event {self.name}")

    async def after_response(self, response: ModelResponse, call: CallInfo) -> None:
        self.journal.append(f"after {self.name}")

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        self.journal.append(f"error {self.name}")

    async def before_tool_call(self, tool_call: ToolCall, call: CallInfo) -> None:
        self.journal.append(f"before_tool {self.name}")

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> None:
        self.journal.append(f"after_tool {self.name}")


def reply(text: str = "hello") -> Any:
    return upstream(TextDelta(text), UsageEvent(Usage(10, 2)), Done("end_turn"))


async def test_before_ascending_after_descending() -> None:
    journal: list[str] = []
    # given out of order, and two with the same order: ties keep their given order
    chain = InterceptorChain(
        [
            Recorder("c", 300, journal),
            Recorder("a", 10, journal),
            Recorder("b1", 200, journal),
            Recorder("b2", 200, journal),
        ]
    )
    await collect(chain, call(), reply())
    assert journal == [
        "before a",
        "before b1",
        "before b2",
        "before c",
        "event c",
        "event b2",
        "event b1",
        "event a",
        "after c",
        "after b2",
        "after b1",
        "after a",
    ]
    assert [item["name"] for item in chain.describe()] == ["a", "b1", "b2", "c"]


async def test_tool_hooks_follow_the_onion(tmp_path: Path) -> None:
    journal: list[str] = []
    chain = InterceptorChain([Recorder("late", 400, journal), Recorder("early", 5, journal)])

    @function_tool
    async def echo(context: ToolContext, text: str) -> str:
        """Echo."""
        journal.append("run")
        return text

    output = await chain.call_tool(
        echo, {"text": "x"}, tool_context(tmp_path), call("tool", "echo")
    )
    assert output == ToolOutput("x")
    assert journal == [
        "before_tool early",
        "before_tool late",
        "run",
        "after_tool late",
        "after_tool early",
    ]


class AddSystem(Interceptor):
    def __init__(self, text: str, order: int) -> None:
        self.text = text
        self.order = order

    async def before_request(self, request: ModelRequest, call: CallInfo) -> ModelRequest:
        return replace(request, messages=(text_message("system", self.text), *request.messages))


async def test_a_returned_request_replaces_the_input_for_the_next_and_upstream() -> None:
    seen: list[ModelRequest] = []
    chain = InterceptorChain([AddSystem("inner", 2), AddSystem("outer", 1)])
    info = call()
    await collect(chain, info, upstream(Done("end_turn"), seen=seen))
    texts = [m.parts[0].text for m in seen[0].messages]  # type: ignore[union-attr]
    assert texts == ["inner", "outer", "hi"]  # outer ran first, inner saw its result
    assert info.request is seen[0]


class Upper(Interceptor):
    order = 400

    def on_stream_event(self, event: Event, call: CallInfo) -> Event | None:
        return TextDelta(event.text.upper()) if isinstance(event, TextDelta) else None


class HoldUntilDone(Interceptor):
    """Holds every text back and releases it, joined, just before Done."""

    order = 300

    def on_stream_event(self, event: Event, call: CallInfo) -> Sequence[Event] | None:
        held: list[str] = call.data.setdefault(self, [])
        if isinstance(event, TextDelta):
            held.append(event.text)
            return []
        if isinstance(event, Done):
            return [TextDelta("".join(held)), event]
        return None


async def test_stream_events_can_be_changed_held_back_and_released() -> None:
    chain = InterceptorChain([HoldUntilDone(), Upper()])
    events = await collect(
        chain, call(), upstream(TextDelta("ab"), TextDelta("cd"), Done("end_turn"))
    )
    # Upper (400) is inner: it sees each chunk first; HoldUntilDone (300) joins them.
    assert events == [TextDelta("ABCD"), Done("end_turn")]


class Rewrite(Interceptor):
    async def after_response(self, response: ModelResponse, call: CallInfo) -> ModelResponse:
        return replace(response, text=response.text.replace("secret", "[gone]"))


async def test_a_rewritten_response_restarts_the_reply_with_the_new_content() -> None:
    chain = InterceptorChain([Rewrite()])
    events = await collect(chain, call(), reply("the secret"))
    assert events[:2] == [TextDelta("the secret"), UsageEvent(Usage(10, 2))]
    assert isinstance(events[2], Restart)
    assert events[2].reason == "rewritten"
    assert events[3:] == [TextDelta("the [gone]"), UsageEvent(Usage(10, 2)), Done("end_turn")]


async def test_an_unchanged_response_adds_nothing() -> None:
    chain = InterceptorChain([Rewrite()])
    events = await collect(chain, call(), reply("plain"))
    assert events == [TextDelta("plain"), UsageEvent(Usage(10, 2)), Done("end_turn")]


class Capture(Interceptor):
    def __init__(self) -> None:
        self.responses: list[ModelResponse] = []
        self.errors: list[ParleyError] = []

    async def after_response(self, response: ModelResponse, call: CallInfo) -> None:
        self.responses.append(response)

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        self.errors.append(error)


async def test_after_response_sees_the_whole_reply_priced() -> None:
    capture = Capture()
    chain = InterceptorChain([capture], pricing=PriceCatalog({}))
    events = upstream(
        TextDelta("a"),
        ToolCallDelta(0, "c1", "look", '{"q":'),
        ToolCallDelta(0, None, None, '"x"}'),
        UsageEvent(Usage(1_000_000, 1_000_000)),
        Done("tool_use"),
    )
    await collect(chain, call(name="gpt-4o-mini"), events)
    response = capture.responses[0]
    assert response.text == "a"
    assert response.stop_reason == "tool_use"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "look", '{"q":"x"}')
    ]
    assert response.cost_usd == pytest.approx(0.15 + 0.60)  # the built-in catalog's price
    assert response.first_event_seconds is not None


async def test_errors_reach_on_error_and_may_be_replaced() -> None:
    capture = Capture()

    class Translate(Interceptor):
        order = 1

        async def on_error(self, error: ParleyError, call: CallInfo) -> ParleyError:
            return InvalidRequest(f"translated: {error.message}")

    async def failing(request: ModelRequest) -> AsyncGenerator[Event]:
        yield TextDelta("partial")
        raise ProviderError("boom", provider="p", upstream_status=502)

    chain = InterceptorChain([Translate(), capture])
    with pytest.raises(InvalidRequest, match="translated: boom"):
        await collect(chain, call(), failing)
    assert [e.message for e in capture.errors] == ["boom"]  # inner ran first


async def test_a_stream_without_done_is_an_error_the_interceptors_see() -> None:
    capture = Capture()
    chain = InterceptorChain([capture])
    with pytest.raises(ProviderError, match="without finishing"):
        await collect(chain, call(), upstream(TextDelta("cut")))
    assert capture.errors[0].code == "upstream_incomplete"


async def test_an_abandoned_stream_is_reported_as_cancelled() -> None:
    capture = Capture()
    chain = InterceptorChain([capture])
    stream = chain.stream(call(), REQUEST, reply())
    assert await anext(stream) == TextDelta("hello")
    await stream.aclose()
    assert [type(e) for e in capture.errors] == [CallCancelled]
    assert capture.responses == []


async def test_closing_after_done_is_not_a_cancellation() -> None:
    capture = Capture()
    chain = InterceptorChain([capture])
    stream = chain.stream(call(), REQUEST, reply())
    async for event in stream:
        if isinstance(event, Done):
            break
    await stream.aclose()
    assert capture.errors == []
    assert len(capture.responses) == 1


class Broken(Interceptor):
    def __init__(self, order: int, fail_closed: bool | None = None) -> None:
        self.name = f"broken{order}"
        self.order = order
        self.fail_closed = fail_closed

    async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
        raise RuntimeError("bug")

    async def before_tool_call(self, tool_call: ToolCall, call: CallInfo) -> None:
        raise RuntimeError("bug")


async def test_failures_close_the_call_in_the_security_band() -> None:
    capture = Capture()
    chain = InterceptorChain([Broken(50), capture])
    with pytest.raises(InterceptorFailed, match="'broken50' failed in before_request"):
        await collect(chain, call(), reply())
    assert capture.errors[0].code == "interceptor_failed"


async def test_failures_are_skipped_outside_it(caplog: pytest.LogCaptureFixture) -> None:
    chain = InterceptorChain([Broken(150)])
    events = await collect(chain, call(), reply())
    assert events[-1] == Done("end_turn")
    assert "broken150 failed in before_request (fail open" in caplog.text


async def test_an_explicit_policy_wins_over_the_band() -> None:
    open_in_security = InterceptorChain([Broken(10, fail_closed=False)])
    assert (await collect(open_in_security, call(), reply()))[-1] == Done("end_turn")
    closed_elsewhere = InterceptorChain([Broken(300, fail_closed=True)])
    with pytest.raises(InterceptorFailed):
        await collect(closed_elsewhere, call(), reply())


async def test_a_decision_stands_whatever_the_policy() -> None:
    class Refuse(Interceptor):
        order = 300
        fail_closed = False

        async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
            raise InvalidRequest("not today", code="refused")

    seen: list[ModelRequest] = []
    with pytest.raises(InvalidRequest, match="not today"):
        await collect(InterceptorChain([Refuse()]), call(), upstream(Done("end_turn"), seen=seen))
    assert seen == []  # the upstream was never called


@function_tool
async def add(context: ToolContext, a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


async def test_before_tool_call_may_change_arguments_or_answer_instead(tmp_path: Path) -> None:
    class Double(Interceptor):
        async def before_tool_call(self, tool_call: ToolCall, call: CallInfo) -> ToolCall:
            return replace(tool_call, arguments={k: v * 2 for k, v in tool_call.arguments.items()})

    class Deny(Interceptor):
        async def before_tool_call(self, tool_call: ToolCall, call: CallInfo) -> ToolOutput:
            return ToolOutput("no adding today", is_error=True)

    info = call("tool", "add")
    assert await InterceptorChain([Double()]).call_tool(
        add, {"a": 1, "b": 2}, tool_context(tmp_path), info
    ) == ToolOutput("6")
    denied = await InterceptorChain([Deny()]).call_tool(
        add, {"a": 1, "b": 2}, tool_context(tmp_path), info
    )
    assert denied == ToolOutput("no adding today", is_error=True)


async def test_after_tool_call_may_replace_the_output(tmp_path: Path) -> None:
    class Annotate(Interceptor):
        async def after_tool_call(
            self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
        ) -> ToolOutput:
            return ToolOutput(f"{output.content} (checked)")

    output = await InterceptorChain([Annotate()]).call_tool(
        add, {"a": 2, "b": 2}, tool_context(tmp_path), call("tool", "add")
    )
    assert output == ToolOutput("4 (checked)")


async def test_tool_failures_become_error_results(tmp_path: Path) -> None:
    blocked = await InterceptorChain([Broken(20)]).call_tool(
        add, {"a": 1, "b": 1}, tool_context(tmp_path), call("tool", "add")
    )
    assert blocked.is_error
    assert "interceptor 'broken20' failed" in blocked.content
    skipped = await InterceptorChain([Broken(250)]).call_tool(
        add, {"a": 1, "b": 1}, tool_context(tmp_path), call("tool", "add")
    )
    assert skipped == ToolOutput("2")

    class Refuse(Interceptor):
        async def before_tool_call(self, tool_call: ToolCall, call: CallInfo) -> None:
            raise InvalidRequest("quota used up")

    refused = await InterceptorChain([Refuse()]).call_tool(
        add, {"a": 1, "b": 1}, tool_context(tmp_path), call("tool", "add")
    )
    assert refused == ToolOutput("Tool 'add' was blocked by Refuse: quota used up", is_error=True)


async def test_a_raising_tool_is_an_error_result_the_after_hooks_see(tmp_path: Path) -> None:
    class Explodes:
        spec = add.spec
        pinned = False

        async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
            raise OSError("disk on fire")

    journal: list[str] = []
    output = await InterceptorChain([Recorder("r", 100, journal)]).call_tool(
        Explodes(),
        {},
        tool_context(tmp_path),
        call("tool", "add"),  # type: ignore[arg-type]
    )
    assert output == ToolOutput("Tool 'add' failed: OSError: disk on fire", is_error=True)
    assert journal == ["before_tool r", "after_tool r"]


async def test_a_cancelled_tool_call_still_reaches_the_after_hooks(tmp_path: Path) -> None:
    seen: list[ToolOutput] = []

    class Watch(Interceptor):
        async def after_tool_call(
            self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
        ) -> None:
            seen.append(output)

    running = asyncio.Event()

    @function_tool
    async def slow(context: ToolContext) -> str:
        """Slow."""
        running.set()
        await asyncio.sleep(30)
        return "late"

    task = asyncio.create_task(
        InterceptorChain([Watch()]).call_tool(
            slow, {}, tool_context(tmp_path), call("tool", "slow")
        )
    )
    await asyncio.wait_for(running.wait(), 10)  # the tool is under way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [ToolOutput("Tool 'slow' was cancelled before it finished", is_error=True)]


async def test_an_empty_chain_is_the_upstream_itself() -> None:
    open = reply()
    info = call()
    chain = InterceptorChain()
    stream = chain.stream(info, REQUEST, open)
    assert [e async for e in stream][-1] == Done("end_turn")
    assert info.request is REQUEST
    assert not chain.wants_turn_end
