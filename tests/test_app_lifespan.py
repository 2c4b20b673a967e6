"""The app's start-up and shutdown: what started is closed, in reverse, even when a
later part fails to start."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from parley.app import create_app
from parley.interceptors.protocol import Interceptor, Services
from parley.settings import Settings

pytestmark = pytest.mark.anyio


class Recorder(Interceptor):
    order = 150
    seen: ClassVar[list[str]] = []

    async def startup(self, services: Services) -> None:
        self.seen.append("started")

    async def shutdown(self) -> None:
        self.seen.append("stopped")


class Broken(Interceptor):
    order = 160

    async def startup(self, services: Services) -> None:
        raise RuntimeError("the licence server is down")


def _settings(tmp_path: Path, *chain: str) -> Settings:
    return Settings(
        data_dir=tmp_path,
        interceptors={"chain": [{"use": f"{__name__}:{name}"} for name in chain]},
    )


def _running() -> tuple[set[asyncio.Task[object]], set[threading.Thread]]:
    """The tasks and threads there are (others' too: a server of another test may be
    running in this process)."""
    return asyncio.all_tasks(), set(threading.enumerate())


def _left_running(
    before: tuple[set[asyncio.Task[object]], set[threading.Thread]],
) -> tuple[list[str], list[str]]:
    """The tasks and the database's threads started since ``before`` and still running."""
    tasks = [t.get_name() for t in asyncio.all_tasks() - before[0]]
    threads = set(threading.enumerate()) - before[1]
    return tasks, [t.name for t in threads if t.name.startswith("parley-db")]


async def test_a_part_that_fails_to_start_closes_what_started_before_it(tmp_path: Path) -> None:
    Recorder.seen.clear()
    before = _running()
    app = create_app(_settings(tmp_path, "Recorder", "Broken"))
    with pytest.raises(RuntimeError, match="licence server"):
        async with app.router.lifespan_context(app):
            pytest.fail("the app served although a part failed to start")
    assert Recorder.seen == ["started", "stopped"]
    tasks, threads = _left_running(before)
    assert tasks == []  # the audit log's writer, the revocation watcher
    assert threads == []  # the database's reader pools


async def test_a_clean_start_and_stop_leaves_nothing_running(tmp_path: Path) -> None:
    Recorder.seen.clear()
    before = _running()
    app = create_app(_settings(tmp_path, "Recorder"))
    async with app.router.lifespan_context(app):
        assert app.state.parley.database is not None
        assert Recorder.seen == ["started"]
    assert Recorder.seen == ["started", "stopped"]
    assert _left_running(before) == ([], [])
