"""Repositories: the only code that writes SQL. Each public method is one transaction.

Every read and write is scoped by ``owner``: another owner's ids behave as if they did
not exist. Rows come back as frozen dataclasses, never as ORM objects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from parley.ids import new_id
from parley.messages import MessageStatus, Part, Role, parts_from_json, parts_to_json
from parley.store.database import autocommit, write_transaction
from parley.store.schema import api_keys, conversations, messages


@dataclass(frozen=True, slots=True)
class NewMessage:
    id: str
    role: Role
    parts: tuple[Part, ...]
    status: MessageStatus = "complete"
    model: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: str
    conversation_id: str
    parent_id: str | None
    role: Role
    parts: tuple[Part, ...]
    status: MessageStatus
    model: str | None
    usage: dict[str, Any] | None
    finish_reason: str | None
    error: dict[str, Any] | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class StoredConversation:
    id: str
    owner: str
    title: str | None
    head_id: str | None
    created_at: float
    updated_at: float
    meta: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class StoredKey:
    id: str
    owner: str
    name: str
    prefix: str
    created_at: float
    revoked_at: float | None


class ConversationStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    # --- turns ------------------------------------------------------------------------

    async def start_turn(
        self,
        owner: str,
        conversation_id: str,
        new_messages: list[NewMessage],
        *,
        create: bool,
        title: str | None = None,
        update_parts: dict[str, tuple[Part, ...]] | None = None,
    ) -> None:
        """Write a turn's new messages (ids made by the caller) in one transaction.

        With ``create`` the conversation is created too; otherwise the messages are
        appended to its current branch. ``update_parts`` replaces the parts of existing
        messages (tool results a client sends for calls stored earlier).
        """
        now = time.time()
        async with write_transaction(self._engine) as conn:
            if create:
                parent_id: str | None = None
                await conn.execute(
                    conversations.insert().values(
                        id=conversation_id,
                        owner=owner,
                        title=title,
                        head_id=new_messages[-1].id if new_messages else None,
                        created_at=now,
                        updated_at=now,
                    )
                )
            else:
                parent_id = await self._head(conn, owner, conversation_id)
            for message_id, parts in (update_parts or {}).items():
                await conn.execute(
                    update(messages)
                    .where(messages.c.id == message_id, messages.c.owner == owner)
                    .values(parts=parts_to_json(parts), updated_at=now)
                )
            rows: list[dict[str, Any]] = []
            for offset, message in enumerate(new_messages):
                rows.append(
                    {
                        "id": message.id,
                        "conversation_id": conversation_id,
                        "owner": owner,
                        "parent_id": parent_id,
                        "role": message.role,
                        "parts": parts_to_json(message.parts),
                        "status": message.status,
                        "model": message.model,
                        "usage": None,
                        "finish_reason": None,
                        "error": None,
                        # distinct, ordered times even within one clock tick
                        "created_at": now + offset * 1e-6,
                        "updated_at": now,
                    }
                )
                parent_id = message.id
            if rows:
                await conn.execute(messages.insert(), rows)
            if not create:
                await conn.execute(
                    update(conversations)
                    .where(conversations.c.id == conversation_id)
                    .values(head_id=parent_id, updated_at=now)
                )

    async def _head(self, conn: AsyncConnection, owner: str, conversation_id: str) -> str | None:
        row = (
            await conn.execute(
                select(conversations.c.head_id).where(
                    conversations.c.id == conversation_id, conversations.c.owner == owner
                )
            )
        ).first()
        if row is None:
            raise LookupError(conversation_id)
        head: str | None = row.head_id
        return head

    async def checkpoint(self, message_id: str, parts: tuple[Part, ...]) -> None:
        """Save partial assistant output of a streaming message."""
        async with autocommit(self._engine) as conn:
            await conn.execute(
                update(messages)
                .where(messages.c.id == message_id, messages.c.status == "streaming")
                .values(parts=parts_to_json(parts), updated_at=time.time())
            )

    async def finish(
        self,
        message_id: str,
        *,
        parts: tuple[Part, ...],
        status: MessageStatus,
        model: str | None,
        usage: dict[str, Any] | None,
        finish_reason: str | None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Write the assistant message's final state, once (one statement)."""
        async with autocommit(self._engine) as conn:
            await conn.execute(
                update(messages)
                .where(messages.c.id == message_id)
                .values(
                    parts=parts_to_json(parts),
                    status=status,
                    model=model,
                    usage=usage,
                    finish_reason=finish_reason,
                    error=error,
                    updated_at=time.time(),
                )
            )

    async def interrupt_streaming(self) -> int:
        """At start-up: messages left ``streaming`` by a crash become ``interrupted``."""
        async with write_transaction(self._engine) as conn:
            result = await conn.execute(
                update(messages)
                .where(messages.c.status == "streaming")
                .values(status="interrupted", updated_at=time.time())
            )
            return int(result.rowcount or 0)

    # --- reading ----------------------------------------------------------------------

    async def get_conversation(self, owner: str, conversation_id: str) -> StoredConversation:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(conversations).where(
                        conversations.c.id == conversation_id, conversations.c.owner == owner
                    )
                )
            ).first()
        if row is None:
            raise LookupError(conversation_id)
        return _conversation(row._mapping)

    async def branch(self, owner: str, conversation_id: str) -> list[StoredMessage]:
        """The messages of the conversation's current branch, oldest first."""
        async with self._engine.connect() as conn:
            head = await self._head(conn, owner, conversation_id)
            rows = (
                await conn.execute(
                    select(messages).where(
                        messages.c.conversation_id == conversation_id, messages.c.owner == owner
                    )
                )
            ).all()
        by_id = {row.id: row._mapping for row in rows}
        chain: list[StoredMessage] = []
        cursor = head
        while cursor is not None and cursor in by_id:
            row = by_id[cursor]
            chain.append(_message(row))
            cursor = row["parent_id"]
        chain.reverse()
        return chain

    async def list_conversations(
        self, owner: str, *, limit: int, after: str | None = None
    ) -> list[StoredConversation]:
        """Newest first; ``after`` is the id of the last conversation of the previous page."""
        query = select(conversations).where(conversations.c.owner == owner)
        if after is not None:
            pivot = (
                select(conversations.c.updated_at)
                .where(conversations.c.id == after, conversations.c.owner == owner)
                .scalar_subquery()
            )
            query = query.where(
                or_(
                    conversations.c.updated_at < pivot,
                    and_(conversations.c.updated_at == pivot, conversations.c.id < after),
                )
            )
        query = query.order_by(conversations.c.updated_at.desc(), conversations.c.id.desc())
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.limit(limit))).all()
        return [_conversation(row._mapping) for row in rows]

    async def rename(self, owner: str, conversation_id: str, title: str) -> None:
        async with write_transaction(self._engine) as conn:
            result = await conn.execute(
                update(conversations)
                .where(conversations.c.id == conversation_id, conversations.c.owner == owner)
                .values(title=title, updated_at=time.time())
            )
        if not result.rowcount:
            raise LookupError(conversation_id)

    async def delete_conversation(self, owner: str, conversation_id: str) -> None:
        async with write_transaction(self._engine) as conn:
            await conn.execute(
                delete(messages).where(
                    messages.c.conversation_id == conversation_id, messages.c.owner == owner
                )
            )
            result = await conn.execute(
                delete(conversations).where(
                    conversations.c.id == conversation_id, conversations.c.owner == owner
                )
            )
        if not result.rowcount:
            raise LookupError(conversation_id)


class KeyStore:
    """API keys, stored as SHA-256 hashes (keys are random, so a slow hash adds nothing)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(self, owner: str, name: str, key_hash: str, prefix: str) -> StoredKey:
        key = StoredKey(new_id("key"), owner, name, prefix, time.time(), None)
        async with write_transaction(self._engine) as conn:
            await conn.execute(
                api_keys.insert().values(
                    id=key.id,
                    owner=owner,
                    name=name,
                    key_hash=key_hash,
                    prefix=prefix,
                    created_at=key.created_at,
                )
            )
        return key

    async def list(self) -> list[StoredKey]:
        async with self._engine.connect() as conn:
            rows = (await conn.execute(select(api_keys).order_by(api_keys.c.created_at))).all()
        return [
            StoredKey(r.id, r.owner, r.name, r.prefix, r.created_at, r.revoked_at) for r in rows
        ]

    async def revoke(self, key_id_or_prefix: str) -> int:
        async with write_transaction(self._engine) as conn:
            result = await conn.execute(
                update(api_keys)
                .where(
                    (api_keys.c.id == key_id_or_prefix) | (api_keys.c.prefix == key_id_or_prefix),
                    api_keys.c.revoked_at.is_(None),
                )
                .values(revoked_at=time.time())
            )
        return int(result.rowcount or 0)

    async def lookup(self, key_hash: str) -> tuple[bool, str | None]:
        """(any active key exists, owner of this key if it is active)."""
        async with self._engine.connect() as conn:
            owner: str | None = (
                await conn.execute(
                    select(api_keys.c.owner).where(
                        api_keys.c.key_hash == key_hash, api_keys.c.revoked_at.is_(None)
                    )
                )
            ).scalar()
            if owner is not None:
                return True, str(owner)
            count = (
                await conn.execute(
                    select(func.count())
                    .select_from(api_keys)
                    .where(api_keys.c.revoked_at.is_(None))
                )
            ).scalar_one()
        return bool(count), None


def _conversation(row: Any) -> StoredConversation:
    return StoredConversation(
        id=row["id"],
        owner=row["owner"],
        title=row["title"],
        head_id=row["head_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        meta=row["meta"],
    )


def _message(row: Any) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        conversation_id=row["conversation_id"],
        parent_id=row["parent_id"],
        role=row["role"],
        parts=parts_from_json(row["parts"]),
        status=row["status"],
        model=row["model"],
        usage=row["usage"],
        finish_reason=row["finish_reason"],
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
