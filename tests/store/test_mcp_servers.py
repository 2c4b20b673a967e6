"""The MCP server rows: a round trip keeps every field and the real secrets, names are
unique and well formed, a bad row is left out of the list, and migration 0006 gives
existing assistants an empty ``mcp_servers``."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import Connection, insert, select
from tests.support.migrations import migrate_to

from parley.errors import Conflict
from parley.mcp.config import server_config
from parley.mcp.service import McpService
from parley.settings import Settings
from parley.settings.mcp import McpServerSettings, McpSettings
from parley.store.database import Database
from parley.store.mcp_servers import McpServerStore
from parley.store.schema import assistants, mcp_servers

pytestmark = pytest.mark.anyio

TOKEN = "sk-mcp-token-that-must-survive"


@pytest.fixture
def store(database: Database) -> McpServerStore:
    return McpServerStore(database)


def _http() -> McpServerSettings:
    return McpServerSettings.model_validate(
        {
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Team": "blue"},
            "bearer_token": TOKEN,
            "timeout": 12,
            "enabled": False,
        }
    )


def _stdio() -> McpServerSettings:
    return McpServerSettings(command="uvx", args=["mcp-server-time"], env={"TZ": "UTC"})


async def test_round_trip_keeps_every_field_and_the_real_token(
    store: McpServerStore, database: Database
) -> None:
    created = await store.create("remote", _http())
    assert created.created_at == created.updated_at > 0

    read = await store.get("remote")
    assert read == created
    assert read.settings == _http()
    assert read.settings.token() == TOKEN
    assert server_config("remote", read.settings).bearer_token == TOKEN

    def stored(conn: Connection) -> object:
        return conn.execute(select(mcp_servers.c.config)).scalar_one()

    # the secret itself is stored (in plain text, as the docstring says), never the mask
    config = await database.read(stored)
    assert isinstance(config, dict)
    assert config["bearer_token"] == TOKEN
    assert config["headers"] == {"X-Team": "blue"}


async def test_list_oldest_first_update_and_delete(store: McpServerStore) -> None:
    await store.create("remote", _http())
    await store.create("clock", _stdio())
    assert [server.name for server in await store.list()] == ["remote", "clock"]

    changed = McpServerSettings(command="uvx", args=["other"])
    before = await store.get("clock")
    updated = await store.update("clock", changed)
    assert updated.settings == changed
    assert updated.created_at == before.created_at
    assert updated.updated_at >= before.updated_at
    assert (await store.get("clock")).settings.args == ["other"]

    await store.delete("remote")
    assert [server.name for server in await store.list()] == ["clock"]
    with pytest.raises(LookupError):
        await store.get("remote")
    with pytest.raises(LookupError):
        await store.delete("remote")
    with pytest.raises(LookupError):
        await store.update("remote", changed)


async def test_names_are_unique_and_well_formed(store: McpServerStore) -> None:
    await store.create("clock", _stdio())
    with pytest.raises(Conflict) as raised:
        await store.create("clock", _http())
    assert raised.value.code == "mcp_server_exists"
    assert raised.value.status == 409
    for bad in ("a__b", "x" * 33, "", "-lead", "has space"):
        with pytest.raises(ValueError, match="bad MCP server name"):
            await store.create(bad, _stdio())


async def test_a_row_that_no_longer_validates_is_left_out(
    store: McpServerStore, database: Database
) -> None:
    await store.create("good", _stdio())

    def corrupt(conn: Connection) -> None:
        row = {"name": "broken", "config": {"command": None}, "created_at": 0, "updated_at": 0}
        conn.execute(insert(mcp_servers).values(row))

    await database.write(corrupt)
    assert [server.name for server in await store.list()] == ["good"]
    await store.delete("broken")  # still deletable by name


async def test_a_bad_row_is_logged_without_its_values(
    store: McpServerStore, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    secrets = {"bearer_token": "sk-row-SECRET", "headers": {"X-Api-Key": "header-SECRET"}}
    configs = {
        # the model's own check fails: its input is the whole row
        "whole": {"url": "ftp://mcp.example.com/mcp", **secrets},
        # a field fails: its input is the value
        "field": {"url": "https://mcp.example.com/mcp", "timeout": "timeout-SECRET", **secrets},
    }

    def corrupt(conn: Connection) -> None:
        for name, config in configs.items():
            row = {"name": name, "config": config, "created_at": 0, "updated_at": 0}
            conn.execute(insert(mcp_servers).values(row))

    await database.write(corrupt)
    with caplog.at_level("WARNING", logger="parley.store.mcp_servers"):
        assert await store.list() == []
    field, whole = sorted(record.getMessage() for record in caplog.records)
    assert "server 'whole'" in whole
    assert "http://" in whole  # why the url is wrong
    assert "server 'field'" in field
    assert "timeout: " in field
    assert "SECRET" not in caplog.text


async def test_the_service_reads_the_rows_without_connecting(store: McpServerStore) -> None:
    await store.create("remote", _http())
    service = McpService(
        McpSettings.model_validate({"servers": {"local": {"command": "true"}}}), store
    )
    try:
        await service.reload()
        described = {entry["name"]: entry for entry in service.describe()}
        assert described["local"]["source"] == "config"
        assert described["remote"]["source"] == "api"
        assert not described["remote"]["connected"]
        settings = service.settings_of("remote")
        assert settings is not None
        assert settings.token() == TOKEN
    finally:
        await service.close()


async def test_migration_0006_gives_existing_assistants_no_servers(tmp_path: Path) -> None:
    """An assistant written before 0006 reads back with ``mcp_servers == []``."""
    path = tmp_path / "parley.db"
    migrate_to(path, "0005")
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(
            "INSERT INTO assistants (id, owner, name, description, system_prompt, sampling, "
            "tools, tool_policies, knowledge_bases, memory, regex_rules, transformers, "
            "generate_titles, generate_suggestions, created_at, updated_at) VALUES "
            "('asst_1', 'alice', 'old', '', '', '{}', '[]', '{}', '[]', '{}', '[]', '{}', "
            "1, 1, 0, 0)"
        )
    database = Database(Settings(data_dir=tmp_path))
    try:
        await database.migrate()

        def servers(conn: Connection) -> object:
            return conn.execute(select(assistants.c.mcp_servers)).scalar_one()

        assert await database.read(servers) == []
    finally:
        await database.dispose()
