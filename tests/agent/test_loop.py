"""The agent loop end to end below HTTP: scripted provider, real tools, real SQLite."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from parley.conversations.generation import Generation
from parley.conversations.service import ConversationService
from parley.conversations.turns import ChatTurn
from parley.errors import Overloaded, ProviderError
from parley.events import (
    Done,
    Event,
    ReasoningDelta,
    Restart,
    Status,
    StreamError,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolStarted,
    UsageEvent,
)
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import Interceptor
from parley.messages import (
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolSpec,
    Usage,
    text_message,
)
from parley.providers.registry import ProviderRegistry
from parley.providers.scripted import ScriptedProvider
from parley.settings import ModelAlias, ProviderSettings, Settings
from parley.store.database import Database
from parley.store.repository import ConversationStore
from parley.tools.function import function_tool
from parley.tools.protocol import ToolContext
from parley.tools.registry import ToolRegistry
from parley.tools.workspaces import conversation_workspace
from tests.support.databases import migrated_database

pytestmark = pytest.mark.anyio


class Tools:
    """Test tools that record what ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.cancelled = 0
        self.registry = ToolRegistry()
        self.registry.register(function_tool(name="echo")(self.echo))
        self.registry.register(function_tool(name="nap")(self.nap))
        self.registry.register(function_tool(name="big")(self.big))

    async def echo(self, text: str) -> str:
        """Echo the text back."""
        self.ran.append(f"echo:{text}")
        return f"echo: {text}"

    async def nap(self, seconds: float) -> str:
        """Sleep a while."""
        self.ran.append("nap")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "rested"

    async def big(self, context: ToolContext) -> str:
        """A large output."""
        return "x" * 40_000


class World:
    def __init__(
        self, service: ConversationService, store: ConversationStore, tools: Tools
    ) -> None:
        self.service = service
        self.store = store
        self.tools = tools

    @property
    def primary(self) -> ScriptedProvider:
        provider = self.service._registry.providers["primary"]
        assert isinstance(provider, ScriptedProvider)
        return provider

    @property
    def backup(self) -> ScriptedProvider:
        provider = self.service._registry.providers["backup"]
        assert isinstance(provider, ScriptedProvider)
        return provider


MakeWorld = Callable[..., Awaitable[World]]


@pytest.fixture
async def make_world(tmp_path: Path) -> AsyncIterator[MakeWorld]:
    databases: list[Database] = []

    async def make(*interceptors: Interceptor, **agent: Any) -> World:
        """A world whose agent settings are ``agent`` and whose calls go through
        ``interceptors``."""
        providers = [
            ProviderSettings(name="primary", kind="scripted", models=["m1"]),
            ProviderSettings(name="backup", kind="scripted", models=["m2"]),
        ]
        settings = Settings(
            data_dir=tmp_path,
            providers=providers,
            agent={"retry_backoff_seconds": [0.01, 0.01, 0.01], **agent},  # type: ignore[arg-type]
            models={"smart": ModelAlias(provider="primary", model="m1", fallbacks=["backup/m2"])},
            pricing={"m1": {"input": 1000.0, "output": 2000.0}},  # type: ignore[dict-item]
        )
        database = await migrated_database(settings)
        databases.append(database)
        store = ConversationStore(database)
        registry = ProviderRegistry(
            [(p, ScriptedProvider(p.name)) for p in providers],
            settings.models,
            "smart",
        )
        tools = Tools()
        chain = InterceptorChain(interceptors)
        service = ConversationService(settings, store, registry, tools.registry, chain=chain)
        return World(service, store, tools)

    yield make
    for database in databases:
        await database.dispose()


async def start(world: World, turn: ChatTurn) -> tuple[Generation, list[Event]]:
    generation = await world.service.prepare(turn)
    events: list[Event] = []

    async def sink(event: Event) -> None:
        events.append(event)

    world.service.start(generation, sink)
    return generation, events


async def run(world: World, turn: ChatTurn) -> tuple[Generation, list[Event]]:
    generation, events = await start(world, turn)
    await generation.wait()
    return generation, events


def ask(
    text: str = "hi",
    *,
    tools: tuple[str, ...] = ("echo", "nap", "big"),
    client_tools: tuple[ToolSpec, ...] = (),
    stream: bool = True,
) -> ChatTurn:
    return ChatTurn(
        owner="me",
        model=None,
        messages=(text_message("user", text),),
        server_tools=tools,
        tools=client_tools,
        stream=stream,
    )


async def until(condition: Callable[[], object], seconds: float = 2.0) -> None:
    """Wait for ``condition`` to hold, failing the test if it does not in time."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def call(
    name: str, arguments: str, call_id: str = "c1", index: int = 0, tokens: int = 10
) -> list[Event]:
    return [
        ToolCallDelta(index, call_id, name, arguments),
        UsageEvent(Usage(input_tokens=tokens, output_tokens=tokens)),
        Done("tool_use"),
    ]


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def stored_reply(world: World, generation: Generation) -> Any:
    assert generation.conversation_id is not None
    branch = await world.store.branch("me", generation.conversation_id)
    return branch[-1]


# --- the basic paths -------------------------------------------------------------------


async def test_plain_reply_is_one_model_call(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.say("hello")
    _, events = await run(world, ask(tools=()))
    assert text_of(events) == "hello"
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "end_turn"
    assert len(world.primary.requests) == 1
    assert world.primary.requests[0].tools == ()


async def test_server_tool_runs_and_the_model_sees_its_result(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("Let me check."), *call("echo", '{"text": "ping"}'))
    world.primary.say("It said ping.")
    generation, events = await run(world, ask())
    assert world.tools.ran == ["echo:ping"]
    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [(e.name, e.arguments) for e in started] == [("echo", '{"text": "ping"}')]
    assert [(e.output, e.is_error) for e in finished] == [("echo: ping", False)]
    assert not any(isinstance(e, ToolCallDelta) for e in events)  # never client tool_calls
    assert text_of(events) == "Let me check.\n\nIt said ping."
    second = world.primary.requests[1]
    assert {s.name for s in second.tools} == {"echo", "nap", "big"}
    calls = [p for m in second.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert calls[0].result is not None
    assert calls[0].result.content == "echo: ping"
    reply = await stored_reply(world, generation)
    assert reply.status == "complete"
    kinds = [type(p).__name__ for p in reply.parts]
    assert kinds == ["TextPart", "ToolCallPart", "TextPart"]
    assert reply.parts[1].result.content == "echo: ping"


async def test_parallel_tools_take_the_time_of_one(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(
        # distinct arguments: eight identical calls would be a loop
        *[ToolCallDelta(i, f"c{i}", "nap", f'{{"seconds": {0.2 + i / 1000}}}') for i in range(8)],
        Done("tool_use"),
    )
    world.primary.say("rested")
    began = time.monotonic()
    _, events = await run(world, ask())
    elapsed = time.monotonic() - began
    assert world.tools.ran == ["nap"] * 8
    assert len([e for e in events if isinstance(e, ToolFinished)]) == 8
    assert elapsed < 0.2 * 3, f"8 tools of 200 ms took {elapsed:.2f} s"


async def test_client_tool_ends_the_turn_with_standard_tool_calls(make_world: MakeWorld) -> None:
    world = await make_world()
    weather = ToolSpec("get_weather", "Weather", {"type": "object", "properties": {}})
    world.primary.queue(
        ToolCallDelta(0, "s1", "echo", '{"text": "a"}'),
        ToolCallDelta(1, "k1", "get_weather", '{"city": "Oslo"}'),
        Done("tool_use"),
    )
    generation, events = await run(world, ask(client_tools=(weather,)))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.id, d.name) for d in deltas] == [(0, "k1", "get_weather")]
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "tool_use"
    assert world.tools.ran == ["echo:a"]  # the server's call ran, the client's did not
    reply = await stored_reply(world, generation)
    results = {p.name: p.result for p in reply.parts if isinstance(p, ToolCallPart)}
    assert results["get_weather"] is None
    assert results["echo"] is not None


# --- bad tool calls ---------------------------------------------------------------------


async def test_malformed_arguments_are_an_error_result_and_the_tool_does_not_run(
    make_world: MakeWorld,
) -> None:
    world = await make_world()
    world.primary.queue(*call("echo", '{"text": "unterminated'))
    world.primary.say("sorry")
    _, events = await run(world, ask())
    assert world.tools.ran == []
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.is_error
    assert "malformed JSON" in finished.output


async def test_unknown_and_invalid_calls_are_error_results(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(
        ToolCallDelta(0, "a", "nope", "{}"),
        ToolCallDelta(1, "b", "echo", '{"text": 5, "extra": 1}'),
        Done("tool_use"),
    )
    world.primary.say("ok")
    _, events = await run(world, ask())
    outputs = {e.name: e for e in events if isinstance(e, ToolFinished)}
    assert outputs["nope"].is_error
    assert "Unknown tool 'nope'" in outputs["nope"].output
    assert outputs["echo"].is_error
    assert "Invalid arguments" in outputs["echo"].output
    assert world.tools.ran == []


async def test_tool_timeout_is_an_error_result(make_world: MakeWorld) -> None:
    world = await make_world()
    world.service._settings.tools.timeout_seconds = 0.1
    world.primary.queue(*call("nap", '{"seconds": 5}'))
    world.primary.say("too slow")
    _, events = await run(world, ask())
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.is_error
    assert "timed out" in finished.output
    assert world.tools.cancelled == 1


async def test_large_output_spills_to_the_workspace(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(*call("big", "{}", call_id="call_big"))
    world.primary.say("done")
    generation, events = await run(world, ask())
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert len(finished.output.encode()) < 4096 + 1024
    assert "tool_outputs/call_big.txt" in finished.output
    saved = conversation_workspace(
        world.service._settings.workspace_dir, "me", str(generation.conversation_id)
    )
    assert (saved / "tool_outputs" / "call_big.txt").read_text() == "x" * 40_000


# --- loop detection and budgets ---------------------------------------------------------


async def test_runaway_model_is_warned_then_stopped(make_world: MakeWorld) -> None:
    world = await make_world()
    for i in range(20):
        world.primary.queue(*call("echo", '{"text": "again"}', call_id=f"c{i}"))
    generation, events = await run(world, ask())
    # three calls run, the fourth (completing the loop) gets a warning, then three more
    # run, and the next completed loop ends the turn
    assert len(world.tools.ran) <= 6
    assert len(world.primary.requests) <= 8
    warnings = [e for e in events if isinstance(e, ToolFinished) and "Loop detected" in e.output]
    assert len(warnings) == 1
    assert "repeating" in text_of(events)
    assert isinstance(events[-1], Done)
    reply = await stored_reply(world, generation)
    assert reply.error["code"] == "loop_detected"


async def test_iteration_budget(make_world: MakeWorld) -> None:
    world = await make_world(max_iterations=3)
    for i in range(5):
        world.primary.queue(*call("echo", f'{{"text": "{i}"}}', call_id=f"c{i}"))
    generation, events = await run(world, ask())
    assert len(world.primary.requests) == 3
    assert "[Reached max iterations (3)]" in text_of(events)
    assert any(isinstance(e, Status) and e.name == "stopped" for e in events)
    reply = await stored_reply(world, generation)
    assert reply.error["code"] == "max_iterations"
    assert reply.status == "complete"
    assert [p.result is not None for p in reply.parts if isinstance(p, ToolCallPart)] == [True] * 3


async def test_no_progress_budget(make_world: MakeWorld) -> None:
    world = await make_world(no_progress_seconds=0.3)
    world.tools.registry.register(function_tool(name="fail")(failing))
    for i in range(20):
        world.primary.queue(*call("fail", f'{{"n": {i}}}', call_id=f"c{i}"))
    _, events = await run(world, ask(tools=("fail",)))
    assert "[No progress for" in text_of(events)
    assert 2 <= len(world.primary.requests) < 20


async def failing(n: int) -> str:
    """Always fails, slowly."""
    await asyncio.sleep(0.1)
    raise RuntimeError(f"attempt {n} failed")


async def test_wall_clock_budget(make_world: MakeWorld) -> None:
    world = await make_world(wall_clock_seconds=0.25)
    for i in range(20):
        world.primary.queue(*call("nap", f'{{"seconds": 0.1{i}}}', call_id=f"c{i}"))
    generation, events = await run(world, ask())
    assert "[Time budget exceeded" in text_of(events)
    assert 2 <= len(world.primary.requests) <= 4
    assert (await stored_reply(world, generation)).error["code"] == "time_budget"


async def test_idle_tools_are_hidden_and_can_be_brought_back(make_world: MakeWorld) -> None:
    world = await make_world()
    settings = world.service._settings.tools
    settings.max_active = 2
    world.tools.registry.register(function_tool(name="activate_tools", pinned=True)(activate))
    world.primary.queue(*call("activate_tools", '{"names": ["big"]}'))
    world.primary.say("done")
    _, events = await run(world, ask(tools=("echo", "nap", "big")))
    first = [spec.name for spec in world.primary.requests[0].tools]
    assert first == ["echo", "nap", "activate_tools"]  # two active, the third hidden
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert "big" in finished.output
    second = [spec.name for spec in world.primary.requests[1].tools]
    assert "big" in second


async def activate(context: ToolContext, names: list[str]) -> str:
    """Bring hidden tools back."""
    assert context.session is not None
    return f"active: {context.session.activate(names)}"


async def test_tool_timings_are_recorded(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(*call("nap", '{"seconds": 0.1}'))
    world.primary.say("ok")
    before = time.time()
    generation, _ = await run(world, ask())
    reply = await stored_reply(world, generation)
    result = next(p for p in reply.parts if isinstance(p, ToolCallPart)).result
    assert result.started_at >= before - 0.01
    assert 0.1 <= result.seconds < 1


async def test_token_budget_counts_every_step(make_world: MakeWorld) -> None:
    world = await make_world(max_turn_tokens=50)
    for i in range(5):
        world.primary.queue(*call("echo", f'{{"text": "{i}"}}', call_id=f"c{i}", tokens=10))
    _, events = await run(world, ask())
    assert len(world.primary.requests) == 3  # 20 tokens per call: 60 >= 50 after three
    assert "Token budget exceeded (60 of 50)" in text_of(events)


async def test_cost_budget_and_cost_reporting(make_world: MakeWorld) -> None:
    world = await make_world(max_turn_cost_usd=0.05)
    for i in range(5):
        world.primary.queue(*call("echo", f'{{"text": "{i}"}}', call_id=f"c{i}", tokens=10))
    generation, events = await run(world, ask())
    # each call: 10 input x $1000/M + 10 output x $2000/M = $0.03
    assert len(world.primary.requests) == 2
    assert "Cost budget exceeded" in text_of(events)
    assert generation.cost["response_usd"] == pytest.approx(0.06)
    reply = await stored_reply(world, generation)
    assert reply.usage["response_usd"] == pytest.approx(0.06)
    assert reply.usage["input_tokens"] == 20


async def test_conversation_cost_adds_up_the_branch(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.say("one", usage=Usage(10, 10))
    first, _ = await run(world, ask(tools=()))
    world.primary.say("two", usage=Usage(10, 10))
    follow = ChatTurn(
        owner="me",
        model=None,
        messages=(text_message("user", "more"),),
        conversation_id=first.conversation_id,
    )
    second, _ = await run(world, follow)
    assert second.cost["response_usd"] == pytest.approx(0.03)
    assert second.cost["conversation_usd"] == pytest.approx(0.06)


# --- retries, fallback, deadlines ------------------------------------------------------


def unavailable(retry_after: float | None = None) -> ProviderError:
    return ProviderError(
        "overloaded",
        provider="primary",
        upstream_status=503,
        retryable=True,
        retry_after=retry_after,
    )


async def test_retryable_error_before_output_is_retried(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(unavailable(retry_after=0.05))
    world.primary.queue(UsageEvent(Usage(5, 0)), Done("end_turn"))  # empty reply: retried too
    world.primary.say("finally")
    began = time.monotonic()
    generation, events = await run(world, ask(tools=()))
    assert time.monotonic() - began >= 0.05  # Retry-After honoured
    assert text_of(events) == "finally"
    restarts = [e for e in events if isinstance(e, Restart)]
    assert [r.reason for r in restarts] == ["upstream_error", "empty_reply"]
    assert generation.turn.usage.input_tokens == 15  # the discarded attempt still counts


async def test_fallback_model_after_retries(make_world: MakeWorld) -> None:
    world = await make_world()
    for _ in range(4):
        world.primary.queue(unavailable())
    world.backup.say("from the backup")
    _, events = await run(world, ask(tools=()))
    assert text_of(events) == "from the backup"
    assert len(world.primary.requests) == 4  # one try and three retries
    assert world.backup.requests[0].model == "m2"
    assert [r.reason for r in events if isinstance(r, Restart)][-1] == "fallback"


async def test_no_retry_once_text_reached_the_client(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("Half an ans"), unavailable())
    generation, events = await run(world, ask(tools=()))
    assert isinstance(events[-1], StreamError)
    assert len(world.primary.requests) == 1
    reply = await stored_reply(world, generation)
    assert reply.status == "incomplete"
    assert reply.parts == (TextPart("Half an ans"),)


async def test_non_streaming_client_is_retried_even_after_partial_output(
    make_world: MakeWorld,
) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("Half"), unavailable())
    world.primary.say("Whole answer")
    generation, _ = await run(world, ask(tools=(), stream=False))
    assert generation.turn.parts() == (TextPart("Whole answer"),)


async def test_request_errors_are_not_retried(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(ProviderError("bad request", provider="primary", upstream_status=400))
    _, events = await run(world, ask(tools=()))
    assert isinstance(events[-1], StreamError)
    assert events[-1].error.status == 400
    assert len(world.primary.requests) == 1
    assert world.backup.requests == []


async def test_first_token_deadline(make_world: MakeWorld) -> None:
    world = await make_world(first_token_base_seconds=0.1, retry_backoff_seconds=[])
    world.primary.queue(5.0, TextDelta("too late"), Done("end_turn"))
    world.backup.queue(5.0, TextDelta("too late"), Done("end_turn"))
    began = time.monotonic()
    _, events = await run(world, ask(tools=()))
    assert time.monotonic() - began < 2
    assert isinstance(events[-1], StreamError)
    assert events[-1].error.code == "upstream_timeout"


async def test_between_chunks_deadline_keeps_partial_output(make_world: MakeWorld) -> None:
    world = await make_world(between_chunks_seconds=0.1)
    world.primary.queue(TextDelta("partial "), 5.0, TextDelta("never"), Done("end_turn"))
    generation, events = await run(world, ask(tools=()))
    assert isinstance(events[-1], StreamError)
    assert "between chunks" in events[-1].error.message
    reply = await stored_reply(world, generation)
    assert reply.status == "incomplete"
    assert reply.parts == (TextPart("partial "),)


# --- stop reasons and the stream reader ------------------------------------------------


async def test_think_tags_become_reasoning(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(
        TextDelta("<thi"),
        TextDelta("nk>pondering</th"),
        TextDelta("ink>\n\nAnswer"),
        Done("end_turn"),
    )
    generation, events = await run(world, ask(tools=()))
    assert text_of(events) == "Answer"
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "pondering"
    assert generation.turn.parts() == (ReasoningPart("pondering"), TextPart("Answer"))


async def test_max_tokens_keeps_the_partial_answer(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("cut sho"), Done("max_tokens"))
    generation, events = await run(world, ask())
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "max_tokens"
    assert (await stored_reply(world, generation)).finish_reason == "length"


async def test_content_filter_ends_with_a_safety_message(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(Done("content_filtered"))
    _, events = await run(world, ask())
    assert "content filter" in text_of(events)
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "content_filtered"


# --- persistence, cancellation, shutdown -----------------------------------------------


async def test_each_step_is_committed_before_the_next(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(*call("echo", '{"text": "saved"}'))
    world.primary.queue(2.0, TextDelta("late"), Done("end_turn"))
    generation, _ = await start(world, ask())
    await until(lambda: len(world.primary.requests) == 2)
    reply = await stored_reply(world, generation)
    assert reply.status == "streaming"
    calls = [p for p in reply.parts if isinstance(p, ToolCallPart)]
    assert calls[0].result is not None
    assert calls[0].result.content == "echo: saved"
    generation.detach(cancel=True)
    await generation.wait()
    assert (await stored_reply(world, generation)).status == "interrupted"


async def test_cancelling_the_turn_cancels_running_tools(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(*call("nap", '{"seconds": 30}'))
    generation, _ = await start(world, ask())
    await until(lambda: world.tools.ran)
    generation.detach(cancel=True)
    await generation.wait()
    assert world.tools.cancelled == 1
    assert (await stored_reply(world, generation)).status == "interrupted"


async def test_shutdown_stops_loops_and_refuses_new_turns(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("working"), *call("nap", '{"seconds": 0.3}'))
    generation, events = await start(world, ask())
    await until(lambda: world.tools.ran)
    world.service.begin_shutdown(grace_seconds=5)
    with pytest.raises(Overloaded):
        await world.service.prepare(ask())
    await generation.wait()
    assert "[Server is shutting down]" in text_of(events)
    assert len(world.primary.requests) == 1  # no further model call
    assert isinstance(events[-1], StreamError)  # the client knows the turn is unfinished
    assert events[-1].error.status == 503
    reply = await stored_reply(world, generation)
    assert reply.status == "interrupted"
    assert [p.result.content for p in reply.parts if isinstance(p, ToolCallPart)] == ["rested"]


async def test_shutdown_after_grace_interrupts_and_tells_the_client(
    make_world: MakeWorld,
) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("slow "), 30.0, Done("end_turn"))
    generation, events = await start(world, ask(tools=()))
    await until(lambda: events)
    await world.service.shutdown(grace_seconds=0.1)
    assert isinstance(events[-1], StreamError)
    assert "shutting down" in events[-1].error.message
    reply = await stored_reply(world, generation)
    assert reply.status == "interrupted"
    assert reply.parts == (TextPart("slow "),)


# --- defects found in review ------------------------------------------------------------


async def test_tool_use_without_a_callable_call_ends_the_turn(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("ok"), ToolCallDelta(0, "c1", None, "{}"), Done("tool_use"))
    _, events = await run(world, ask())
    assert len(world.primary.requests) == 1
    assert text_of(events) == "ok"
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "end_turn"


async def test_a_cut_off_server_call_is_never_handed_to_the_client(
    make_world: MakeWorld,
) -> None:
    world = await make_world()
    world.primary.queue(ToolCallDelta(0, "c1", "echo", '{"text": '), Done("max_tokens"))
    generation, _ = await run(world, ask(stream=False))
    assert generation.turn.unanswered_calls() == []
    reply = await stored_reply(world, generation)
    (call_part,) = [p for p in reply.parts if isinstance(p, ToolCallPart)]
    assert call_part.result is not None
    assert "Not run" in call_part.result.content
    assert world.tools.ran == []


async def test_finished_results_survive_an_interrupted_step(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(
        ToolCallDelta(0, "fast", "echo", '{"text": "kept"}'),
        ToolCallDelta(1, "slow", "nap", '{"seconds": 30}'),
        Done("tool_use"),
    )
    generation, events = await start(world, ask())
    await until(lambda: any(isinstance(e, ToolFinished) for e in events))
    generation.detach(cancel=True)
    await generation.wait()
    reply = await stored_reply(world, generation)
    assert reply.status == "interrupted"
    results = {p.id: p.result for p in reply.parts if isinstance(p, ToolCallPart)}
    assert results["fast"].content == "echo: kept"
    assert "interrupted" in results["slow"].content
    assert world.tools.cancelled == 1


async def cancels_itself() -> str:
    """A tool whose own work gets cancelled."""
    inner = asyncio.get_running_loop().create_future()
    inner.cancel()
    return str(await inner)


async def test_a_tool_cancelling_itself_is_an_error_result(make_world: MakeWorld) -> None:
    world = await make_world()
    world.tools.registry.register(function_tool(name="odd")(cancels_itself))
    world.primary.queue(*call("odd", "{}"))
    world.primary.say("moving on")
    generation, events = await run(world, ask(tools=("odd",)))
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.is_error
    assert "cancelled" in finished.output
    assert text_of(events) == "moving on"
    assert (await stored_reply(world, generation)).status == "complete"


async def test_a_failed_step_commit_does_not_end_the_turn(
    make_world: MakeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    world = await make_world()

    async def broken(message_id: str, parts: Any) -> None:
        raise OperationalError("UPDATE", {}, Exception("disk I/O error"))

    monkeypatch.setattr(world.store, "checkpoint", broken)
    world.primary.queue(*call("echo", '{"text": "x"}'))
    world.primary.say("fine")
    generation, events = await run(world, ask())
    assert isinstance(events[-1], Done)
    reply = await stored_reply(world, generation)
    assert reply.status == "complete"
    assert [type(p).__name__ for p in reply.parts] == ["ToolCallPart", "TextPart"]


async def test_forced_tool_choice_applies_to_the_first_step_only(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(*call("echo", '{"text": "x"}'))
    world.primary.say("done")
    turn = ChatTurn(
        owner="me",
        model=None,
        messages=(text_message("user", "hi"),),
        server_tools=("echo",),
        tool_choice="required",
    )
    await run(world, turn)
    assert [r.tool_choice for r in world.primary.requests] == ["required", "auto"]


async def test_an_empty_reply_cut_by_max_tokens_is_not_retried(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(UsageEvent(Usage(100, 50)), Done("max_tokens"))
    _, events = await run(world, ask(tools=()))
    assert len(world.primary.requests) == 1
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "max_tokens"


async def test_restart_says_what_to_keep(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(TextDelta("Let me check."), *call("echo", '{"text": "x"}'))
    world.primary.queue(ReasoningDelta("hmm"), unavailable())
    world.primary.say("Done.")
    _, events = await run(world, ask())
    (restart,) = [e for e in events if isinstance(e, Restart)]
    assert restart.clear is True  # the reasoning shown must go
    assert restart.keep_content_chars == len("Let me check.")  # the first step's text stays
    assert text_of(events) == "Let me check.\n\nDone."


async def test_duplicate_call_ids_in_a_step_stay_two_calls(make_world: MakeWorld) -> None:
    world = await make_world()
    world.primary.queue(
        ToolCallDelta(0, "call_0", "echo", '{"text": "a"}'),
        ToolCallDelta(1, "call_0", "echo", '{"text": "b"}'),
        Done("tool_use"),
    )
    world.primary.say("both")
    generation, _ = await run(world, ask())
    assert sorted(world.tools.ran) == ["echo:a", "echo:b"]
    reply = await stored_reply(world, generation)
    calls = [p for p in reply.parts if isinstance(p, ToolCallPart)]
    assert len({c.id for c in calls}) == 2
    assert sorted(c.result.content for c in calls) == ["echo: a", "echo: b"]


async def test_the_model_that_answered_is_recorded(make_world: MakeWorld) -> None:
    world = await make_world()
    for _ in range(4):
        world.primary.queue(unavailable())
    world.backup.say("backup here")
    generation, _ = await run(world, ask(tools=()))
    assert (await stored_reply(world, generation)).model == "backup/m2"


async def test_workspaces_are_per_owner(make_world: MakeWorld) -> None:
    world = await make_world()
    root = world.service._settings.workspace_dir
    assert conversation_workspace(root, "alice", "team.notes") != conversation_workspace(
        root, "bob", "team.notes"
    )
    assert conversation_workspace(root, "alice", "../x").parent.parent == root


async def test_a_warned_step_still_hands_the_client_its_call(make_world: MakeWorld) -> None:
    world = await make_world()
    weather = ToolSpec("get_weather", "Weather", {"type": "object", "properties": {}})
    for i in range(2):
        world.primary.queue(*call("echo", '{"text": "same"}', call_id=f"c{i}"))
    world.primary.queue(
        ToolCallDelta(0, "c2", "echo", '{"text": "same"}'),
        ToolCallDelta(1, "k1", "get_weather", "{}"),
        Done("tool_use"),
    )
    generation, events = await run(world, ask(client_tools=(weather,)))
    assert world.tools.ran == ["echo:same"] * 2  # the third repeat was not run
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.name) for d in deltas] == [(0, "get_weather")]
    assert isinstance(events[-1], Done)
    assert events[-1].stop_reason == "tool_use"
    assert [c.name for c in generation.turn.unanswered_calls()] == ["get_weather"]


def test_every_model_request_field_is_carried_by_the_loop() -> None:
    """``AgentLoop._plan`` builds each step's ModelRequest field by field (for speed):
    a new field must be added there too."""
    from dataclasses import fields

    from parley.providers.protocol import ModelRequest

    assert {f.name for f in fields(ModelRequest)} == {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "tokens_field",
        "temperature",
        "top_p",
        "stop",
        "options",
        "incremental",
    }


async def test_deadline_expiring_as_a_chunk_arrives_does_not_cancel_the_consumer() -> None:
    """The timer and the chunk in the same loop iteration: the chunk wins, and the
    cancel the timer queued must not land in the consumer's next await."""
    from parley.agent.model_call import with_deadlines

    limit = 0.3

    async def upstream() -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        yield TextDelta("a")
        arrived = loop.create_future()
        since = loop.time()
        loop.call_at(since + limit - 0.02, arrived.set_result, None)
        # the loop is busy (another request's work) across the deadline
        loop.call_at(since + limit - 0.05, time.sleep, 0.1)
        await arrived
        yield TextDelta("b")
        await asyncio.sleep(0.01)
        yield TextDelta("c")

    got: list[str] = []
    async for event in with_deadlines(upstream(), first=5, between=limit, provider="p"):
        assert isinstance(event, TextDelta)
        got.append(event.text)
        await asyncio.sleep(0.005)  # the sink: a client applying a little backpressure
    assert got == ["a", "b", "c"]
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_tool_output_that_is_not_valid_unicode_is_stored(make_world: MakeWorld) -> None:
    world = await make_world()
    world.tools.registry.register(function_tool(name="listing")(odd_names))
    world.primary.queue(*call("listing", "{}"))
    world.primary.say("listed")
    generation, events = await run(world, ask(tools=("listing",)))
    assert isinstance(events[-1], Done)
    reply = await stored_reply(world, generation)
    assert reply.status == "complete"
    result = next(p for p in reply.parts if isinstance(p, ToolCallPart)).result
    assert result.content == "a\ufffd.txt"


async def odd_names() -> str:
    """A file name that was not UTF-8, as os.scandir reports it."""
    return "a\udcff.txt"
