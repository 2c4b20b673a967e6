"""Browser sessions (``/v1/session``): a key exchanged once for an HttpOnly cookie, the
cookie accepted wherever a key is, changes by cookie only from this very origin, and
the session ending with sign-out, its key's revocation (CLI or API) and its expiry.
A real server on loopback, driven over HTTP as a browser would."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.conftest import db_rows, server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI

COOKIE = "parley_session"
THIRTY_DAYS = 30 * 86_400


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    config = server_config(upstream, auth={"revocation_check_seconds": 0.2})
    with ParleyServer(tmp_path_factory.mktemp("browser-sessions"), config) as parley:
        yield parley


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {
        "alice": server.create_key("alice"),
        "admin": server.create_key("root", "--admin"),
    }


@pytest.fixture(scope="module")
def keyless(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("keyless"), server_config(upstream)) as parley:
        yield parley


def sign_in(server: ParleyServer, key: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/session", json={"api_key": key}, headers=headers)


def cookie_of(response: httpx.Response) -> dict[str, str]:
    """The attributes of the response's session cookie: name=value first, then flags."""
    (header,) = [h for h in response.headers.get_list("set-cookie") if h.startswith(COOKIE)]
    name_value, *attributes = [part.strip() for part in header.split(";")]
    found = {"token": name_value.split("=", 1)[1]}
    for attribute in attributes:
        name, _, value = attribute.partition("=")
        found[name.lower()] = value or "yes"
    return found


def signed_in(server: ParleyServer, key: str) -> str:
    """A session token of ``key``."""
    response = sign_in(server, key)
    assert response.status_code == 200, response.text
    return cookie_of(response)["token"]


class Browser:
    """Requests carrying a session cookie, from a page of ``origin`` (None: no Origin)."""

    def __init__(self, server: ParleyServer, token: str, origin: str | None = "") -> None:
        self.server = server
        self.headers = {"cookie": f"{COOKIE}={token}"}
        if origin is not None:
            self.headers["origin"] = origin or server.url

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return httpx.request(method, f"{self.server.url}{path}", headers=headers, **kwargs)


def a_conversation(server: ParleyServer, key: str, upstream: MockOpenAI) -> str:
    upstream.queue_text("hello")
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["parley"]["conversation_id"])


def key_id_of(server: ParleyServer, key: str) -> str:
    body = httpx.get(f"{server.url}/v1/session", headers={"authorization": f"Bearer {key}"})
    return str(body.json()["key_id"])


# --- GET /v1/session -----------------------------------------------------------------------


def test_keyless_loopback_use_is_signed_in_as_the_local_admin(keyless: ParleyServer) -> None:
    response = httpx.get(f"{keyless.url}/v1/session")

    assert response.status_code == 200
    assert response.json() == {
        "object": "session",
        "keys_required": False,
        "signed_in": True,
        "owner": "local",
        "key_id": None,
        "key_name": None,
        "admin": True,
        "expires_at": None,
    }
    refused = sign_in(keyless, "sk-parley-anything")
    assert api_error(refused, 400)["code"] == "sign_in_not_needed"
    assert "set-cookie" not in refused.headers


def test_without_a_key_or_cookie_nobody_is_signed_in(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    response = httpx.get(f"{server.url}/v1/session")

    assert response.status_code == 200
    assert response.json() == {
        "object": "session",
        "keys_required": True,
        "signed_in": False,
        "owner": None,
        "key_id": None,
        "key_name": None,
        "admin": False,
        "expires_at": None,
    }
    with_key = httpx.get(
        f"{server.url}/v1/session", headers={"authorization": f"Bearer {keys['admin']}"}
    ).json()
    assert with_key["signed_in"] is True
    assert (with_key["owner"], with_key["key_name"], with_key["admin"]) == ("root", "root", True)
    assert with_key["key_id"].startswith("key_")
    assert with_key["expires_at"] is None


# --- signing in ----------------------------------------------------------------------------


def test_signing_in_sets_an_http_only_strict_cookie_and_stores_only_its_hash(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    before = time.time()
    response = sign_in(server, keys["alice"])

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["signed_in"] is True
    assert (body["owner"], body["key_name"], body["admin"]) == ("alice", "alice", False)
    assert body["key_id"] == key_id_of(server, keys["alice"])
    assert before + THIRTY_DAYS - 5 < body["expires_at"] < time.time() + THIRTY_DAYS + 5
    assert response.headers["cache-control"] == "no-store"
    cookie = cookie_of(response)
    assert len(cookie["token"]) == 43  # secrets.token_urlsafe(32)
    assert cookie.keys() == {"token", "httponly", "samesite", "path", "max-age"}
    assert (cookie["samesite"], cookie["path"]) == ("Strict", "/")
    assert cookie["max-age"] == str(THIRTY_DAYS)
    rows = db_rows(server, "SELECT * FROM web_sessions WHERE key_id = ?", body["key_id"])
    digest = hashlib.sha256(cookie["token"].encode()).hexdigest()
    assert digest in [row["token_hash"] for row in rows]
    if server.database_url is None:  # the SQLite file, every page of it
        assert cookie["token"].encode() not in server.file_bytes(server.db_path)

    seen = Browser(server, cookie["token"]).request("GET", "/v1/session").json()
    assert seen == body


def test_over_https_the_cookie_is_secure(server: ParleyServer, keys: dict[str, str]) -> None:
    """uvicorn takes X-Forwarded-Proto from a proxy on loopback (its default)."""
    response = sign_in(server, keys["alice"], **{"x-forwarded-proto": "https"})

    assert response.status_code == 200, response.text
    assert cookie_of(response)["secure"] == "yes"


def test_a_wrong_key_is_refused_like_anywhere_else(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    error = api_error(sign_in(server, "sk-parley-wrong"), 401)
    assert error["type"] == "authentication_error"
    for body in ({}, {"api_key": ""}, {"api_key": keys["alice"], "extra": 1}):
        response = httpx.post(f"{server.url}/v1/session", json=body)
        assert api_error(response, 400)["param"], body
    not_json = httpx.post(f"{server.url}/v1/session", content=b"{", headers={"x": "y"})
    api_error(not_json, 400)


def test_a_page_elsewhere_cannot_sign_a_browser_in(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ):
        response = sign_in(server, keys["alice"], **headers)
        assert api_error(response, 403)["code"] == "csrf_origin_mismatch", headers
        assert "set-cookie" not in response.headers
    assert sign_in(server, keys["alice"], origin=server.url).status_code == 200
    assert sign_in(server, keys["alice"], **{"sec-fetch-site": "same-origin"}).status_code == 200


def test_signing_in_again_ends_the_session_the_browser_held(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    old = signed_in(server, keys["alice"])
    response = httpx.post(
        f"{server.url}/v1/session",
        json={"api_key": keys["admin"]},
        headers={"cookie": f"{COOKIE}={old}", "origin": server.url},
    )
    assert response.json()["owner"] == "root"
    assert api_error(Browser(server, old).request("GET", "/v1/models"), 401)


# --- the cookie at work --------------------------------------------------------------------


def test_the_cookie_reads_like_the_key(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    conversation_id = a_conversation(server, keys["alice"], upstream)
    browser = Browser(server, signed_in(server, keys["alice"]), origin=None)

    listed = browser.request("GET", "/v1/conversations")
    assert listed.status_code == 200, listed.text
    assert conversation_id in [c["id"] for c in listed.json()["data"]]
    detail = browser.request("GET", f"/v1/conversations/{conversation_id}")
    assert detail.json()["messages"][-1]["content"] == "hello"
    # the header's key wins over the cookie
    garbage = browser.request("GET", "/v1/models", headers={"authorization": "Bearer sk-x"})
    assert api_error(garbage, 401)["code"] == "invalid_api_key"
    admin_only = browser.request("GET", "/v1/keys")
    assert api_error(admin_only, 403)["code"] == "admin_required"


def test_changes_by_cookie_must_come_from_this_origin(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    conversation_id = a_conversation(server, keys["alice"], upstream)
    token = signed_in(server, keys["alice"])
    path = f"/v1/conversations/{conversation_id}"
    port = server.port
    refused = [
        Browser(server, token, origin="http://evil.example"),
        Browser(server, token, origin=f"http://127.0.0.1:{port + 1}"),
        Browser(server, token, origin=f"https://127.0.0.1:{port}"),
        Browser(server, token, origin=f"http://localhost:{port}"),  # another host name
        Browser(server, token, origin="null"),
        Browser(server, token, origin=None),  # neither Origin nor Sec-Fetch-Site
    ]
    for browser in refused:
        for method, kwargs in (("PATCH", {"json": {"title": "x"}}), ("DELETE", {})):
            response = browser.request(method, path, **kwargs)
            assert api_error(response, 403)["code"] == "csrf_origin_mismatch", browser.headers
    same_site = Browser(server, token, origin=None)
    response = same_site.request(
        "PATCH", path, json={"title": "x"}, headers={"sec-fetch-site": "same-site"}
    )
    api_error(response, 403)

    renamed = Browser(server, token).request("PATCH", path, json={"title": "From the page"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["title"] == "From the page"
    fetched = Browser(server, token, origin=None).request(
        "PATCH", path, json={"title": "Fetched"}, headers={"sec-fetch-site": "same-origin"}
    )
    assert fetched.json()["title"] == "Fetched"
    # a key in a header is not concerned by the page's origin
    by_key = httpx.patch(
        f"{server.url}{path}",
        json={"title": "By key"},
        headers={"authorization": f"Bearer {keys['alice']}", "origin": "http://evil.example"},
    )
    assert by_key.status_code == 200, by_key.text


def test_a_chat_by_cookie_from_the_page_works(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    browser = Browser(server, signed_in(server, keys["alice"]))
    upstream.queue_text("from ", "the page")
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    with httpx.stream(
        "POST", f"{server.url}/v1/chat/completions", json=body, headers=browser.headers
    ) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    assert "the page" in text
    assert "[DONE]" in text
    elsewhere = Browser(server, browser.headers["cookie"].split("=", 1)[1], "http://x.example")
    refused = elsewhere.request("POST", "/v1/chat/completions", json=body)
    assert api_error(refused, 403)["code"] == "csrf_origin_mismatch"


# --- how a session ends --------------------------------------------------------------------


def test_signing_out_ends_the_session_and_clears_the_cookie(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    token = signed_in(server, keys["alice"])
    browser = Browser(server, token)
    assert browser.request("GET", "/v1/conversations").status_code == 200
    elsewhere = Browser(server, token, origin="http://evil.example")
    assert api_error(elsewhere.request("DELETE", "/v1/session"), 403)
    assert browser.request("GET", "/v1/conversations").status_code == 200  # still signed in

    response = browser.request("DELETE", "/v1/session")

    assert response.status_code == 200, response.text
    assert response.json()["signed_in"] is False
    assert response.json()["keys_required"] is True
    cleared = cookie_of(response)
    assert (cleared["token"], cleared["max-age"]) == ("", "0")
    error = api_error(browser.request("GET", "/v1/conversations"), 401)
    assert error["code"] == "invalid_session"
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert not db_rows(server, "SELECT 1 FROM web_sessions WHERE token_hash=?", digest)
    again = browser.request("DELETE", "/v1/session")  # nothing to end: still fine
    assert again.status_code == 200


def test_a_cookie_that_no_longer_signs_in_is_cleared(server: ParleyServer) -> None:
    response = Browser(server, "A" * 43).request("GET", "/v1/session")

    assert response.json()["signed_in"] is False
    assert cookie_of(response)["max-age"] == "0"


def test_revoking_the_key_with_the_cli_ends_its_sessions(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    # other keys exist (``keys``): with none left, loopback clients need none at all
    key = server.create_key("carol")
    browser = Browser(server, signed_in(server, key))
    assert browser.request("GET", "/v1/conversations").status_code == 200
    key_id = key_id_of(server, key)

    revoked = server.cli("keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr

    assert api_error(browser.request("GET", "/v1/conversations"), 401)["code"] == (
        "invalid_session"
    )
    assert browser.request("GET", "/v1/session").json()["signed_in"] is False
    assert not db_rows(server, "SELECT 1 FROM web_sessions WHERE key_id=?", key_id)


def test_revoking_the_key_over_the_api_ends_its_sessions(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    key = server.create_key("dave")
    browser = Browser(server, signed_in(server, key))
    assert browser.request("GET", "/v1/models").status_code == 200

    response = httpx.delete(
        f"{server.url}/v1/keys/{key_id_of(server, key)}",
        headers={"authorization": f"Bearer {keys['admin']}"},
    )
    assert response.status_code == 200, response.text

    assert api_error(browser.request("GET", "/v1/models"), 401)
    assert api_error(sign_in(server, key), 401)


def test_an_expired_session_is_refused(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = server_config(upstream, web={"session_ttl_seconds": 1})
    with ParleyServer(tmp_path_factory.mktemp("short-sessions"), config) as short:
        key = short.create_key("erin")
        response = sign_in(short, key)
        assert cookie_of(response)["max-age"] == "1"
        browser = Browser(short, cookie_of(response)["token"])
        assert browser.request("GET", "/v1/models").status_code == 200

        time.sleep(1.2)

        error = api_error(browser.request("GET", "/v1/models"), 401)
        assert error["code"] == "invalid_session"
        assert browser.request("GET", "/v1/session").json()["signed_in"] is False
