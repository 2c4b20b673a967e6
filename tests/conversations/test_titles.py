"""Titles and follow-up suggestions: the writer, its parsers, and the meta repository,
with a scripted provider behind a real ModelCall and Completer, and real SQLite."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import select, update
from tests.support.databases import migrated_database

from parley.agent.completion import Completer
from parley.agent.model_call import ModelCall
from parley.conversations.titles import (
    MESSAGE_CHARS,
    SUGGESTION_CHARS,
    TITLE_CHARS,
    TitleWriter,
    clean_title,
    parse_suggestions,
)
from parley.errors import ProviderError
from parley.events import Done, Event, TextDelta, UsageEvent
from parley.ids import new_id
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import CallInfo, Interceptor, Purpose, TurnInfo
from parley.messages import (
    Part,
    ReasoningPart,
    Role,
    TextPart,
    ToolCallPart,
    ToolResult,
    Usage,
)
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ResolvedModel
from parley.providers.scripted import ScriptedProvider, Step
from parley.settings import Settings
from parley.store.database import Database
from parley.store.meta import ConversationMeta
from parley.store.repository import ConversationStore, NewMessage, NewTurn
from parley.store.schema import conversations

pytestmark = pytest.mark.anyio

OWNER = "me"
LOGGER = "parley.conversations.titles"


class RoutedProvider(ScriptedProvider):
    """Answers the title prompt and the suggestions prompt from separate queues (the two
    calls run concurrently), records each prompt, and may act while "answering"."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: dict[str, deque[Sequence[Step]]] = {"title": deque(), "suggestions": deque()}
        self.prompts: dict[str, str] = {}
        self.max_tokens: dict[str, int | None] = {}
        self.during: dict[str, Callable[[], Awaitable[object]]] = {}

    def answer(self, kind: str, text: str) -> None:
        self.replies[kind].append(
            (TextDelta(text), UsageEvent(Usage(input_tokens=10, output_tokens=5)), Done("end_turn"))
        )

    def fail(self, kind: str, error: BaseException) -> None:
        self.replies[kind].append((error,))

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        self.requests.append(request)
        prompt = request.messages[-1].text
        kind = "title" if prompt.startswith("Write a short title") else "suggestions"
        self.prompts[kind] = prompt
        self.max_tokens[kind] = request.max_tokens
        hook = self.during.pop(kind, None)
        if hook is not None:
            await hook()
        for step in self.replies[kind].popleft():
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, Event):
                yield step


class Purposes(Interceptor):
    def __init__(self) -> None:
        self.seen: list[Purpose] = []

    async def before_request(self, request: ModelRequest, call: CallInfo) -> None:
        self.seen.append(call.purpose)


@dataclass
class World:
    writer: TitleWriter
    provider: RoutedProvider
    meta: ConversationMeta
    store: ConversationStore
    database: Database
    purposes: Purposes
    models: list[ResolvedModel] = field(default_factory=list)

    async def after(self, cid: str, message_id: str, **flags: bool) -> None:
        await self.writer.after_turn(
            owner=OWNER,
            conversation_id=cid,
            message_id=message_id,
            models=self.models,
            turn=TurnInfo(source="internal", conversation_id=cid, message_id=message_id),
            **flags,
        )


async def _instant(_seconds: float) -> None:
    return None


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = Settings(data_dir=tmp_path)
    database = await migrated_database(settings)
    store = ConversationStore(database)
    meta = ConversationMeta(database)
    provider = RoutedProvider()
    purposes = Purposes()
    model_call = ModelCall(
        settings.agent, PriceCatalog(settings.pricing), InterceptorChain([purposes]), _instant
    )
    writer = TitleWriter(Completer(model_call), meta, store, max_suggestions=3)
    model = ResolvedModel(provider, "scripted", "fast", kind="scripted")
    yield World(writer, provider, meta, store, database, purposes, [model])
    await database.dispose()


async def make_conversation(
    world: World,
    messages: Sequence[tuple[Role, tuple[Part, ...]]] = (),
    *,
    title: str | None = None,
) -> tuple[str, str]:
    """A conversation holding ``messages`` (default: one exchange); (id, head id).
    ``title`` is the user's own (set as a rename is); the server's provisional title is
    set with ``set_meta``."""
    if not messages:
        messages = [
            ("user", (TextPart("How do I get from Rome to Florence?"),)),
            ("assistant", (TextPart("The fast train takes 95 minutes."),)),
        ]
    cid = new_id("conv")
    rows = [NewMessage(new_id("msg"), role, parts) for role, parts in messages]
    await world.store.start_turn(NewTurn(OWNER, cid, rows, create=True))
    if title is not None:
        await world.meta.set_title(OWNER, cid, title)
    return cid, rows[-1].id


async def set_meta(world: World, cid: str, value: dict[str, object]) -> None:
    await world.database.write(
        lambda conn: conn.execute(
            update(conversations).where(conversations.c.id == cid).values(meta=value)
        )
    )


async def stored_meta(world: World, cid: str) -> object:
    return await world.database.read(
        lambda conn: conn.execute(
            select(conversations.c.meta).where(conversations.c.id == cid)
        ).scalar_one()
    )


async def add_user_message(world: World, cid: str, text: str = "and then?") -> str:
    message = NewMessage(new_id("msg"), "user", (TextPart(text),))
    await world.store.start_turn(NewTurn(OWNER, cid, [message], create=False))
    return message.id


# --- titles -----------------------------------------------------------------------------


async def test_blank_title_is_generated(world: World) -> None:
    cid, head = await make_conversation(world)
    world.provider.answer("title", 'Title: "Rome to Florence by Train."')
    await world.after(cid, head, suggestions=False)
    assert await world.meta.title_state(OWNER, cid) == ("Rome to Florence by Train", False)
    assert world.provider.max_tokens["title"] == 60
    assert world.purposes.seen == ["title"]


async def test_provisional_title_is_replaced_and_other_meta_kept(world: World) -> None:
    cid, head = await make_conversation(world, title="How do I get from Rome")
    forked = {"conversation_id": "conv_x", "message_id": "msg_y"}
    await set_meta(world, cid, {"title_provisional": True, "forked_from": forked})
    assert await world.meta.title_state(OWNER, cid) == ("How do I get from Rome", True)
    world.provider.answer("title", "Rome to Florence")
    await world.after(cid, head, suggestions=False)
    assert await world.meta.title_state(OWNER, cid) == ("Rome to Florence", False)
    assert await stored_meta(world, cid) == {"forked_from": forked}


async def test_users_title_is_never_asked_for_or_replaced(world: World) -> None:
    cid, head = await make_conversation(world, title="My trip")
    await world.after(cid, head, suggestions=False)
    assert world.provider.requests == []
    assert await world.meta.title_state(OWNER, cid) == ("My trip", False)


async def test_rename_while_the_model_answers_wins(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    cid, head = await make_conversation(world, title="How do I get")
    await set_meta(world, cid, {"title_provisional": True})
    world.provider.during["title"] = lambda: world.meta.set_title(OWNER, cid, "Mine")
    world.provider.answer("title", "Rome to Florence")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        await world.after(cid, head, suggestions=False)
    assert await world.meta.title_state(OWNER, cid) == ("Mine", False)
    assert any(
        cid in r.getMessage() and "titled meanwhile" in r.getMessage() for r in caplog.records
    )


async def test_unusable_title_saves_nothing(world: World) -> None:
    cid, head = await make_conversation(world)
    world.provider.answer("title", '""')
    await world.after(cid, head, suggestions=False)
    assert await world.meta.title_state(OWNER, cid) == (None, False)


# --- suggestions ------------------------------------------------------------------------


async def test_suggestions_are_saved_for_the_head_only(world: World) -> None:
    cid, head = await make_conversation(world, title="Trains")
    world.provider.answer(
        "suggestions",
        '```json\n["How much is a ticket?", "Is there a night train?", "how much is a ticket?",'
        ' "", "Can I bring a bike?", "What about buses?"]\n```',
    )
    await world.after(cid, head)
    assert await world.meta.suggestions(OWNER, cid) == [
        "How much is a ticket?",
        "Is there a night train?",
        "Can I bring a bike?",
    ]
    saved = await stored_meta(world, cid)
    assert isinstance(saved, dict)
    assert saved["suggestions"]["message_id"] == head
    assert world.provider.max_tokens["suggestions"] == 400
    assert "up to 3 follow-up" in world.provider.prompts["suggestions"]
    assert world.purposes.seen == ["title"]  # titled: only the suggestions call

    await add_user_message(world, cid)
    assert await world.meta.suggestions(OWNER, cid) == []
    assert not await world.meta.set_suggestions(OWNER, cid, head, ["stale"])


async def test_title_and_suggestions_together(world: World) -> None:
    cid, head = await make_conversation(world)
    world.provider.answer("title", "Rome to Florence")
    world.provider.answer("suggestions", "1. How much is a ticket?\n2. Is there a night train?")
    await world.after(cid, head)
    assert await world.meta.title_state(OWNER, cid) == ("Rome to Florence", False)
    assert await world.meta.suggestions(OWNER, cid) == [
        "How much is a ticket?",
        "Is there a night train?",
    ]
    assert world.purposes.seen == ["title", "title"]


async def test_no_suggestions_when_the_conversation_moved_on(world: World) -> None:
    cid, head = await make_conversation(world, title="Trains")
    await add_user_message(world, cid)
    await world.after(cid, head)
    assert world.provider.requests == []

    cid, head = await make_conversation(world, title="Trains")
    world.provider.during["suggestions"] = lambda: add_user_message(world, cid)
    world.provider.answer("suggestions", '["Too late?"]')
    await world.after(cid, head)
    assert await world.meta.suggestions(OWNER, cid) == []
    assert await stored_meta(world, cid) is None


async def test_flags_turn_each_part_off(world: World) -> None:
    cid, head = await make_conversation(world)
    await world.after(cid, head, titles=False, suggestions=False)
    world.provider.answer("suggestions", '["Next?"]')
    await world.after(cid, head, titles=False)
    assert world.provider.prompts.keys() == {"suggestions"}
    assert await world.meta.title_state(OWNER, cid) == (None, False)


# --- failures ---------------------------------------------------------------------------


async def test_failing_provider_is_logged_not_raised(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    cid, head = await make_conversation(world)
    world.provider.fail(
        "title", ProviderError("upstream says no", provider="s", upstream_status=400)
    )
    world.provider.fail("suggestions", RuntimeError("something odd"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        await world.after(cid, head)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]
    assert len(warnings) == 2
    assert all(cid in r.getMessage() for r in warnings)
    assert await world.meta.title_state(OWNER, cid) == (None, False)
    assert await world.meta.suggestions(OWNER, cid) == []


async def test_deleted_conversation_raises_nothing(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    cid, head = await make_conversation(world)
    await world.store.delete_conversation(OWNER, cid)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        await world.after(cid, head)
    assert world.provider.requests == []
    assert any(cid in r.getMessage() and "gone" in r.getMessage() for r in caplog.records)

    cid, head = await make_conversation(world)
    world.provider.during["title"] = lambda: world.store.delete_conversation(OWNER, cid)
    world.provider.answer("title", "Rome to Florence")
    world.provider.answer("suggestions", '["Next?"]')
    await world.after(cid, head)
    with pytest.raises(LookupError):
        await world.meta.title_state(OWNER, cid)


async def test_another_owners_conversation_is_missing(world: World) -> None:
    cid, head = await make_conversation(world)
    with pytest.raises(LookupError):
        await world.meta.title_state("someone else", cid)
    with pytest.raises(LookupError):
        await world.meta.set_title("someone else", cid, "x")
    with pytest.raises(LookupError):
        await world.meta.set_generated_title("someone else", cid, "x")
    with pytest.raises(LookupError):
        await world.meta.set_suggestions("someone else", cid, head, ["x"])
    with pytest.raises(LookupError):
        await world.meta.suggestions("someone else", cid)
    await world.writer.after_turn(
        owner="someone else",
        conversation_id=cid,
        message_id=head,
        models=world.models,
        turn=TurnInfo(),
    )
    assert world.provider.requests == []


async def test_meta_title_rules(world: World) -> None:
    cid, _ = await make_conversation(world, title="   ")
    assert await world.meta.set_generated_title(OWNER, cid, "Generated")
    assert not await world.meta.set_generated_title(OWNER, cid, "Again")
    await set_meta(world, cid, {"title_provisional": True, "other": 1})
    await world.meta.set_title(OWNER, cid, "Renamed")
    assert await world.meta.title_state(OWNER, cid) == ("Renamed", False)
    assert await stored_meta(world, cid) == {"other": 1}
    assert not await world.meta.set_generated_title(OWNER, cid, "Generated")


# --- what the model sees ----------------------------------------------------------------


async def test_prompts_hold_only_the_last_messages_text(world: World) -> None:
    messages: list[tuple[Role, tuple[Part, ...]]] = [("system", (TextPart("SYSTEM RULES"),))]
    for i in range(11):
        role: Role = "user" if i % 2 == 0 else "assistant"
        messages.append((role, (TextPart(f"message {i:02d}"),)))
    call = ToolCallPart("call_1", "search", "{}", ToolResult("HIDDEN RESULT"))
    messages.append(
        (
            "assistant",
            (ReasoningPart("HIDDEN THOUGHTS"), call, TextPart("message 11 " + "y" * 3000)),
        )
    )
    cid, head = await make_conversation(world, messages)
    world.provider.answer("title", "Counting")
    world.provider.answer("suggestions", '["Next?"]')
    await world.after(cid, head)

    title_prompt = world.provider.prompts["title"]
    suggestions_prompt = world.provider.prompts["suggestions"]
    assert [f"message {i:02d}" in title_prompt for i in range(12)] == [False] * 8 + [True] * 4
    assert [f"message {i:02d}" in suggestions_prompt for i in range(12)] == (
        [False] * 4 + [True] * 8
    )
    for prompt in (title_prompt, suggestions_prompt):
        assert "HIDDEN" not in prompt
        assert "SYSTEM RULES" not in prompt
        assert "y" * (MESSAGE_CHARS - 20) in prompt
        assert "y" * MESSAGE_CHARS not in prompt
        assert "User: message 10" in prompt
        assert "Assistant: message 11" in prompt


# --- parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ("Trip to Rome", "Trip to Rome"),
        ('"Trip to Rome."', "Trip to Rome"),
        ("“Trip to Rome”", "Trip to Rome"),
        ("Title: Trip to Rome", "Trip to Rome"),
        ("**Title:** *Trip to Rome*", "Trip to Rome"),
        ("# Trip to Rome\n\nA conversation about trains.", "Trip to Rome"),
        ("Here is a title:\n\n'Trip to Rome'", "Trip to Rome"),
        ("```\nTrip to Rome\n```", "Trip to Rome"),
        ("标题：罗马之旅。", "罗马之旅"),
        ("Is 2.5 bigger than 3?", "Is 2.5 bigger than 3?"),
        ("Advice for students'", "Advice for students'"),
        ("", None),
        ("  \n  ", None),
        ('""', None),
        ("Title:", None),
    ],
)
def test_clean_title(answer: str, title: str | None) -> None:
    assert clean_title(answer) == title


def test_clean_title_is_short() -> None:
    long = clean_title("word " * 40)
    assert long is not None
    assert len(long) <= TITLE_CHARS
    assert not long.endswith(" ")
    assert clean_title("x" * 200) == "x" * TITLE_CHARS


@pytest.mark.parametrize(
    ("answer", "items"),
    [
        ('["A?", "B?"]', ["A?", "B?"]),
        ('Sure:\n```json\n["A?", "B?"]\n```', ["A?", "B?"]),
        ('{"suggestions": ["A?", "B?"]}', ["A?", "B?"]),
        ('["A?", "a?", " ", "B?", 3]', ["A?", "B?"]),
        ('["A?", "B?", "C', ["A?", "B?"]),  # cut off by max_tokens
        ("[]", []),
        ("1. A?\n2) B?\n- C?\n* D?\n• E?", ["A?", "B?", "C?", "D?", "E?"]),
        ('Here are some ideas:\n"A?",\n"B?"', ["A?", "B?"]),
        ("1. What about [1, 2]?\n2. Why?", ["What about [1, 2]?", "Why?"]),
        ("", []),
    ],
)
def test_parse_suggestions(answer: str, items: list[str]) -> None:
    assert parse_suggestions(answer, 10) == items


def test_parse_suggestions_limits() -> None:
    many = '["' + '", "'.join(f"Question {i}?" for i in range(20)) + '"]'
    assert parse_suggestions(many, 10) == [f"Question {i}?" for i in range(10)]
    assert parse_suggestions(many, 0) == []
    long = parse_suggestions('["' + "word " * 100 + '"]', 10)
    assert len(long) == 1
    assert len(long[0]) <= SUGGESTION_CHARS
