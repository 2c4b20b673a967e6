"""``GET /v1/conversations?q=``: the caller's conversations whose title or message text
holds ``q`` (case-insensitive, any script, ``%`` and ``_`` literal), newest first, in
the same pages as the plain list; nothing of another owner's."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("search"), server_config(upstream)) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client


@pytest.fixture
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["bob"]) as client:
        yield client


def chat(client: httpx.Client, upstream: MockOpenAI, text: str, reply: str = "ok") -> str:
    upstream.queue_text(reply)
    response = client.post(
        "/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": text}]},
    )
    assert response.status_code == 200, response.text
    time.sleep(0.01)  # distinct updated_at, so that "newest first" is one order
    return str(response.json()["parley"]["conversation_id"])


def found(client: httpx.Client, q: str, **params: str | int) -> list[str]:
    response = client.get("/conversations", params={"q": q, **params})
    assert response.status_code == 200, response.text
    return [c["id"] for c in response.json()["data"]]


def test_title_and_message_text_match_case_insensitively(
    alice: httpx.Client, upstream: MockOpenAI
) -> None:
    asked = chat(alice, upstream, "Where do AARDVARKS sleep?")
    answered = chat(alice, upstream, "Tell me about burrows", reply="Aardvarks dig them.")
    titled = chat(alice, upstream, "something else")
    alice.patch(f"/conversations/{titled}", json={"title": "My aardvark notes"})
    chat(alice, upstream, "nothing to see")

    assert found(alice, "aardvark") == [titled, answered, asked]  # newest first
    assert found(alice, "AaRdVaRkS") == [answered, asked]
    assert found(alice, "notes") == [titled]
    assert found(alice, "zebra-never-said") == []


def test_the_shape_is_the_lists_and_pages_follow(alice: httpx.Client, upstream: MockOpenAI) -> None:
    made = [chat(alice, upstream, f"pangolin number {i}") for i in range(5)]
    newest = made[::-1]

    first = alice.get("/conversations", params={"q": "PANGOLIN", "limit": 2}).json()
    assert set(first) == {"object", "data", "has_more", "first_id", "last_id"}
    assert first["object"] == "list"
    assert [c["id"] for c in first["data"]] == newest[:2]
    assert set(first["data"][0]) == {
        "id",
        "object",
        "title",
        "assistant_id",
        "created_at",
        "updated_at",
    }
    assert first["has_more"] is True
    assert (first["first_id"], first["last_id"]) == (newest[0], newest[1])
    rest = found(alice, "pangolin", limit=2, after=first["last_id"])
    assert rest == newest[2:4]
    last = alice.get("/conversations", params={"q": "pangolin", "after": newest[3]}).json()
    assert [c["id"] for c in last["data"]] == newest[4:]
    assert last["has_more"] is False


def test_any_script_and_literal_wildcards(alice: httpx.Client, upstream: MockOpenAI) -> None:
    accented = chat(alice, upstream, "Ünïcödé Straße café")
    percent = chat(alice, upstream, "a discount of 50%_off today")
    underscore = chat(alice, upstream, "snake_case names")

    assert found(alice, "üNÏCÖDÉ") == [accented]
    assert found(alice, "straße caf") == [accented]
    assert found(alice, "50%_off") == [percent]
    assert found(alice, "e_c") == [underscore]
    assert found(alice, "%") == [percent]


def test_words_of_the_stored_json_match_nothing(alice: httpx.Client, upstream: MockOpenAI) -> None:
    """Parts are stored as JSON (``{"kind": "text", "text": ...}``): the search reads the
    text, not the JSON around it."""
    plain = chat(alice, upstream, "a quiet message", reply="a quiet answer")

    for word in ('"kind"', "kind", '"text":', "role"):
        assert plain not in found(alice, word), word


def test_another_owners_conversations_are_never_found(
    alice: httpx.Client, bob: httpx.Client, upstream: MockOpenAI
) -> None:
    theirs = chat(bob, upstream, "the okapi secret")
    bob.patch(f"/conversations/{theirs}", json={"title": "okapi"})

    assert found(alice, "okapi") == []
    assert found(bob, "okapi") == [theirs]
    assert found(alice, "okapi", after=theirs) == []


def test_the_query_is_one_to_two_hundred_characters(alice: httpx.Client) -> None:
    assert api_error(alice.get("/conversations", params={"q": ""}), 400)["param"] == "query.q"
    too_long = alice.get("/conversations", params={"q": "x" * 201})
    assert api_error(too_long, 400)["param"] == "query.q"
    assert alice.get("/conversations", params={"q": "x" * 200}).status_code == 200
    assert found(alice, "   ") == []
