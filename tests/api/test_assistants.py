"""``/v1/assistants`` over a real server: CRUD, validation, name conflicts, owners, pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("assistants"), server_config(upstream)) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


@pytest.fixture
def alice(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["alice"]) as client:
        yield client
    _delete_all(server, keys["alice"])


@pytest.fixture
def bob(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["bob"]) as client:
        yield client
    _delete_all(server, keys["bob"])


def _delete_all(server: ParleyServer, key: str) -> None:
    with server.client(key) as client:
        for assistant in client.get("/assistants", params={"limit": 100}).json()["data"]:
            client.delete(f"/assistants/{assistant['id']}")


FULL = {
    "name": "Researcher",
    "description": "Finds things out",
    "system_prompt": "You research carefully.",
    "model": "fast",
    "sampling": {"temperature": 0.3, "top_p": 0.9, "max_tokens": 800, "seed": 7},
    "reasoning_effort": "max",
    "tools": ["web_fetch", "current_time", "mcp__search__query"],
    "tool_policies": {"web_fetch": "ask", "mcp__*": "deny"},
    "knowledge_bases": ["kb_papers"],
    "memory": {"enabled": True, "retrieval": True, "scope": "global"},
    "regex_rules": [
        {"pattern": r"\bcolour\b", "replacement": "color", "roles": ["assistant"]},
        {"pattern": "(?i)secret", "replacement": "[hidden]", "display_only": True},
    ],
    "transformers": {
        "time_reminder": True,
        "prompt_injections": [{"name": "tone", "content": "Be terse.", "position": "top"}],
        "lorebook": [{"keywords": ["arxiv"], "content": "arXiv is a preprint server."}],
        "placeholders": False,
        "template": "{{ message }}",
    },
    "generate_titles": False,
}


def test_create_read_update_delete(alice: httpx.Client) -> None:
    created = alice.post("/assistants", json=FULL)
    assert created.status_code == 200, created.text
    body = created.json()
    assert body["object"] == "assistant"
    assert body["id"].startswith("asst_")
    for field in ("name", "description", "system_prompt", "model", "reasoning_effort"):
        assert body[field] == FULL[field]
    assert body["sampling"] == FULL["sampling"]
    assert body["tools"] == FULL["tools"]
    assert body["tool_policies"] == FULL["tool_policies"]
    assert body["memory"] == FULL["memory"]
    assert body["regex_rules"][0] == {
        "pattern": r"\bcolour\b",
        "replacement": "color",
        "roles": ["assistant"],
        "display_only": False,
    }
    assert body["regex_rules"][1]["roles"] == ["user", "assistant"]
    assert body["transformers"]["documents"] is True  # defaults filled in
    assert body["transformers"]["lorebook"][0]["scan_depth"] == 4
    assert (body["generate_titles"], body["generate_suggestions"]) == (False, True)
    assert body["created_at"] == body["updated_at"]

    by_id = alice.get(f"/assistants/{body['id']}").json()
    assert by_id == body
    assert alice.get("/assistants/Researcher").json() == body  # by name too

    patched = alice.patch(
        f"/assistants/{body['id']}",
        json={"description": "Finds more", "model": None, "memory": {"enabled": False}},
    )
    assert patched.status_code == 200, patched.text
    changed = patched.json()
    assert changed["description"] == "Finds more"
    assert changed["model"] is None
    assert changed["memory"] == {"enabled": False, "retrieval": False, "scope": "assistant"}
    assert changed["system_prompt"] == FULL["system_prompt"]  # untouched
    assert changed["updated_at"] >= body["updated_at"]
    assert alice.get("/assistants/Researcher").json() == changed

    renamed = alice.patch("/assistants/Researcher", json={"name": "Scholar"})
    assert renamed.json()["name"] == "Scholar"
    api_error(alice.get("/assistants/Researcher"), 404)

    deleted = alice.delete("/assistants/Scholar")
    assert deleted.json() == {"id": body["id"], "object": "assistant.deleted", "deleted": True}
    error = api_error(alice.get(f"/assistants/{body['id']}"), 404)
    assert error["code"] == "assistant_not_found"
    api_error(alice.delete(f"/assistants/{body['id']}"), 404)
    api_error(alice.patch(f"/assistants/{body['id']}", json={"description": "x"}), 404)


def test_a_minimal_assistant(alice: httpx.Client) -> None:
    body = alice.post("/assistants", json={"name": "plain"}).json()
    assert body["model"] is None
    assert body["reasoning_effort"] is None
    assert body["sampling"] == {}
    assert body["tools"] == []
    assert body["tool_policies"] == {}
    assert body["memory"] == {"enabled": False, "retrieval": False, "scope": "assistant"}
    assert body["transformers"] == {
        "time_reminder": False,
        "prompt_injections": [],
        "lorebook": [],
        "placeholders": True,
        "documents": True,
        "template": None,
        "workspace_reminder": False,
    }
    assert body["generate_titles"] is body["generate_suggestions"] is True


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({}, "name", "Field required"),
        ({"name": "asst_1"}, "name", "asst_"),
        ({"name": "a", "sampling": {"top_k": 40}}, "sampling.top_k", "Extra inputs"),
        ({"name": "a", "sampling": {"temperature": 9}}, "sampling.temperature", "less than"),
        ({"name": "a", "reasoning_effort": "huge"}, "reasoning_effort", "'max'"),
        ({"name": "a", "tool_policies": {"x": "maybe"}}, "tool_policies.x", "'ask'"),
        ({"name": "a", "memory": {"scope": "team"}}, "memory.scope", "'global'"),
        (
            {"name": "a", "regex_rules": [{"pattern": "fine"}, {"pattern": "a)"}]},
            "regex_rules.1.pattern",
            "invalid regular expression: unbalanced parenthesis",
        ),
        (
            {"name": "a", "regex_rules": [{"pattern": "(x)", "replacement": r"\3"}]},
            "regex_rules.0.replacement",
            "invalid group reference",
        ),
        ({"name": "a", "transformers": {"ocr": True}}, "transformers.ocr", "Extra inputs"),
        ({"name": "a", "tools": ["no_such_tool"]}, "tools.0", "unknown server tool"),
        ({"name": "a", "model": "dead/missing-model"}, "model", "not configured"),
        ({"name": "a", "model": "http://evil/model"}, "model", "invalid model name"),
    ],
)
def test_invalid_bodies_are_400_naming_the_field(
    alice: httpx.Client, body: dict[str, Any], param: str, words: str
) -> None:
    error = api_error(alice.post("/assistants", json=body), 400)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert words in error["message"]


def test_an_invalid_update_changes_nothing(alice: httpx.Client) -> None:
    created = alice.post("/assistants", json={"name": "steady", "tools": ["web_fetch"]}).json()
    error = api_error(
        alice.patch("/assistants/steady", json={"regex_rules": [{"pattern": "["}]}), 400
    )
    assert error["param"] == "regex_rules.0.pattern"
    error = api_error(alice.patch("/assistants/steady", json={"tools": ["web_fetch", "nope"]}), 400)
    assert (error["param"], error["code"]) == ("tools.1", "unknown_tool")
    api_error(alice.patch("/assistants/steady", json={"name": None}), 400)
    api_error(alice.patch("/assistants/steady", json={"unknown": 1}), 400)
    assert alice.get(f"/assistants/{created['id']}").json() == created


def test_names_are_unique_per_owner(alice: httpx.Client, bob: httpx.Client) -> None:
    alice.post("/assistants", json={"name": "twin"}).raise_for_status()
    other = alice.post("/assistants", json={"name": "other"}).json()
    error = api_error(alice.post("/assistants", json={"name": "twin"}), 409)
    assert (error["param"], error["code"]) == ("name", "assistant_name_taken")
    assert "twin" in error["message"]
    api_error(alice.patch(f"/assistants/{other['id']}", json={"name": "twin"}), 409)
    assert alice.get(f"/assistants/{other['id']}").json()["name"] == "other"
    # another owner may use the same name
    assert bob.post("/assistants", json={"name": "twin"}).status_code == 200


def test_another_owners_assistant_is_not_found(alice: httpx.Client, bob: httpx.Client) -> None:
    mine = alice.post("/assistants", json={"name": "private", "system_prompt": "alice only"}).json()
    for reference in (mine["id"], "private"):
        for response in (
            bob.get(f"/assistants/{reference}"),
            bob.patch(f"/assistants/{reference}", json={"system_prompt": "bob was here"}),
            bob.delete(f"/assistants/{reference}"),
        ):
            assert api_error(response, 404)["code"] == "assistant_not_found"
    assert bob.get("/assistants").json()["data"] == []
    assert alice.get(f"/assistants/{mine['id']}").json() == mine


def test_keys_are_required(server: ParleyServer, keys: dict[str, str]) -> None:
    response = httpx.get(f"{server.url}/v1/assistants")
    assert response.status_code == 401
    with server.client("sk-parley-wrong") as stranger:
        assert stranger.post("/assistants", json={"name": "x"}).status_code == 401


def test_pages_run_newest_first(alice: httpx.Client, bob: httpx.Client) -> None:
    names = [f"page-{i}" for i in range(5)]
    for name in names:
        alice.post("/assistants", json={"name": name}).raise_for_status()
    bob.post("/assistants", json={"name": "bob's"}).raise_for_status()
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        page = alice.get("/assistants", params=params).json()
        assert page["object"] == "list"
        seen += [a["name"] for a in page["data"]]
        if not page["has_more"]:
            break
        params["after"] = page["last_id"]
    assert seen == names[::-1]
    api_error(alice.get("/assistants", params={"limit": 0}), 400)
    api_error(alice.get("/assistants", params={"limit": 101}), 400)


def test_the_openai_client_reaches_the_routes(server: ParleyServer, keys: dict[str, str]) -> None:
    """The official SDK's generic helpers work against these routes (errors included)."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=keys["alice"], max_retries=0)
    created = client.post("/assistants", body={"name": "sdk"}, cast_to=httpx.Response).json()
    assert client.get(f"/assistants/{created['id']}", cast_to=httpx.Response).json() == created
    with pytest.raises(openai.ConflictError):
        client.post("/assistants", body={"name": "sdk"}, cast_to=httpx.Response)
    with pytest.raises(openai.NotFoundError):
        client.get("/assistants/asst_missing", cast_to=httpx.Response)
    client.delete(f"/assistants/{created['id']}", cast_to=httpx.Response)
