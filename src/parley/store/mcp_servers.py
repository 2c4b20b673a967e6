"""MCP servers added over the admin API: one row per server, its settings as JSON.

``McpServerStore`` is the ``ServerRows`` that ``mcp/service.py`` reads, and what
``api/mcp.py`` writes. A row's ``config`` is an ``McpServerSettings`` as JSON, every
field present. Secrets are kept in plain text: the bearer token (``bearer_token``, which
pydantic would dump as ``**********``) and the values of ``env`` and ``headers`` are
stored as sent, exactly as provider keys and these same fields sit in plain text in the
config file. Whoever can read the database can read them; the API never shows them.

A row that no longer validates (edited by hand, or written by a newer Parley) is left
out of ``list`` with a warning, so that one bad row does not take every server down; it
can still be replaced or deleted by name. The warning names the fields and what is wrong
with them, never their values (which may be secrets).

Rules kept here: names are unique (a clash raises ``errors.Conflict``, code
``mcp_server_exists``) and well formed (``mcp.settings.check_server_name``); a missing
server raises ``LookupError``. What does not belong here: who may add what (the
allowlist, the config file's servers win: ``api/mcp.py``), connecting (``mcp/``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, delete, select, update
from sqlalchemy.exc import IntegrityError

from parley.errors import Conflict
from parley.settings.mcp import McpServerSettings, StoredServer, check_server_name
from parley.store.database import Database
from parley.store.schema import mcp_servers

log = logging.getLogger(__name__)


def stored_config(settings: McpServerSettings) -> dict[str, Any]:
    """The settings as JSON with the real bearer token (not pydantic's mask)."""
    config = settings.model_dump(mode="json")
    token = settings.bearer_token
    config["bearer_token"] = None if token is None else token.get_secret_value()
    return config


class McpServerStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def list(self) -> list[StoredServer]:
        """Every stored server that validates, oldest first."""
        statement = select(mcp_servers).order_by(mcp_servers.c.created_at, mcp_servers.c.name)

        def query(conn: Connection) -> list[StoredServer]:
            servers: list[StoredServer] = []
            for row in conn.execute(statement).all():
                try:
                    servers.append(_server(row._mapping))
                except ValidationError as exc:
                    log.warning(
                        "MCP server %r in the database is left out: %s", row.name, _problems(exc)
                    )
            return servers

        return await self._db.read(query)

    async def get(self, name: str) -> StoredServer:
        """The server named ``name``; ``LookupError`` when there is none."""
        statement = select(mcp_servers).where(mcp_servers.c.name == name)

        def query(conn: Connection) -> StoredServer:
            row = conn.execute(statement).first()
            if row is None:
                raise LookupError(name)
            return _server(row._mapping)

        return await self._db.read(query)

    async def create(self, name: str, settings: McpServerSettings) -> StoredServer:
        """Store a new server; ``Conflict`` when the name is taken, ``ValueError`` when
        it is malformed."""
        check_server_name(name)
        now = time.time()
        row = {
            "name": name,
            "config": stored_config(settings),
            "created_at": now,
            "updated_at": now,
        }

        def transaction(conn: Connection) -> None:
            try:
                conn.execute(mcp_servers.insert().values(row))
            except IntegrityError:
                raise Conflict(
                    f"an MCP server named {name!r} already exists",
                    param="name",
                    code="mcp_server_exists",
                ) from None

        await self._db.write(transaction)
        return StoredServer(name, settings, now, now)

    async def update(self, name: str, settings: McpServerSettings) -> StoredServer:
        """Replace the server's settings whole; ``LookupError`` when it is missing."""
        values = {"config": stored_config(settings), "updated_at": time.time()}

        def transaction(conn: Connection) -> StoredServer:
            changed = conn.execute(
                update(mcp_servers).where(mcp_servers.c.name == name).values(values)
            )
            if changed.rowcount == 0:
                raise LookupError(name)
            row = conn.execute(select(mcp_servers).where(mcp_servers.c.name == name)).one()
            return StoredServer(name, settings, row.created_at, row.updated_at)

        return await self._db.write(transaction)

    async def delete(self, name: str) -> None:
        """Delete the server; ``LookupError`` when it is missing."""

        def transaction(conn: Connection) -> None:
            if conn.execute(delete(mcp_servers).where(mcp_servers.c.name == name)).rowcount == 0:
                raise LookupError(name)

        await self._db.write(transaction)


def _problems(exc: ValidationError) -> str:
    """What is wrong with a row, by field, without the values (they may be secrets)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'config'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False, include_context=False)
    )


def _server(row: Any) -> StoredServer:
    return StoredServer(
        name=row["name"],
        settings=McpServerSettings.model_validate(row["config"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
