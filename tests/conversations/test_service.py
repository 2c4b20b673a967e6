"""The conversation service and generation task, with the scripted provider and real SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.databases import migrated_database
from tests.support.waiting import until

from parley.conversations.generation import Generation
from parley.conversations.service import ConversationService
from parley.conversations.turns import ChatTurn
from parley.errors import InvalidRequest, NotFound, Overloaded, ProviderError
from parley.events import Done, Event, StreamError, TextDelta
from parley.messages import ImagePart, Message, TextPart, text_message
from parley.providers.registry import ProviderRegistry
from parley.providers.scripted import ScriptedProvider
from parley.settings import ProviderSettings, Settings
from parley.store.repository import ConversationStore

pytestmark = pytest.mark.anyio

World = tuple[ConversationService, ScriptedProvider, ConversationStore]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = Settings(data_dir=tmp_path, chat={"checkpoint_seconds": 0.05})  # type: ignore[arg-type]
    database = await migrated_database(settings)
    store = ConversationStore(database)
    provider = ScriptedProvider()
    registry = ProviderRegistry(
        [(ProviderSettings(name="scripted", kind="scripted"), provider)], {}, None
    )
    yield ConversationService(settings, store, registry), provider, store
    await database.dispose()


async def run(service: ConversationService, turn: ChatTurn) -> tuple[Generation, list[Event]]:
    """Prepare and start a turn; return it and the events its sink received."""
    generation = await service.prepare(turn)
    events: list[Event] = []

    async def sink(event: Event) -> None:
        events.append(event)

    service.start(generation, sink)
    return generation, events


async def drain(generation: Generation, events: list[Event]) -> list[Event]:
    await generation.wait()
    return events


def turn(text: str, conversation_id: str | None = None) -> ChatTurn:
    return ChatTurn(
        owner="me",
        model="scripted",
        messages=(text_message("user", text),),
        conversation_id=conversation_id,
    )


async def test_turn_is_saved_and_continued(world: World) -> None:
    service, provider, store = world
    provider.say("hello there")
    generation, generation_events = await run(service, turn("hi"))
    items = await drain(generation, generation_events)
    assert isinstance(items[-1], Done)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "hello there"
    branch = await store.branch("me", generation.conversation_id)
    assert [(m.role, m.status) for m in branch] == [("user", "complete"), ("assistant", "complete")]

    provider.say("again")
    second, second_events = await run(service, turn("more", generation.conversation_id))
    await drain(second, second_events)
    assert [m.text for m in provider.requests[-1].messages] == ["hi", "hello there", "more"]
    with pytest.raises(NotFound):
        await run(service, turn("x", "conv_nope"))
    other = ChatTurn(
        owner="someone else",
        model="scripted",
        messages=(text_message("user", "x"),),
        conversation_id=generation.conversation_id,
    )
    with pytest.raises(NotFound):
        await run(service, other)


async def test_failure_before_output_marks_failed(world: World) -> None:
    service, provider, store = world
    provider.queue(ProviderError("nope", provider="scripted", upstream_status=503))
    generation, generation_events = await run(service, turn("hi"))
    items = await drain(generation, generation_events)
    assert isinstance(items[-1], StreamError)
    assert items[-1].error.status == 503
    branch = await store.branch("me", generation.conversation_id)
    assert [m.status for m in branch] == ["complete", "failed"]


async def test_failure_after_output_keeps_partial_text(world: World) -> None:
    service, provider, store = world
    provider.queue(TextDelta("par"), TextDelta("tial"), ProviderError("cut", provider="s"))
    generation, generation_events = await run(service, turn("hi"))
    await drain(generation, generation_events)
    branch = await store.branch("me", generation.conversation_id)
    assert branch[-1].status == "incomplete"
    assert branch[-1].parts == (TextPart("partial"),)


async def test_checkpoints_then_cancel_saves_interrupted(world: World) -> None:
    service, provider, store = world
    provider.queue(TextDelta("a"), 0.2, TextDelta("b"), 5.0, Done("end_turn"))
    generation, _generation_events = await run(service, turn("hi"))

    async def checkpointed() -> bool:
        try:
            branch = await store.branch("me", generation.conversation_id)
        except LookupError:  # not saved yet
            return False
        return branch[-1].parts == (TextPart("ab"),)

    await until(checkpointed)
    branch = await store.branch("me", generation.conversation_id)
    assert branch[-1].status == "streaming"
    assert branch[-1].parts == (TextPart("ab"),)  # checkpointed while streaming
    generation.detach(cancel=True)
    await asyncio.wait_for(asyncio.gather(generation.wait(), return_exceptions=True), 5)
    branch = await store.branch("me", generation.conversation_id)
    assert branch[-1].status == "interrupted"
    assert branch[-1].parts == (TextPart("ab"),)


async def test_shutdown_cancels_after_grace(world: World) -> None:
    service, provider, store = world
    provider.queue(TextDelta("slow"), 30.0, Done("end_turn"))
    generation, generation_events = await run(service, turn("hi"))
    # "slow" is out, and the model stalls
    await until(lambda: any(isinstance(e, TextDelta) for e in generation_events))
    await service.shutdown(grace_seconds=0.1)
    branch = await store.branch("me", generation.conversation_id)
    assert branch[-1].status == "interrupted"


async def test_system_only_is_rejected(world: World) -> None:
    service, _, _ = world
    with pytest.raises(InvalidRequest):
        await run(
            service, ChatTurn(owner="me", model="scripted", messages=(text_message("system", "s"),))
        )


async def test_a_new_message_needs_text_or_an_image(world: World) -> None:
    service, provider, _ = world
    for blank in ("", "  \n"):
        with pytest.raises(InvalidRequest, match="the new user message is empty"):
            await service.prepare(turn(blank))
    provider.say("a cat")
    picture = Message("user", (ImagePart("data:image/png;base64,iVBORw0KGgo="),))
    image_only = ChatTurn(owner="me", model="scripted", messages=(picture,))
    generation, events = await run(service, image_only)
    await drain(generation, events)
    assert generation.status == "complete"


async def test_a_generation_aborted_before_it_runs_still_tells_its_client(world: World) -> None:
    service, provider, store = world
    provider.say("never said")
    generation = await service.prepare(turn("hi"))
    events: list[Event] = []

    async def sink(event: Event) -> None:
        events.append(event)

    service.start(generation, sink)
    # the shutdown path: aborted in the same tick, before the task's first step
    generation.abort(Overloaded("the server is shutting down", retry_after=5))
    await asyncio.wait_for(generation.wait(), 5)
    assert [type(e) for e in events] == [StreamError]
    assert generation.status == "interrupted"
    assert provider.requests == []
    assert await store.list_conversations("me", limit=10) == []  # nothing was saved


async def test_sessions_leave_memory_when_idle(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, chat={"session_idle_seconds": 0.05})  # type: ignore[arg-type]
    database = await migrated_database(settings)
    provider = ScriptedProvider()
    registry = ProviderRegistry(
        [(ProviderSettings(name="scripted", kind="scripted"), provider)], {}, None
    )
    service = ConversationService(settings, ConversationStore(database), registry)
    provider.say("one")
    first, events = await run(service, turn("hi"))
    await drain(first, events)
    provider.say("two")
    second, events = await run(service, turn("again", first.conversation_id))
    assert len(service._sessions) == 1  # held by the running generation
    await drain(second, events)
    await until(lambda: not service._sessions)  # idle for session_idle_seconds
    assert len(service._sessions) == 0
    await database.dispose()


def test_an_interrupted_turn_leaves_no_call_pending() -> None:
    from parley.conversations.generation import INTERRUPTED_CALL, _close_pending
    from parley.messages import ToolCallPart, ToolResult

    done = ToolCallPart("c1", "echo", "{}", ToolResult("ok"))
    pending = ToolCallPart("c2", "echo", "{}")
    closed = _close_pending((TextPart("working"), done, pending))
    assert closed[:2] == (TextPart("working"), done)
    assert closed[2] == pending.answered(ToolResult(INTERRUPTED_CALL, is_error=True))


async def test_a_new_send_while_the_last_reply_is_being_saved_leaves_nobody_waiting(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race that hung clients: the superseding abort landing in the final write."""
    service, provider, store = world
    provider.say("first")
    first, events = await run(service, turn("hi"))
    await drain(first, events)
    conversation_id = first.conversation_id
    assert conversation_id is not None

    writing = asyncio.Event()
    finish = store.finish

    async def slow_finish(*args: object, **kwargs: object) -> None:
        writing.set()
        await asyncio.sleep(0.2)
        await finish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "finish", slow_finish)
    provider.say("second")
    second, second_events = await run(service, turn("again", conversation_id))
    await asyncio.wait_for(writing.wait(), 5)  # its final write has begun
    provider.say("third")
    third, third_events = await run(service, turn("and again", conversation_id))
    await asyncio.wait_for(drain(third, third_events), 5)
    assert isinstance(second_events[-1], Done)  # it finished as it was: not cut off
    assert second.status == "complete"
    assert isinstance(third_events[-1], Done)
