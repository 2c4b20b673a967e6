"""Alembic environment: runs on the connection that ``store.database`` hands over."""

from __future__ import annotations

from alembic import context

from parley.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `parley migrate` or the server start-up")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
