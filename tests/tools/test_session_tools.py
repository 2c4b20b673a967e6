"""The session built-ins: current_time, conversation_search (on a real SQLite
database), get_session_capabilities and activate_tools (with a fake session)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from parley.messages import ReasoningPart, TextPart, ToolCallPart, ToolResult
from parley.settings import Settings
from parley.store.repository import ConversationStore, NewMessage, NewTurn
from parley.tools.builtins.session import (
    activate_tools,
    conversation_search,
    current_time,
    get_session_capabilities,
    snippet,
)
from parley.tools.lru import ActiveTools
from parley.tools.protocol import Session, ToolContext
from tests.support.databases import migrated_database
from tests.tools.contexts import tool_context

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    db = await migrated_database(Settings(data_dir=tmp_path))
    yield ConversationStore(db)
    await db.dispose()


def make_context(
    tmp_path: Path,
    *,
    owner: str = "alice",
    store: ConversationStore | None = None,
    session: Session | None = None,
) -> ToolContext:
    return tool_context(
        tmp_path, owner=owner, conversation_id="conv_now", store=store, session=session
    )


async def say(
    store: ConversationStore,
    owner: str,
    conversation_id: str,
    *messages: tuple[str, str, str],
    create: bool = True,
    title: str | None = None,
) -> None:
    """Write (id, role, text) messages as one turn."""
    await store.start_turn(
        NewTurn(
            owner,
            conversation_id,
            [NewMessage(mid, role, (TextPart(text),)) for mid, role, text in messages],  # type: ignore[arg-type]
            create=create,
            title=title,
        )
    )


async def search(context: ToolContext, query: str, limit: int = 10) -> list[dict[str, Any]]:
    output = await conversation_search.run({"query": query, "limit": limit}, context)
    assert not output.is_error, output.content
    body = orjson.loads(output.content)
    assert body["query"] == query
    results: list[dict[str, Any]] = body["results"]
    return results


# --- current_time -------------------------------------------------------------------


async def test_current_time_is_iso_8601_with_the_zone_offset(tmp_path: Path) -> None:
    assert current_time.spec.parameters["properties"] == {}
    output = await current_time.run({}, make_context(tmp_path))
    assert not output.is_error
    body = orjson.loads(output.content)
    moment = datetime.fromisoformat(body["iso"])
    assert moment.tzinfo is not None
    assert moment.microsecond == 0
    assert body["iso"].endswith(body["utc_offset"])
    assert abs(moment.timestamp() - datetime.now().timestamp()) < 5
    assert body["unix"] == int(moment.timestamp())
    assert body["timezone"] == datetime.now().astimezone().tzname()
    assert body["weekday"] == moment.strftime("%A")


@pytest.fixture
def zone_530(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The server's local zone is UTC+05:30 (a POSIX TZ string, no tzdata needed)."""
    monkeypatch.setenv("TZ", "IST-5:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("zone_530")
async def test_current_time_uses_the_servers_zone(tmp_path: Path) -> None:
    body = orjson.loads((await current_time.run({}, make_context(tmp_path))).content)
    assert body["iso"].endswith("+05:30")
    assert body["utc_offset"] == "+05:30"
    assert body["timezone"] == "IST"
    assert datetime.fromisoformat(body["iso"]).timestamp() == body["unix"]


async def test_current_time_refuses_arguments(tmp_path: Path) -> None:
    output = await current_time.run({"zone": "UTC"}, make_context(tmp_path))
    assert output.is_error


# --- conversation_search ------------------------------------------------------------


async def test_search_finds_only_the_callers_messages(
    store: ConversationStore, tmp_path: Path
) -> None:
    await say(
        store,
        "alice",
        "conv_a",
        ("m1", "user", "Where did I park the Blue bicycle?"),
        ("m2", "assistant", "You parked the blue bicycle by the station."),
        title="Bikes",
    )
    await say(store, "bob", "conv_b", ("m3", "user", "bob's blue bicycle secret"))
    await say(store, "alice", "conv_c", ("m4", "user", "Nothing to see here"))
    await say(store, "alice", "conv_a", ("m5", "user", "BLUE BICYCLE again"), create=False)

    results = await search(make_context(tmp_path, store=store), "blue bicycle")
    assert [r["message_id"] for r in results] == ["m5", "m2", "m1"]  # newest first
    first = results[0]
    assert first["conversation_id"] == "conv_a"
    assert first["conversation_title"] == "Bikes"
    assert first["role"] == "user"
    assert first["snippet"] == "BLUE BICYCLE again"
    assert datetime.fromisoformat(first["created_at"]).tzinfo is not None

    bob = await search(make_context(tmp_path, owner="bob", store=store), "blue bicycle")
    assert [r["message_id"] for r in bob] == ["m3"]
    assert await search(make_context(tmp_path, owner="mallory", store=store), "blue") == []


async def test_search_limit(store: ConversationStore, tmp_path: Path) -> None:
    await say(store, "alice", "conv_a", *((f"m{i}", "user", f"note {i}") for i in range(120)))
    results = await search(make_context(tmp_path, store=store), "note", limit=50)
    assert [r["message_id"] for r in results] == [f"m{i}" for i in range(119, 69, -1)]
    output = await conversation_search.run(
        {"query": "note", "limit": 51}, make_context(tmp_path, store=store)
    )
    assert output.is_error


async def test_like_wildcards_are_literal(store: ConversationStore, tmp_path: Path) -> None:
    await say(
        store,
        "alice",
        "conv_a",
        ("m1", "user", "growth was 100% this year"),
        ("m2", "user", "growth was 1000 units"),
        ("m3", "user", "snake_case name"),
        ("m4", "user", "snakeXcase name"),
        ("m5", "user", r"a back\slash"),
        ("m6", "user", 'she said "hi"'),
    )
    context = make_context(tmp_path, store=store)
    assert [r["message_id"] for r in await search(context, "100%")] == ["m1"]
    assert [r["message_id"] for r in await search(context, "%")] == ["m1"]
    assert [r["message_id"] for r in await search(context, "e_c")] == ["m3"]
    assert [r["message_id"] for r in await search(context, "_")] == ["m3"]
    assert [r["message_id"] for r in await search(context, "back\\s")] == ["m5"]
    assert [r["message_id"] for r in await search(context, '"hi"')] == ["m6"]


async def test_non_ascii_text_is_found_case_insensitively(
    store: ConversationStore, tmp_path: Path
) -> None:
    await say(
        store,
        "alice",
        "conv_a",
        ("m1", "user", "Le CAFÉ est fermé"),
        ("m2", "user", "你好，世界"),
        ("m3", "user", "party 🎉 time"),
        ("m4", "user", "Ελληνικά ΚΕΊΜΕΝΟ"),
    )
    context = make_context(tmp_path, store=store)
    assert [r["message_id"] for r in await search(context, "café")] == ["m1"]
    assert [r["message_id"] for r in await search(context, "FERMÉ")] == ["m1"]
    assert [r["message_id"] for r in await search(context, "世界")] == ["m2"]
    assert [r["message_id"] for r in await search(context, "🎉")] == ["m3"]
    assert [r["message_id"] for r in await search(context, "κείμενο")] == ["m4"]
    assert await search(context, "cafe") == []


async def test_search_skips_system_failed_streaming_and_non_text_parts(
    store: ConversationStore, tmp_path: Path
) -> None:
    await store.start_turn(
        NewTurn(
            "alice",
            "conv_a",
            [
                NewMessage("sys", "system", (TextPart("needle in the system prompt"),)),
                NewMessage("ok", "user", (TextPart("a needle here"),)),
                NewMessage("fail", "assistant", (TextPart("needle"),), status="failed"),
                NewMessage("live", "assistant", (TextPart("needle"),), status="streaming"),
                NewMessage("cut", "assistant", (TextPart("needle, cut"),), status="interrupted"),
                NewMessage("part", "assistant", (TextPart("needle, partly"),), status="incomplete"),
                NewMessage(
                    "tool",
                    "assistant",
                    (
                        ReasoningPart("thinking about a needle"),
                        ToolCallPart("c1", "needle_tool", '{"q": "needle"}', ToolResult("needle")),
                    ),
                ),
            ],
            create=True,
        )
    )
    context = make_context(tmp_path, store=store)
    assert [r["message_id"] for r in await search(context, "needle")] == ["part", "cut", "ok"]
    # JSON keys are not text
    assert await search(context, "kind") == []


async def test_search_without_a_store_or_query_is_a_clear_error(
    store: ConversationStore, tmp_path: Path
) -> None:
    output = await conversation_search.run({"query": "x"}, make_context(tmp_path))
    assert output.is_error
    assert "not available" in output.content
    output = await conversation_search.run({"query": "  "}, make_context(tmp_path, store=store))
    assert output.is_error
    assert "empty" in output.content


def test_snippet_centres_the_match() -> None:
    text = "a" * 500 + "NEEDLE" + "b" * 500
    piece = snippet(text, "needle", width=40)
    assert piece.startswith("...")
    assert piece.endswith("...")
    assert "NEEDLE" in piece
    assert len(piece) == 40 + 6
    assert snippet("short needle", "needle") == "short needle"
    assert snippet("line one\n\nneedle   two", "needle") == "line one needle two"


# --- capabilities and activate_tools ------------------------------------------------


class FakeSession:
    def __init__(self, lru: ActiveTools) -> None:
        self.lru = lru

    def activate(self, names: Sequence[str]) -> list[str]:
        self.lru.activate(names)
        return self.lru.offered()

    def capabilities(self) -> dict[str, Any]:
        return {"tools": self.lru.offered(), "retrieval": {"knowledge": False}}


async def test_capabilities_come_from_the_session(tmp_path: Path) -> None:
    session = FakeSession(ActiveTools(["current_time", "web_fetch"]))
    output = await get_session_capabilities.run({}, make_context(tmp_path, session=session))
    assert orjson.loads(output.content) == {
        "tools": ["current_time", "web_fetch"],
        "retrieval": {"knowledge": False},
    }
    output = await get_session_capabilities.run({}, make_context(tmp_path))
    assert output.is_error


async def test_activate_tools_reports_active_and_unknown(tmp_path: Path) -> None:
    assert activate_tools.pinned
    lru = ActiveTools(["current_time", "web_fetch", "activate_tools"], idle_iterations=1)
    lru.begin_iteration(5)
    assert lru.offered() == ["activate_tools"]
    context = make_context(tmp_path, session=FakeSession(lru))
    output = await activate_tools.run({"names": ["web_fetch", "nope", "web_fetch"]}, context)
    assert not output.is_error
    assert orjson.loads(output.content) == {
        "activated": ["web_fetch"],
        "unknown": ["nope"],
    }
    assert lru.offered() == ["web_fetch", "activate_tools"]
    output = await activate_tools.run({"names": ["x"]}, make_context(tmp_path))
    assert output.is_error
    output = await activate_tools.run({"names": "web_fetch"}, context)
    assert output.is_error  # a list is required
