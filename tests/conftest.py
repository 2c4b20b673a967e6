"""Shared fixtures: a mock OpenAI upstream and a real Parley server in front of it."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from parley.settings import Settings
from parley.store.database import Database
from parley.testing.mock_openai import MockOpenAI
from tests.support import postgres
from tests.support.databases import migrated_database, use_template_directory
from tests.support.packages import install_example_package
from tests.support.server import ParleyServer


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Where this test process builds its one migrated database (on first use), which
    ``database``, ``ParleyServer`` and ``tests.support.databases.migrated_database`` copy
    in place of migrating a fresh one each."""
    use_template_directory(tmp_path_factory.mktemp("migrated-template"))
    yield
    use_template_directory(None)


ENGINES = ["sqlite", "postgresql"]
"""The database engines store-level tests run on: each test that takes ``database``
runs once on each."""


@pytest.fixture(params=ENGINES)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated database of the test's own (for store-level tests), once on SQLite
    (a copy of the process's migrated template file) and once on PostgreSQL with
    pgvector (a copy of its migrated template database)."""
    db = await migrated_database(engine_settings(request.param, tmp_path))
    yield db
    await db.dispose()


def engine_settings(engine: str, data_dir: Path, **values: Any) -> Settings:
    """Settings whose database is a fresh migrated one on ``engine``."""
    if engine == "postgresql":
        database = {**values.pop("database", {}), "url": postgres.new_database()}
        values["database"] = database
    return Settings(data_dir=data_dir, **values)


@pytest.fixture(scope="session")
def upstream() -> Iterator[MockOpenAI]:
    with MockOpenAI() as mock:
        yield mock


@pytest.fixture(autouse=True)
def _fresh_upstream(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts with an empty script and an empty request log."""
    if "upstream" not in request.fixturenames:
        yield
        return
    mock = request.getfixturevalue("upstream")
    if isinstance(mock, MockOpenAI):
        mock.reset()
    yield


def server_config(upstream: MockOpenAI, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "providers": [
            {
                "name": "mock",
                "kind": "openai",
                "base_url": upstream.base_url,
                "api_key": "sk-upstream-secret",
            },
            {
                "name": "dead",
                "kind": "openai",
                "base_url": "http://127.0.0.1:9/v1",
                "models": ["dead-model"],
                "connect_timeout_seconds": 2,
            },
        ],
        "models": {"fast": {"provider": "mock", "model": "mock-model"}},
        "default_model": "fast",
        "chat": {"checkpoint_seconds": 0.2},
        # a server in the test's process shares its interpreter lock: its loop reads late
        # while the test works (tests of admission set their own limit)
        "server": {"keepalive_seconds": 1.0, "max_loop_lag_ms": 2000},
        # The shared server does not retry, so error-mapping tests see one upstream call;
        # tests/api/test_agent.py runs its own server with retries and fallbacks.
        "agent": {"retry_backoff_seconds": []},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


@pytest.fixture(scope="session")
def parley(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    server = ParleyServer(tmp_path_factory.mktemp("parley"), server_config(upstream))
    with server:
        yield server


@pytest.fixture(scope="session")
def example_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding examples/interceptor-package, installed by pip."""
    return install_example_package(tmp_path_factory.mktemp("site"))


@pytest.fixture
def client(parley: ParleyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{parley.url}/v1", api_key="sk-anything", max_retries=0)


def db_rows(source: Path | ParleyServer, query: str, *args: Any) -> list[Any]:
    """Read a server's database directly: its SQLite file (WAL allows a concurrent
    reader), or its PostgreSQL database (``query`` with ``?`` placeholders either way).
    Rows are read by name or position."""
    if isinstance(source, ParleyServer):
        if source.database_url is not None:
            return postgres.rows(source.database_url, query, args)
        source = source.db_path
    connection = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        return list(connection.execute(query, args))
    finally:
        connection.close()


@pytest.fixture(scope="session", autouse=True)
def _no_native_model_code_here() -> Iterator[None]:
    """The suite never runs native model code in its own processes: llama.cpp belongs in
    the local model's worker (a crash there must cost one request, not the run). Checked
    as each test process (each xdist worker) ends: a failure there fails the run."""
    yield
    assert "llama_cpp" not in sys.modules, "llama_cpp was imported into a test process"
