"""Serving the web UI: ``/`` and the app's own routes answer ``index.html`` (never
cached), ``/assets/...`` the bundle's files (cached for good, typed by their extension),
nothing outside ``assets/``; every answer locked to this origin. Without the bundle (or
with ``web.enabled`` off) ``/`` is the connect page. A tiny bundle in a folder of the
test's own stands in for the built one (``web.static_dir``)."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

INDEX = b'<!doctype html><title>Parley UI</title><script type="module" src="/assets/app-1a2b.js">'
FILES = {
    "app-1a2b.js": (b"console.log('parley');", "text/javascript; charset=utf-8"),
    "style-9z8y.css": (b"body { margin: 0 }", "text/css; charset=utf-8"),
    "inter-3c4d.woff2": (b"wOF2 font bytes", "font/woff2"),
    "logo-5e6f.svg": (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"),
    "manifest.webmanifest": (b"{}", "application/manifest+json"),
    "chunks/lazy-7a8b.js": (b"export default 1;", "text/javascript; charset=utf-8"),
    "blob.unknownext": (b"\x00\x01", "application/octet-stream"),
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'; object-src 'none'"
)
APP_PATHS = [
    "/",
    "/c/conv_0123456789abcdef",
    "/kb",
    "/kb/kb_123",
    "/assistants",
    "/memory",
    "/settings",
    "/sign-in",
]


def make_bundle(root: Path) -> Path:
    bundle = root / "static"
    (bundle / "assets" / "chunks").mkdir(parents=True)
    (bundle / "index.html").write_bytes(INDEX)
    for name, (content, _) in FILES.items():
        (bundle / "assets" / name).write_bytes(content)
    (bundle / "assets" / ".hidden").write_text("a hidden file's content")
    (bundle / "secret.txt").write_text("beside the assets")
    (root / "outside.txt").write_text("outside the bundle")
    (bundle / "assets" / "escape.js").symlink_to(root / "outside.txt")
    return bundle


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    root = tmp_path_factory.mktemp("webui")
    config = server_config(upstream, web={"static_dir": str(make_bundle(root))})
    with ParleyServer(root / "data", config) as parley:
        parley.create_key("alice")  # the UI itself needs no key: its API calls do
        yield parley


def assert_locked_down(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("path", APP_PATHS)
def test_the_app_and_its_routes_answer_index_html(server: ParleyServer, path: str) -> None:
    response = httpx.get(f"{server.url}{path}")

    assert response.status_code == 200, response.text
    assert response.content == INDEX
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    assert_locked_down(response)


@pytest.mark.parametrize("name", sorted(FILES))
def test_assets_are_served_typed_and_immutable(server: ParleyServer, name: str) -> None:
    content, media_type = FILES[name]
    response = httpx.get(f"{server.url}/assets/{name}")

    assert response.status_code == 200, response.text
    assert response.content == content
    assert response.headers["content-type"] == media_type
    assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert_locked_down(response)


@pytest.mark.parametrize(
    "path",
    [
        "/assets/missing-0000.js",
        "/assets/",
        "/assets",
        "/assets/chunks",
        "/assets/.hidden",
        "/assets/escape.js",  # a symbolic link leading out of assets/
        "/assets/../secret.txt",
        "/assets/chunks/../../secret.txt",
        "/assets/%2e%2e/secret.txt",
        "/assets/..%2fsecret.txt",
        "/assets/..%5csecret.txt",
        "/assets//etc/passwd",
        "/assets/app-1a2b.js%00.png",
        "/index.html",
        "/secret.txt",
        "/c",
        "/c/x/y",
        "/kb/a/b",
    ],
)
def test_nothing_else_is_served(server: ParleyServer, path: str) -> None:
    """Sent byte for byte (no client normalising the path first)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()

    assert response.status == 404, (path, body)
    assert b"beside the assets" not in body
    assert b"outside the bundle" not in body
    assert b"a hidden file's content" not in body


def test_the_connect_page_moved_and_links_to_the_app(server: ParleyServer) -> None:
    response = httpx.get(f"{server.url}/connect")

    assert response.status_code == 200
    assert "Connect a client" in response.text
    assert f'href="{server.url}/"' in response.text
    assert response.headers["x-frame-options"] == "DENY"


@pytest.fixture(
    scope="module",
    params=["disabled", "missing"],
)
def without_ui(
    request: pytest.FixtureRequest,
    upstream: MockOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ParleyServer]:
    root = tmp_path_factory.mktemp(f"webui-{request.param}")
    if request.param == "disabled":
        web = {"enabled": False, "static_dir": str(make_bundle(root))}
    else:
        (root / "empty").mkdir()
        web = {"static_dir": str(root / "empty")}
    with ParleyServer(root / "data", server_config(upstream, web=web)) as parley:
        yield parley


def test_without_the_bundle_the_root_is_the_connect_page(without_ui: ParleyServer) -> None:
    root = httpx.get(f"{without_ui.url}/")
    assert root.status_code == 200
    assert "Connect a client" in root.text
    assert "The web UI" not in root.text
    assert httpx.get(f"{without_ui.url}/connect").text == root.text
    for path in (*APP_PATHS[1:], "/assets/app-1a2b.js"):
        response = httpx.get(f"{without_ui.url}{path}")
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
