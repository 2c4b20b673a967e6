"""Admission control, on a tiny ASGI app: the in-flight cap and the loop-lag guard, and
the routes they guard."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from tests.support.waiting import until

from parley.api.admission import Admission

pytestmark = pytest.mark.anyio


def slow_app(release: asyncio.Event, arrived: list[str] | None = None) -> Any:
    """An app that answers once ``release`` is set; the paths of the requests that
    reached it (past the guard) go in ``arrived``."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if arrived is not None:
            arrived.append(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def test_in_flight_cap_refuses_at_once() -> None:
    release = asyncio.Event()
    arrived: list[str] = []
    guard = Admission(slow_app(release, arrived), max_in_flight=1, max_loop_lag_ms=0)
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        first = asyncio.ensure_future(client.post("/v1/chat/completions"))
        await until(lambda: len(arrived) == 1)  # admitted, and held
        refused = await client.post("/v1/chat/completions")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "overloaded"
        unguarded = asyncio.ensure_future(client.get("/v1/models"))
        release.set()
        assert (await first).status_code == 200
        assert (await unguarded).status_code == 200
        assert guard.in_flight == 0
        assert (await client.post("/v1/chat/completions")).status_code == 200


async def test_a_late_loop_refuses_new_requests() -> None:
    release = asyncio.Event()
    release.set()
    guard = Admission(slow_app(release), max_in_flight=100, max_loop_lag_ms=20)
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        assert (await client.post("/v1/chat/completions")).status_code == 200
        await asyncio.sleep(0.06)
        for _ in range(3):  # a lag that lasts: the smoothed measure crosses the limit
            time.sleep(0.2)  # noqa: ASYNC251 - blocking the loop on purpose
            await asyncio.sleep(0.06)
        assert (await client.post("/v1/chat/completions")).status_code == 503
        # the lag decays once the loop is on time again
        await until(lambda: guard.lag <= guard.max_lag, timeout=5)
        assert (await client.post("/v1/chat/completions")).status_code == 200


@pytest.mark.parametrize("path", ["/mcp", "/mcp/", "/v1/tasks", "/chat/chat/completions"])
async def test_the_routes_that_start_work_are_guarded(path: str) -> None:
    release = asyncio.Event()
    arrived: list[str] = []
    guard = Admission(slow_app(release, arrived), max_in_flight=1, max_loop_lag_ms=0)
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        first = asyncio.ensure_future(client.post(path))
        await until(lambda: len(arrived) == 1)
        assert guard.in_flight == 1
        refused = await client.post(path)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "overloaded"
        release.set()
        assert (await first).status_code == 200


def _keyed(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_at_the_limit_a_light_key_uses_the_reserve_and_the_heavy_one_waits() -> None:
    release = asyncio.Event()
    arrived: list[str] = []
    guard = Admission(slow_app(release, arrived), max_in_flight=4, max_loop_lag_ms=0)
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        held = [
            asyncio.ensure_future(client.post("/v1/chat/completions", headers=_keyed("a")))
            for _ in range(4)
        ]
        await until(lambda: len(arrived) == 4)
        heavy = await client.post("/v1/chat/completions", headers=_keyed("a"))
        assert heavy.status_code == 429
        assert heavy.json()["error"]["code"] == "too_many_in_flight"
        light = asyncio.ensure_future(client.post("/v1/chat/completions", headers=_keyed("b")))
        await until(lambda: len(arrived) == 5)
        assert guard.in_flight == 5  # the reserve: max_in_flight // 20, at least one
        beyond = await client.post("/v1/chat/completions", headers=_keyed("c"))
        assert beyond.status_code == 503
        keyless = await client.post("/v1/chat/completions")
        assert keyless.status_code == 503  # one local user: as before, no reserve
        release.set()
        assert [r.status_code for r in await asyncio.gather(*held, light)] == [200] * 5


async def test_a_late_loop_refuses_the_heavy_key_and_admits_the_light_one() -> None:
    release = asyncio.Event()
    guard = Admission(slow_app(release), max_in_flight=100, max_loop_lag_ms=20)
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        held = [
            asyncio.ensure_future(client.post("/v1/chat/completions", headers=_keyed("a")))
            for _ in range(4)  # the fair share's floor
        ]
        await asyncio.sleep(0.06)
        for _ in range(3):  # a lag that lasts, well under the extreme (0.5 s)
            time.sleep(0.1)  # noqa: ASYNC251 - blocking the loop on purpose
            await asyncio.sleep(0.06)
        assert 0.02 < guard.lag < 0.5
        heavy = await client.post("/v1/chat/completions", headers=_keyed("a"))
        assert heavy.status_code == 429
        assert "more than its share" in heavy.json()["error"]["message"]
        assert (await client.post("/v1/chat/completions")).status_code == 503  # keyless
        release.set()
        light = await client.post("/v1/chat/completions", headers=_keyed("b"))
        assert light.status_code == 200
        await asyncio.gather(*held)


async def test_other_requests_are_capped_per_key_and_not_read_ahead() -> None:
    release = asyncio.Event()
    arrived: list[str] = []
    guard = Admission(
        slow_app(release, arrived),
        max_in_flight=1,
        max_loop_lag_ms=0,
        max_other_in_flight_per_key=1,
    )
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        first = asyncio.ensure_future(client.get("/v1/conversations", headers=_keyed("a")))
        await until(lambda: len(arrived) == 1)
        refused = await client.post("/v1/memories", headers=_keyed("a"), json={"text": "x"})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        others = [
            asyncio.ensure_future(client.get(path, headers=headers))
            for path, headers in [
                ("/v1/conversations", _keyed("b")),
                ("/v1/conversations", {}),  # keyless loopback use: no cap
                ("/health", _keyed("a")),
            ]
        ]
        await until(lambda: len(arrived) == 4)  # every one of them admitted
        assert guard.in_flight == 0  # none of them counts against the chat limits
        release.set()
        assert [r.status_code for r in await asyncio.gather(first, *others)] == [200] * 4
