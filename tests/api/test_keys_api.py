"""``/v1/keys``: admins list, make and revoke API keys over HTTP, as ``parley keys`` does;
nobody else may, no answer shows a key's hash, and a new key is shown once and kept
nowhere in the clear (not even for an ``Idempotency-Key``)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI

FIELDS = {"id", "object", "owner", "name", "prefix", "admin", "created_at", "revoked_at"}


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("keys-api"), server_config(upstream)) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {"admin": server.create_key("root", "--admin"), "alice": server.create_key("alice")}


@pytest.fixture
def admin(server: ParleyServer, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with server.client(keys["admin"]) as client:
        yield client


def test_admins_list_every_key_without_secrets(
    server: ParleyServer, keys: dict[str, str], admin: httpx.Client
) -> None:
    response = admin.get("/keys")

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["object"], body["has_more"]) == ("list", False)
    listed = {k["name"]: k for k in body["data"]}
    assert {"root", "alice"} <= listed.keys()
    assert all(set(k) == FIELDS for k in body["data"])
    assert listed["root"]["admin"] is True
    assert listed["alice"] == {
        **listed["alice"],
        "object": "api_key",
        "owner": "alice",
        "admin": False,
        "revoked_at": None,
    }
    assert keys["alice"].startswith(listed["alice"]["prefix"])
    for secret in (keys["alice"], keys["admin"]):
        assert secret not in response.text
    hashes = [row["key_hash"] for row in db_rows(server, "SELECT key_hash FROM api_keys")]
    assert not any(h in response.text for h in hashes)
    assert (body["first_id"], body["last_id"]) == (body["data"][0]["id"], body["data"][-1]["id"])


def test_nobody_else_may_touch_keys(server: ParleyServer, keys: dict[str, str]) -> None:
    with server.client(keys["alice"]) as alice:
        for response in (
            alice.get("/keys"),
            alice.post("/keys", json={"name": "mine"}),
            alice.delete(f"/keys/{alice.get('/usage').json()['key_id']}"),
        ):
            assert api_error(response, 403)["code"] == "admin_required"
    assert alice_still_works(server, keys["alice"])
    assert api_error(httpx.get(f"{server.url}/v1/keys"), 401)


def alice_still_works(server: ParleyServer, key: str) -> bool:
    with server.client(key) as client:
        return client.get("/models").status_code == 200


def test_a_new_key_is_shown_once_and_works_at_once(
    server: ParleyServer, admin: httpx.Client
) -> None:
    response = admin.post("/keys", json={"name": "laptop", "owner": "bob"})

    assert response.status_code == 201, response.text
    made = response.json()
    assert set(made) == FIELDS | {"key"}
    assert made["key"].startswith("sk-parley-")
    assert made["key"].startswith(made["prefix"])
    assert (made["owner"], made["name"], made["admin"]) == ("bob", "laptop", False)
    assert response.headers["cache-control"] == "no-store"
    with server.client(made["key"]) as bob:
        session = bob.get("/session").json()
    assert (session["owner"], session["key_id"]) == ("bob", made["id"])
    listed = {k["id"]: k for k in admin.get("/keys").json()["data"]}
    assert "key" not in listed[made["id"]]

    own = admin.post("/keys", json={"name": "second admin", "admin": True}).json()
    assert (own["owner"], own["admin"]) == ("root", True)  # the caller's owner by default


def test_a_new_key_is_never_kept_for_an_idempotency_key(
    server: ParleyServer, admin: httpx.Client
) -> None:
    headers = {"idempotency-key": "make-one-key"}
    first = admin.post("/keys", json={"name": "twice"}, headers=headers)
    second = admin.post("/keys", json={"name": "twice"}, headers=headers)

    assert first.status_code == second.status_code == 201
    assert first.json()["key"] != second.json()["key"]
    assert "idempotent-replayed" not in second.headers
    rows = db_rows(server, "SELECT body, headers FROM idempotency_keys")
    assert not any(b"sk-parley-" in (row["body"] or b"") for row in rows)


def test_bad_bodies_are_refused(admin: httpx.Client) -> None:
    for body in (
        {},
        {"name": ""},
        {"name": "x" * 201},
        {"name": "x", "admin": "maybe"},
        {"name": "x", "owner": ""},
        {"name": "x", "key": "sk-parley-chosen"},
    ):
        assert api_error(admin.post("/keys", json=body), 400)["param"], body


def test_revoking_a_key_ends_it_from_its_next_request(
    server: ParleyServer, admin: httpx.Client
) -> None:
    made = admin.post("/keys", json={"name": "doomed", "owner": "mallory"}).json()
    assert alice_still_works(server, made["key"])

    response = admin.delete(f"/keys/{made['id']}")

    assert response.status_code == 200, response.text
    revoked = response.json()
    assert set(revoked) == FIELDS
    assert revoked["id"] == made["id"]
    assert revoked["revoked_at"] >= made["created_at"]
    assert not alice_still_works(server, made["key"])
    listed = {k["id"]: k for k in admin.get("/keys").json()["data"]}
    assert listed[made["id"]]["revoked_at"] == revoked["revoked_at"]
    again = admin.delete(f"/keys/{made['id']}")
    assert api_error(again, 404)["code"] == "key_not_found"
    assert api_error(admin.delete("/keys/key_nonexistent"), 404)["param"] == "key_id"
    (row,) = db_rows(server, "SELECT revoked_at FROM api_keys WHERE id=?", made["id"])
    assert row["revoked_at"] == revoked["revoked_at"]  # what `parley keys list` reads


def test_a_key_can_be_revoked_by_its_prefix(server: ParleyServer, admin: httpx.Client) -> None:
    made = admin.post("/keys", json={"name": "by prefix"}).json()

    response = admin.delete(f"/keys/{made['prefix']}")

    assert response.json()["id"] == made["id"]
    assert not alice_still_works(server, made["key"])


def test_the_first_key_made_by_keyless_loopback_use_ends_it(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = server_config(upstream)
    with ParleyServer(tmp_path_factory.mktemp("first-key"), config) as fresh:
        response = httpx.post(f"{fresh.url}/v1/keys", json={"name": "first", "admin": True})
        assert response.status_code == 201, response.text
        made = response.json()
        assert made["owner"] == "local"  # keyless use's conversations stay reachable

        assert api_error(httpx.get(f"{fresh.url}/v1/models"), 401)
        assert httpx.get(f"{fresh.url}/v1/session").json()["keys_required"] is True
        assert alice_still_works(fresh, made["key"])
