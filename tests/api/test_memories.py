"""``/v1/memories`` over a real server: CRUD, scopes, search, validation, pages, and a
second owner who gets 404 for every id of the first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("memories"), server_config(upstream)) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client
    _clean(server, keys["alice"])


@pytest.fixture
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["bob"]) as client:
        yield client
    _clean(server, keys["bob"])


def _clean(server: ParleyServer, key: str) -> None:
    with server.client(key) as client:
        while memories := client.get("/memories", params={"limit": 100}).json()["data"]:
            for memory in memories:
                client.delete(f"/memories/{memory['id']}").raise_for_status()
        for assistant in client.get("/assistants", params={"limit": 100}).json()["data"]:
            client.delete(f"/assistants/{assistant['id']}")


def _created(client: httpx.Client, text: str, assistant_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"text": text}
    if assistant_id is not None:
        body["assistant_id"] = assistant_id
    response = client.post("/memories", json=body)
    assert response.status_code == 201, response.text
    memory: dict[str, Any] = response.json()
    return memory


def test_create_read_update_delete(alice: httpx.Client, server: ParleyServer) -> None:
    created = _created(alice, "  The user prefers metric units.  ")
    assert created["id"].startswith("mem_")
    assert created == {
        "id": created["id"],
        "object": "memory",
        "text": "The user prefers metric units.",
        "assistant_id": None,
        "source": "api",
        "conversation_id": None,
        "created_at": created["created_at"],
        "updated_at": created["created_at"],
    }
    assert alice.get(f"/memories/{created['id']}").json() == created

    patched = alice.patch(f"/memories/{created['id']}", json={"text": "Metric, and 24-hour time"})
    assert patched.status_code == 200, patched.text
    changed = patched.json()
    assert changed["text"] == "Metric, and 24-hour time"
    assert changed["updated_at"] >= created["updated_at"]
    assert changed["created_at"] == created["created_at"]
    assert alice.get(f"/memories/{created['id']}").json() == changed
    rows = db_rows(server, "SELECT terms FROM memories WHERE id = ?", created["id"])
    assert rows[0]["terms"] == "metric and 24 hour time"

    deleted = alice.delete(f"/memories/{created['id']}")
    assert deleted.json() == {"id": created["id"], "object": "memory.deleted", "deleted": True}
    assert api_error(alice.get(f"/memories/{created['id']}"), 404)["code"] == "memory_not_found"
    api_error(alice.delete(f"/memories/{created['id']}"), 404)
    api_error(alice.patch(f"/memories/{created['id']}", json={"text": "x"}), 404)
    assert db_rows(server, "SELECT id FROM memories WHERE id = ?", created["id"]) == []


def test_assistant_scopes(alice: httpx.Client) -> None:
    assistant = alice.post("/assistants", json={"name": "Researcher"}).json()
    by_id = _created(alice, "Cites arXiv ids", assistant["id"])
    by_name = _created(alice, "Prefers surveys", "Researcher")
    shared = _created(alice, "Lives in Lisbon")
    assert by_id["assistant_id"] == by_name["assistant_id"] == assistant["id"]

    def ids(**params: Any) -> list[str]:
        response = alice.get("/memories", params=params)
        assert response.status_code == 200, response.text
        return [memory["id"] for memory in response.json()["data"]]

    assert ids(assistant_id=assistant["id"]) == [by_name["id"], by_id["id"]]
    assert ids(assistant_id="Researcher") == [by_name["id"], by_id["id"]]
    assert ids(scope="global") == [shared["id"]]
    assert ids() == [shared["id"], by_name["id"], by_id["id"]]
    error = api_error(alice.get("/memories", params={"assistant_id": "asst_missing"}), 404)
    assert (error["code"], error["param"]) == ("assistant_not_found", "assistant_id")
    api_error(
        alice.get("/memories", params={"assistant_id": assistant["id"], "scope": "global"}), 400
    )
    api_error(alice.get("/memories", params={"scope": "everything"}), 400)
    error = api_error(alice.post("/memories", json={"text": "x", "assistant_id": "Nobody"}), 404)
    assert error["code"] == "assistant_not_found"


def test_search_ranks_within_one_scope(alice: httpx.Client) -> None:
    assistant = alice.post("/assistants", json={"name": "Cook"}).json()
    tea = _created(alice, "The user drinks green tea without sugar")
    _created(alice, "The user cycles to work")
    _created(alice, "Green tea is the user's favourite", assistant["id"])
    chinese = _created(alice, "用户喜欢喝绿茶。")

    response = alice.post("/memories/search", json={"query": "green tea sugar"})
    assert response.status_code == 200, response.text
    found = response.json()
    assert found["object"] == "list"
    assert found["data"][0]["id"] == tea["id"]  # every term, and in the global scope only
    assert found["data"][0]["score"] > 0
    assert all(hit["assistant_id"] is None for hit in found["data"])
    scores = [hit["score"] for hit in found["data"]]
    assert scores == sorted(scores, reverse=True)

    in_assistant = alice.post(
        "/memories/search", json={"query": "green tea", "assistant_id": "Cook"}
    ).json()
    assert [hit["assistant_id"] for hit in in_assistant["data"]] == [assistant["id"]]
    chinese_hits = alice.post("/memories/search", json={"query": "绿茶", "limit": 1}).json()
    assert [hit["id"] for hit in chinese_hits["data"]] == [chinese["id"]]
    for body in ({"query": ""}, {"query": "tea", "limit": 0}, {"query": "tea", "limit": 51}):
        api_error(alice.post("/memories/search", json=body), 400)


def test_every_id_tried_by_another_owner_is_not_found(
    alice: httpx.Client, bob: httpx.Client
) -> None:
    assistant = alice.post("/assistants", json={"name": "Private"}).json()
    memories = [
        _created(alice, "alice's secret recipe"),
        _created(alice, "alice's assistant secret", assistant["id"]),
    ]
    for memory in memories:
        for response in (
            bob.get(f"/memories/{memory['id']}"),
            bob.patch(f"/memories/{memory['id']}", json={"text": "bob was here"}),
            bob.delete(f"/memories/{memory['id']}"),
        ):
            assert api_error(response, 404)["code"] == "memory_not_found"
    for reference in (assistant["id"], "Private"):
        for response in (
            bob.get("/memories", params={"assistant_id": reference}),
            bob.post("/memories", json={"text": "planted", "assistant_id": reference}),
            bob.post("/memories/search", json={"query": "secret", "assistant_id": reference}),
        ):
            assert api_error(response, 404)["code"] == "assistant_not_found"
    assert bob.get("/memories").json()["data"] == []
    assert bob.post("/memories/search", json={"query": "secret recipe"}).json()["data"] == []
    # bob's own memory with the same words stays his
    theirs = _created(bob, "bob's secret recipe")
    found = alice.post("/memories/search", json={"query": "secret recipe"}).json()["data"]
    assert theirs["id"] not in [hit["id"] for hit in found]
    for memory in memories:
        assert alice.get(f"/memories/{memory['id']}").json() == memory


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "text"),
        ({"text": ""}, "text"),
        ({"text": "x" * 2_001}, "text"),
        ({"text": "x", "source": "tool"}, "source"),
        ({"text": "x", "assistant_id": ""}, "assistant_id"),
    ],
)
def test_invalid_bodies_are_400(alice: httpx.Client, body: dict[str, Any], param: str) -> None:
    error = api_error(alice.post("/memories", json=body), 400)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


def test_blank_text_is_refused(alice: httpx.Client) -> None:
    error = api_error(alice.post("/memories", json={"text": "   "}), 400)
    assert error["param"] == "text"
    memory = _created(alice, "kept")
    api_error(alice.patch(f"/memories/{memory['id']}", json={"text": " "}), 400)
    api_error(alice.patch(f"/memories/{memory['id']}", json={"text": "x", "extra": 1}), 400)
    assert alice.get(f"/memories/{memory['id']}").json() == memory


def test_the_same_text_twice_is_one_memory(alice: httpx.Client) -> None:
    first = _created(alice, "The user is vegetarian")
    assert _created(alice, "The user is vegetarian") == first
    assert len(alice.get("/memories").json()["data"]) == 1


def test_pages_run_newest_first(alice: httpx.Client, bob: httpx.Client) -> None:
    texts = [f"fact {i}" for i in range(5)]
    for text in texts:
        _created(alice, text)
    _created(bob, "bob's fact")
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        page = alice.get("/memories", params=params).json()
        assert page["object"] == "list"
        seen += [memory["text"] for memory in page["data"]]
        if not page["has_more"]:
            break
        params["after"] = page["last_id"]
    assert seen == texts[::-1]
    api_error(alice.get("/memories", params={"limit": 0}), 400)
    api_error(alice.get("/memories", params={"limit": 101}), 400)


def test_keys_are_required(server: ParleyServer, keys: dict[str, str]) -> None:
    assert httpx.get(f"{server.url}/v1/memories").status_code == 401
    with server.client("sk-parley-wrong") as stranger:
        assert stranger.post("/memories", json={"text": "x"}).status_code == 401
        assert stranger.post("/memories/search", json={"query": "x"}).status_code == 401
