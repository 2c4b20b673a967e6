"""The agent loop goes through the interceptor chain for every model call (each retry
and fallback attempt a call of its own) and every tool call, and tells it when the turn
ends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from parley.conversations.turns import ChatTurn
from parley.errors import InvalidRequest, ParleyError, ProviderError
from parley.events import Done, Restart, StreamError, TextDelta
from parley.identity import Caller
from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    Interceptor,
    ModelResponse,
    ToolCall,
    TurnEnd,
)
from parley.messages import TextPart, text_message
from parley.providers.protocol import ModelRequest
from parley.tools.protocol import ToolOutput
from tests.agent.test_loop import (
    MakeWorld,
    World,
    call,
    run,
    start,
    stored_reply,
    text_of,
    until,
)

pytestmark = pytest.mark.anyio


class Journal(Interceptor):
    def __init__(self) -> None:
        self.calls: list[CallInfo] = []
        self.errors: list[str] = []
        self.tools: list[tuple[str, dict[str, Any], str]] = []
        self.ends: list[TurnEnd] = []

    async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
        self.calls.append(call)

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        self.errors.append(error.code or error.type)

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> None:
        self.tools.append((tool_call.name, tool_call.arguments, output.content))

    async def on_turn_end(self, end: TurnEnd) -> None:
        self.ends.append(end)


def ask(text: str = "hi") -> ChatTurn:
    return ChatTurn(
        owner="me",
        caller=Caller("me", "key_1", "laptop"),
        source="chat.completions",
        model=None,
        messages=(text_message("user", text),),
        server_tools=("echo",),
    )


async def test_every_model_call_and_tool_call_goes_through_the_chain(make_world: MakeWorld) -> None:
    journal = Journal()
    world: World = await make_world(journal, retry_backoff_seconds=[0.01])
    world.primary.queue(*call("echo", '{"text": "a"}'))
    world.primary.say("done")
    generation, events = await run(world, ask())
    assert text_of(events) == "done"
    assert [(c.kind, c.name, c.purpose, c.attempt) for c in journal.calls] == [
        ("model", "smart", "chat", 0),
        ("model", "smart", "chat", 0),
    ]
    first = journal.calls[0]
    assert first.caller == Caller("me", "key_1", "laptop")
    assert first.turn.source == "chat.completions"
    assert first.turn.conversation_id == generation.conversation_id
    assert first.turn.message_id == generation.message_id
    assert (first.provider, first.upstream_model) == ("primary", "m1")
    assert journal.tools == [("echo", {"text": "a"}, "echo: a")]
    await until(lambda: journal.ends)  # turn-end hooks run in the background
    [end] = journal.ends
    assert (end.text, end.stop_reason, end.tool_calls, end.error) == ("done", "end_turn", 1, None)
    assert end.usage.input_tokens == 20  # both steps counted


async def test_retries_and_fallbacks_are_calls_of_their_own(make_world: MakeWorld) -> None:
    journal = Journal()
    world: World = await make_world(journal, retry_backoff_seconds=[0.01])
    for _ in range(2):
        world.primary.queue(
            ProviderError("busy", provider="primary", upstream_status=503, retryable=True)
        )
    world.backup.say("from backup")
    _, events = await run(world, ask())
    assert text_of(events) == "from backup"
    assert [(c.name, c.provider, c.attempt) for c in journal.calls] == [
        ("smart", "primary", 0),
        ("smart", "primary", 1),
        ("backup/m2", "backup", 2),
    ]
    assert journal.errors == ["upstream_error", "upstream_error"]


async def test_a_rewrite_replaces_what_is_shown_and_stored(make_world: MakeWorld) -> None:
    class Polite(Interceptor):
        async def after_response(self, response: ModelResponse, call: CallInfo) -> ModelResponse:
            return replace(response, text=response.text.replace("stupid", "unusual"))

    world: World = await make_world(Polite(), retry_backoff_seconds=[0.01])
    world.primary.say("a stupid question")
    generation, events = await run(world, ask())
    restarts = [e for e in events if isinstance(e, Restart)]
    assert [(r.reason, r.clear) for r in restarts] == [("rewritten", True)]
    after = events[events.index(restarts[0]) + 1 :]
    assert text_of(after) == "a unusual question"
    stored = await stored_reply(world, generation)
    assert stored.parts == (TextPart("a unusual question"),)


async def test_a_refusal_ends_the_turn_with_its_error(make_world: MakeWorld) -> None:
    class Closed(Interceptor):
        order = 10

        async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
            raise InvalidRequest("closed for lunch", code="closed")

    journal = Journal()
    world: World = await make_world(Closed(), journal, retry_backoff_seconds=[0.01])
    generation, events = await run(world, ask())
    assert isinstance(events[-1], StreamError)
    assert events[-1].error.message == "closed for lunch"
    assert world.primary.requests == []  # the provider was never called
    await until(lambda: journal.ends)
    assert journal.ends[0].error is not None
    assert journal.ends[0].error.code == "closed"
    stored = await stored_reply(world, generation)
    assert stored.status == "failed"


async def test_the_system_prompt_can_be_shaped_without_touching_history(
    make_world: MakeWorld,
) -> None:
    class Stamp(Interceptor):
        async def before_request(self, request: ModelRequest, call: CallInfo) -> ModelRequest:
            return replace(request, messages=(text_message("system", "stamped"), *request.messages))

    world: World = await make_world(Stamp(), retry_backoff_seconds=[0.01])
    world.primary.say("ok")
    generation, _ = await run(world, ask())
    sent = world.primary.requests[0].messages
    assert [m.role for m in sent] == ["system", "user"]
    assert generation.conversation_id is not None
    branch = await world.store.branch("me", generation.conversation_id)
    assert [m.role for m in branch] == ["user", "assistant"]


async def test_stream_hooks_see_every_chunk(make_world: MakeWorld) -> None:
    class Upper(Interceptor):
        def on_stream_event(self, event: Any, call: CallInfo) -> Any:
            return TextDelta(event.text.upper()) if isinstance(event, TextDelta) else None

    world: World = await make_world(Upper(), retry_backoff_seconds=[0.01])
    world.primary.say("quiet words", chunk=3)
    generation, events = await run(world, ask())
    assert text_of(events) == "QUIET WORDS"
    assert (await stored_reply(world, generation)).parts == (TextPart("QUIET WORDS"),)


async def test_an_abandoned_turn_still_ends_for_the_interceptors(make_world: MakeWorld) -> None:
    journal = Journal()
    world: World = await make_world(journal, retry_backoff_seconds=[0.01])
    world.primary.queue(TextDelta("partial"), 30.0, Done("end_turn"))
    generation, events = await start(world, ask())
    await until(lambda: text_of(events) == "partial")  # streamed, then the model stalls
    generation.detach(cancel=True)
    await generation.wait()
    await until(lambda: journal.ends)
    [end] = journal.ends
    assert isinstance(end.error, CallCancelled)
    assert end.text == "partial"
    assert journal.errors == ["cancelled"]  # the model call itself was abandoned too


async def test_calls_that_cannot_run_still_go_through_the_chain(make_world: MakeWorld) -> None:
    journal = Journal()
    world: World = await make_world(journal, retry_backoff_seconds=[0.01])
    world.primary.queue(*call("nope", "{}", "c1"))
    world.primary.queue(*call("echo", "{not json", "c2"))
    world.primary.say("gave up")
    await run(world, ask())
    assert [(name, args) for name, args, _ in journal.tools] == [("nope", {}), ("echo", {})]
    assert journal.tools[0][2].startswith("Unknown tool 'nope'. Available tools: echo")
    assert "malformed JSON" in journal.tools[1][2]
