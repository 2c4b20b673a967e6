"""The outgoing history of a turn: rolling context, system prompt, input transformers;
and the summary store. Real SQLite, a scripted provider behind a real ModelCall."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.databases import migrated_database

from parley.agent.completion import Completer
from parley.agent.model_call import ModelCall
from parley.conversations.assistants import Assistant
from parley.conversations.outgoing import UNSAVED, Outgoing, OutgoingBuilder
from parley.conversations.rolling import SummaryRecord
from parley.errors import Conflict, InvalidRequest, NotFound, ProviderError
from parley.events import Event
from parley.ids import new_id
from parley.interceptors.chain import InterceptorChain
from parley.interceptors.protocol import TurnInfo
from parley.messages import Message, Role, TextPart, text_message
from parley.providers.pricing import PriceCatalog
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ProviderRegistry, ResolvedModel
from parley.providers.scripted import ScriptedProvider
from parley.settings import ProviderSettings, Settings
from parley.store.repository import ConversationStore, NewMessage, NewTurn, StoredMessage
from parley.store.summaries import SummaryStore
from parley.tools.registry import ToolRegistry
from parley.transforms.prompt import TOOLS_UNAVAILABLE_NOTE

pytestmark = pytest.mark.anyio

OWNER = "alice"
THRESHOLD = 300
"""Small enough that eight 200-character messages go over it (about 54 tokens each)."""


class HookedProvider(ScriptedProvider):
    """A scripted provider that can run something (edit the store) when called."""

    def __init__(self, name: str = "scripted", *, supports_tools: bool = True) -> None:
        super().__init__(name, supports_tools=supports_tools)
        self.before: Callable[[], Awaitable[None]] | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[Event]:
        if self.before is not None:
            hook, self.before = self.before, None
            await hook()
        async for event in super().stream(request):
            yield event


@dataclass
class World:
    builder: OutgoingBuilder
    provider: HookedProvider
    store: ConversationStore
    summaries: SummaryStore
    model: ResolvedModel

    async def build(
        self,
        cid: str | None,
        new: Sequence[Message] = (),
        *,
        stored: Sequence[StoredMessage] | None = None,
        assistant: Assistant | None = None,
        model: ResolvedModel | None = None,
        tools: Sequence[str] | None = None,
    ) -> Outgoing:
        if stored is None:
            stored = await self.store.branch(OWNER, cid) if cid else []
        return await self.builder.build(
            owner=OWNER,
            conversation_id=cid,
            stored=stored,
            new=list(new) or [text_message("user", "And now?")],
            model=model or self.model,
            assistant=assistant,
            turn=TurnInfo(source="internal", conversation_id=cid),
            tools=tools,
        )

    async def compact(self, cid: str, instructions: str | None = None) -> SummaryRecord:
        return await self.builder.compact(
            owner=OWNER,
            conversation_id=cid,
            model=self.model,
            turn=TurnInfo(source="internal", conversation_id=cid),
            instructions=instructions,
        )


async def _instant(_seconds: float) -> None:
    return None


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    settings = Settings(
        data_dir=tmp_path,
        context={"threshold_tokens": THRESHOLD, "minimum_threshold_tokens": 256},  # type: ignore[arg-type]
    )
    database = await migrated_database(settings)
    store = ConversationStore(database)
    summaries = SummaryStore(database)
    provider = HookedProvider()
    registry = ProviderRegistry(
        [(ProviderSettings(name="scripted", kind="scripted"), provider)], {}, None
    )
    completer = Completer(
        ModelCall(settings.agent, PriceCatalog(settings.pricing), InterceptorChain(), _instant)
    )
    builder = OutgoingBuilder(settings, registry, completer, summaries, store, ToolRegistry())
    model = registry.resolve("scripted")
    yield World(builder, provider, store, summaries, model)
    await database.dispose()


def long_text(index: int) -> str:
    return f"message {index}: " + ("lorem ipsum " * 16)[: 200 - len(f"message {index}: ")]


async def make_conversation(
    world: World, count: int = 8, *, first: tuple[Role, str] | None = None
) -> tuple[str, list[StoredMessage]]:
    """A conversation of ``count`` long messages, user and assistant in turn."""
    cid = new_id("conv")
    rows = [
        NewMessage(new_id("msg"), "user" if i % 2 == 0 else "assistant", (TextPart(long_text(i)),))
        for i in range(count)
    ]
    if first is not None:
        rows.insert(0, NewMessage(new_id("msg"), first[0], (TextPart(first[1]),)))
    await world.store.start_turn(NewTurn(OWNER, cid, rows, create=True))
    return cid, await world.store.branch(OWNER, cid)


def texts(outgoing: Outgoing) -> list[str]:
    return [m.text for m in outgoing.messages]


# --- under the threshold ---------------------------------------------------------------------


async def test_under_the_threshold_the_messages_pass_through(world: World) -> None:
    cid, _stored = await make_conversation(world, 2)
    outgoing = await world.build(cid)
    assert texts(outgoing) == [long_text(0), long_text(1), "And now?"]
    assert outgoing.summary is None
    assert outgoing.notes == ()
    assert world.provider.requests == []
    assert await world.summaries.history(OWNER, cid) == []


async def test_without_a_conversation_nothing_is_summarised(world: World) -> None:
    history = [text_message("user" if i % 2 == 0 else "assistant", long_text(i)) for i in range(9)]
    outgoing = await world.build(None, history)
    assert texts(outgoing) == [long_text(i) for i in range(9)]
    assert outgoing.summary is None
    assert world.provider.requests == []


# --- over the threshold ----------------------------------------------------------------------


async def test_over_the_threshold_the_prefix_is_summarised_and_saved(world: World) -> None:
    cid, stored = await make_conversation(world)
    world.provider.say("They discussed lorem ipsum at length.")
    outgoing = await world.build(cid)

    summary = outgoing.summary
    assert summary is not None
    assert summary.text == "They discussed lorem ipsum at length."
    # the window: the newest messages within 55% of the threshold, from a user message
    assert summary.covers == tuple(m.id for m in stored[:6])
    system, *rest = outgoing.messages
    assert system.role == "system"
    assert system.text.startswith("<rolling_context_summary>")
    assert "They discussed lorem ipsum at length." in system.text
    assert rest[0].role == "user"
    assert [m.text for m in rest] == [long_text(6), long_text(7), "And now?"]
    for index in range(6):  # the covered messages are not sent
        assert all(f"message {index}:" not in text for text in texts(outgoing))

    saved = await world.summaries.current(OWNER, cid)
    assert saved is not None
    assert (saved.id, saved.covers, saved.text) == (summary.id, summary.covers, summary.text)
    assert saved.model == "scripted"
    assert saved.instructions is None

    # the summariser saw the covered messages, not the window
    [request] = world.provider.requests
    assert request.max_tokens == 2 * 512  # 2 x the target (threshold/4, at least 512)
    prompt = request.messages[-1].text
    assert "message 0:" in prompt
    assert "message 5:" in prompt
    assert "message 6:" not in prompt
    assert "And now?" not in prompt


async def test_the_next_turn_reuses_the_summary_without_a_model_call(world: World) -> None:
    cid, _ = await make_conversation(world)
    world.provider.say("Summary one.")
    first = await world.build(cid)
    assert first.summary is not None

    # the turn is saved with a reply; the next turn reuses the summary
    await world.store.start_turn(
        NewTurn(
            OWNER,
            cid,
            [
                NewMessage(new_id("msg"), "user", (TextPart("And now?"),)),
                NewMessage(new_id("msg"), "assistant", (TextPart("Now this."),)),
            ],
            create=False,
        )
    )
    second = await world.build(cid, [text_message("user", "And then?")])
    assert second.summary is not None
    assert second.summary.id == first.summary.id
    assert len(world.provider.requests) == 1
    assert second.notes == ()
    assert texts(second)[1:] == [long_text(6), long_text(7), "And now?", "Now this.", "And then?"]
    assert "Summary one." in texts(second)[0]


async def test_an_edit_or_switch_of_a_covered_message_stops_the_summary(world: World) -> None:
    cid, stored = await make_conversation(world)
    world.provider.say("Summary of the old branch.")
    first = await world.build(cid)
    assert first.summary is not None

    # a new version of the first user message: a new, short branch
    edited = NewMessage(new_id("msg"), "user", (TextPart("An edited start"),))
    await world.store.start_turn(NewTurn(OWNER, cid, [edited], create=False, root=True))
    outgoing = await world.build(cid)
    assert outgoing.summary is None
    assert texts(outgoing) == ["An edited start", "And now?"]
    assert len(world.provider.requests) == 1

    # switching back to the old branch makes its summary usable again, with no new call
    await world.store.select_version(OWNER, cid, stored[0].id)
    back = await world.build(cid)
    assert back.summary is not None
    assert back.summary.id == first.summary.id
    assert len(world.provider.requests) == 1


@pytest.mark.parametrize("failure", ["error", "too_long"])
async def test_a_failed_summary_sends_only_the_recent_window(world: World, failure: str) -> None:
    cid, _stored = await make_conversation(world)
    if failure == "error":
        world.provider.queue(ProviderError("boom", provider="scripted", upstream_status=400))
    else:
        world.provider.say("word " * 1_000)  # over 1.5 x the target: rejected
    outgoing = await world.build(cid)
    assert outgoing.summary is None
    assert texts(outgoing) == [long_text(6), long_text(7), "And now?"]
    for index in range(6):
        assert all(f"message {index}:" not in text for text in texts(outgoing))
    assert any("could not be summarised" in note for note in outgoing.notes)
    assert await world.summaries.history(OWNER, cid) == []


async def test_a_failed_summary_keeps_the_previous_one(world: World) -> None:
    cid, _ = await make_conversation(world)
    world.provider.say("The first summary.")
    first = await world.build(cid)
    assert first.summary is not None
    more = [
        NewMessage(new_id("msg"), "user" if i % 2 == 0 else "assistant", (TextPart(long_text(i)),))
        for i in range(8, 14)
    ]
    await world.store.start_turn(NewTurn(OWNER, cid, more, create=False))
    world.provider.queue(ProviderError("down", provider="scripted", upstream_status=400))
    outgoing = await world.build(cid)
    assert outgoing.summary is not None
    assert outgoing.summary.id == first.summary.id
    assert "The first summary." in texts(outgoing)[0]
    assert texts(outgoing)[1:] == [long_text(12), long_text(13), "And now?"]
    assert [s.id for s in await world.summaries.history(OWNER, cid)] == [first.summary.id]


async def test_a_branch_changed_while_summarising_drops_the_record(world: World) -> None:
    cid, stored = await make_conversation(world)

    async def edit() -> None:
        other = NewMessage(new_id("msg"), "user", (TextPart("meanwhile"),))
        await world.store.start_turn(NewTurn(OWNER, cid, [other], create=False, root=True))

    world.provider.before = edit
    world.provider.say("A summary of a branch that is gone.")
    outgoing = await world.build(cid, stored=stored)
    assert outgoing.summary is not None  # used for this turn, whose history it summarises
    assert texts(outgoing)[1:] == [long_text(6), long_text(7), "And now?"]
    assert any("changed while it was being summarised" in n for n in outgoing.notes)
    assert await world.summaries.history(OWNER, cid) == []


async def test_a_summary_never_covers_unsaved_messages(world: World) -> None:
    cid, stored = await make_conversation(world, 2)
    new = [text_message("user" if i % 2 == 0 else "assistant", long_text(i)) for i in range(2, 9)]
    world.provider.say("Summary of the saved part.")
    outgoing = await world.build(cid, new)
    assert outgoing.summary is not None
    assert outgoing.summary.covers == tuple(m.id for m in stored)
    assert not any(i.startswith(UNSAVED) for i in outgoing.summary.covers)
    assert texts(outgoing)[1:] == [long_text(i) for i in range(2, 9)]


async def test_stored_messages_are_never_changed(world: World) -> None:
    cid, before = await make_conversation(world, first=("system", "Be brief, {{user}}."))
    new = [text_message("user", "Hi {{model_name}}")]
    world.provider.say("A summary.")
    assistant = Assistant(id="asst_1", owner=OWNER, name="Helper", system_prompt="You help.")
    outgoing = await world.build(cid, new, assistant=assistant)
    assert texts(outgoing)[-1] == "Hi scripted"
    assert new == [text_message("user", "Hi {{model_name}}")]
    assert await world.store.branch(OWNER, cid) == before


# --- system prompt and transformers ------------------------------------------------------------


async def test_the_assistant_prompt_and_placeholders_are_applied(world: World) -> None:
    cid, _ = await make_conversation(world, 2, first=("system", "Conversation rules."))
    assistant = Assistant(
        id="asst_1",
        owner=OWNER,
        name="Helper",
        system_prompt="You are {{char}}, running on {{model_name}}.",
    )
    outgoing = await world.build(
        cid, [text_message("user", "Say {{char}}; keep {user} in code.")], assistant=assistant
    )
    system, *rest = outgoing.messages
    assert system.role == "system"
    assert system.text == "You are Helper, running on scripted.\n\nConversation rules."
    assert [m.role for m in rest] == ["user", "assistant", "user"]
    assert rest[-1].text == "Say Helper; keep {user} in code."


async def test_the_summary_follows_the_prompts(world: World) -> None:
    cid, _ = await make_conversation(world, first=("system", "Conversation rules."))
    world.provider.say("What happened.")
    assistant = Assistant(id="asst_1", owner=OWNER, name="Helper", system_prompt="You help.")
    outgoing = await world.build(cid, assistant=assistant)
    system = outgoing.messages[0].text
    assert system.startswith("You help.\n\nConversation rules.\n\n<rolling_context_summary>")
    assert outgoing.summary is not None
    assert outgoing.summary.covers[0] == (await world.store.branch(OWNER, cid))[0].id


async def test_a_model_without_tools_gets_a_capability_note(world: World) -> None:
    cid, _ = await make_conversation(world, 2)
    plain = ResolvedModel(ScriptedProvider(supports_tools=False), "scripted", "plain")
    noted = await world.build(cid, model=plain, tools=["current_time"])
    assert noted.messages[0].role == "system"
    assert noted.messages[0].text == TOOLS_UNAVAILABLE_NOTE
    without = await world.build(cid, model=plain, tools=[])
    assert without.messages[0].role == "user"
    capable = await world.build(cid, tools=["current_time"])
    assert capable.messages[0].role == "user"


async def test_failed_replies_are_not_sent(world: World) -> None:
    cid = new_id("conv")
    rows = [
        NewMessage(new_id("msg"), "user", (TextPart("hi"),)),
        NewMessage(new_id("msg"), "assistant", (), status="failed"),
    ]
    await world.store.start_turn(NewTurn(OWNER, cid, rows, create=True))
    outgoing = await world.build(cid, [text_message("user", "hi")])
    assert [(m.role, m.text) for m in outgoing.messages] == [("user", "hi"), ("user", "hi")]


# --- manual compaction --------------------------------------------------------------------------


async def test_compact_with_instructions(world: World) -> None:
    cid, stored = await make_conversation(world, 4)
    world.provider.say("Kept: the numbers.")
    record = await world.compact(cid, "Keep every number.")
    assert record.covers == tuple(m.id for m in stored[:2])
    assert record.instructions == "Keep every number."
    assert "Keep every number." in world.provider.requests[-1].messages[0].text
    saved = await world.summaries.current(OWNER, cid)
    assert saved is not None
    assert saved.id == record.id
    assert saved.instructions == "Keep every number."

    # nothing new: an error without instructions; with them, written again from the messages
    with pytest.raises(InvalidRequest):
        await world.compact(cid)
    world.provider.say("Kept: the names.")
    again = await world.compact(cid, "Keep the names.")
    assert again.covers == record.covers
    assert again.text == "Kept: the names."
    assert "message 0:" in world.provider.requests[-1].messages[-1].text


async def test_compact_refusals(world: World) -> None:
    cid, _ = await make_conversation(world, 2)
    with pytest.raises(InvalidRequest, match="nothing to summarise"):
        await world.compact(cid)
    with pytest.raises(NotFound):
        await world.compact("conv_missing")

    cid, _ = await make_conversation(world, 4)

    async def edit() -> None:
        other = NewMessage(new_id("msg"), "user", (TextPart("meanwhile"),))
        await world.store.start_turn(NewTurn(OWNER, cid, [other], create=False, root=True))

    world.provider.before = edit
    world.provider.say("Too late.")
    with pytest.raises(Conflict):
        await world.compact(cid)
    assert await world.summaries.history(OWNER, cid) == []


async def test_compact_rejects_an_over_long_summary(world: World) -> None:
    cid, _ = await make_conversation(world, 4)
    world.provider.say("word " * 1_000)
    with pytest.raises(ProviderError) as raised:
        await world.compact(cid)
    assert raised.value.code == "summary_rejected"
    assert raised.value.status == 502


# --- the summary store ----------------------------------------------------------------------------


def record(covers: Sequence[str], text: str, at: float) -> SummaryRecord:
    return SummaryRecord(covers=tuple(covers), text=text, tokens=5, created_at=at)


async def test_revert_returns_to_the_previous_summary(world: World) -> None:
    cid, stored = await make_conversation(world, 4)
    ids = [m.id for m in stored]
    first = await world.summaries.save(OWNER, cid, record(ids[:2], "first", 1.0), "m")
    second = await world.summaries.save(OWNER, cid, record(ids[:3], "second", 2.0), "m")
    assert first is not None
    assert second is not None
    assert await world.summaries.current(OWNER, cid) == second
    assert await world.summaries.revert(OWNER, cid) == first
    assert await world.summaries.current(OWNER, cid) == first
    assert await world.summaries.revert(OWNER, cid) is None
    assert await world.summaries.current(OWNER, cid) is None
    assert await world.summaries.revert(OWNER, cid) is None
    history = await world.summaries.history(OWNER, cid)
    assert [s.text for s in history] == ["second", "first"]
    assert all(s.reverted_at is not None for s in history)


async def test_the_store_checks_the_prefix_and_the_owner(world: World) -> None:
    cid, stored = await make_conversation(world, 4)
    ids = [m.id for m in stored]
    assert (
        await world.summaries.save(OWNER, cid, record(ids[1:3], "not a prefix", 1.0), "m") is None
    )
    assert await world.summaries.save(OWNER, cid, record(["msg_x"], "unknown", 1.0), "m") is None
    with pytest.raises(LookupError):
        await world.summaries.save("mallory", cid, record(ids[:2], "theirs", 1.0), "m")
    assert await world.summaries.save(OWNER, cid, record(ids[:2], "mine", 1.0), "m") is not None
    assert await world.summaries.current("mallory", cid) is None
    assert await world.summaries.history("mallory", cid) == []
    assert await world.summaries.revert("mallory", cid) is None
    assert await world.summaries.current(OWNER, cid) is not None


async def test_deleting_the_conversation_deletes_its_summaries(world: World) -> None:
    cid, stored = await make_conversation(world, 4)
    ids = [m.id for m in stored]
    assert await world.summaries.save(OWNER, cid, record(ids[:2], "gone soon", 1.0), "m")
    await world.store.delete_conversation(OWNER, cid)
    assert await world.summaries.history(OWNER, cid) == []


async def test_the_embedded_model_does_not_summarise_unless_asked(world: World) -> None:
    cid, _stored = await make_conversation(world)
    local = dataclasses.replace(world.model, kind="local")
    outgoing = await world.build(cid, model=local)
    assert world.provider.requests == []  # no summary call on the slow local model
    assert outgoing.summary is None
    assert texts(outgoing) == [long_text(6), long_text(7), "And now?"]  # never the whole
    assert any("embedded model" in note for note in outgoing.notes)
