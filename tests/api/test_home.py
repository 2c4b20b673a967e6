"""What a person meets opening the server in a browser: ``/connect`` (also ``/`` without
the web UI's bundle: ``tests/api/test_webui.py``), ``/docs`` and ``/redoc``, all of it
served by Parley itself (nothing from a CDN, so it works offline)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.server import ParleyServer

from parley.api import openapi
from parley.app import create_app
from parley.settings import Settings


def test_the_connect_page_says_what_is_there(parley: ParleyServer) -> None:
    response = httpx.get(f"{parley.url}/connect")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    page = response.text
    assert f'base_url="{parley.url}/v1"' in page
    assert f"parley chat --url {parley.url}" in page
    for link in ("/docs", "/redoc", "/openapi.json", "/v1/models", "/health"):
        assert f'href="{parley.url}{link}"' in page
    assert "<script" not in page


def test_the_connect_page_escapes_the_host_it_echoes(parley: ParleyServer) -> None:
    response = httpx.get(f"{parley.url}/connect", headers={"host": 'x"><script>alert(1)</script>'})

    assert response.status_code == 200
    assert "<script>" not in response.text
    assert "alert(1)</script>" not in response.text


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_reference_loads_only_from_parley(parley: ParleyServer, page: str) -> None:
    html = httpx.get(f"{parley.url}{page}").text

    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(asset.endswith(".js") for asset in assets), html
    for asset in assets:
        assert asset.startswith("/"), f"{page} loads {asset} from elsewhere"
        response = httpx.get(f"{parley.url}{asset}")
        assert response.status_code == 200, asset
        if asset.endswith(".js"):
            assert len(response.content) > 100_000  # the real bundle, not a stub
    assert "/openapi.json" in html
    assert httpx.get(f"{parley.url}/openapi.json").json()["info"]["title"] == "Parley"


@pytest.mark.anyio
async def test_the_api_document_is_built_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building /openapi.json takes about a second of Python: on the event loop it held
    every request (and admission then refused keyless chats for the loop's lag). Which
    thread builds it is checked, not how long the loop paused: a pause measured on a busy
    2-core machine reached 0.6 s with the build in a worker thread (the GIL is shared)."""
    builders: list[int] = []

    def finish(document: dict[str, Any]) -> dict[str, Any]:
        builders.append(threading.get_ident())
        return real_finish(document)

    real_finish = openapi.finish
    monkeypatch.setattr(openapi, "finish", finish)
    app = create_app(Settings(data_dir=tmp_path))  # the lifespan never runs: no files
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        first = await http.get("/openapi.json")
        second = await http.get("/openapi.json")  # built once, then served as it is
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert first.json()["paths"]["/v1/models/{model}"]
    assert len(builders) == 1
    assert builders[0] != threading.get_ident(), "built on the event loop's thread"


def test_ready_checks_the_database_and_says_redis_is_not_used(parley: ParleyServer) -> None:
    answer = httpx.get(f"{parley.url}/ready")
    assert answer.status_code == 200
    assert answer.json() == {
        "status": "ready",
        "database": "ok",
        "redis": "not configured",
        "accepting": True,
    }
