"""Repositories: the only code that writes SQL. Each public method is one transaction,
written as a plain function of a Connection and run by ``Database``.

Every read and write is scoped by ``owner``: another owner's ids behave as if they did
not exist. Rows come back as frozen dataclasses, never as ORM objects.

``ConversationStore`` is this module's turns and reads, with the branch operations
(``branches.py``) and message search (``search.py``) mixed in. The other stores have
modules of their own: ``assistants.py``, ``meta.py``, ``summaries.py``, ``audit.py``,
``usage.py``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    and_,
    bindparam,
    delete,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError

from parley.ids import new_id
from parley.messages import MessageStatus, Part, Role, parts_from_json, parts_to_json
from parley.store.branches import BranchOps, Versions, copy_rows, load_tree
from parley.store.database import Database
from parley.store.schema import conversations, messages
from parley.store.search import SearchOps


@dataclass(frozen=True, slots=True)
class NewMessage:
    id: str
    role: Role
    parts: tuple[Part, ...]
    status: MessageStatus = "complete"
    model: str | None = None


@dataclass(frozen=True, slots=True)
class NewTurn:
    """A turn's new rows, written in one transaction by ``ConversationStore.start_turn``.

    With ``create`` the conversation is created too; otherwise the messages are appended
    to its current branch, or under ``parent_id`` when given (at the root with ``root``:
    a new version of the first message). The last message written becomes the branch
    head."""

    owner: str
    conversation_id: str
    messages: Sequence[NewMessage]
    create: bool = False
    title: str | None = None
    """The conversation's title (a new one's, or a blank one's)."""
    update_parts: Mapping[str, tuple[Part, ...]] = field(default_factory=dict)
    """Replaces the parts of stored messages (client tool results, calls closed unrun)."""
    parent_id: str | None = None
    root: bool = False
    copy_after: Sequence[str] = ()
    """Messages copied, in order, after the new ones (a regenerated reply keeps them)."""
    settle: str | None = None
    """A reply paused for approval that the new message leaves behind: it becomes
    complete (its calls closed in ``update_parts``)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Kept with a conversation being created (the assistant it was started with)."""


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


# Hot-path statements are built once: building and keying a statement per call costs
# more than SQLite's own work (see docs/performance.md).
_INSERT_CONVERSATION = conversations.insert()
_INSERT_MESSAGES = messages.insert()
_MOVE_HEAD = (
    update(conversations)
    .where(conversations.c.id == bindparam("b_id"))
    .values(head_id=bindparam("head_id"), updated_at=bindparam("updated_at"))
)
_SET_PARTS = (
    update(messages)
    .where(messages.c.id == bindparam("b_id"), messages.c.owner == bindparam("b_owner"))
    .values(parts=bindparam("parts"), updated_at=bindparam("updated_at"))
)
_CHECKPOINT = (
    update(messages)
    .where(messages.c.id == bindparam("b_id"), messages.c.status == "streaming")
    .values(parts=bindparam("parts"), updated_at=bindparam("updated_at"))
)
_FINISH = (
    update(messages)
    .where(messages.c.id == bindparam("b_id"))
    .values(
        {
            name: bindparam(name)
            for name in ("parts", "status", "model", "usage", "finish_reason", "error")
        }
        | {"updated_at": bindparam("updated_at")}
    )
)
_HEAD = select(conversations.c.head_id).where(
    conversations.c.id == bindparam("b_id"), conversations.c.owner == bindparam("b_owner")
)


class ConversationStore(BranchOps, SearchOps):
    def __init__(self, database: Database) -> None:
        self._db = database

    # --- turns ------------------------------------------------------------------------

    async def start_turn(self, turn: NewTurn) -> None:
        """Write a turn's new messages (ids made by the caller) in one transaction
        (``NewTurn`` says where they go). Raises LookupError when the conversation is
        missing, someone else's, or (``create``) its id is taken."""
        now = time.time()

        def transaction(conn: Connection) -> None:
            if turn.create:
                _create_conversation(conn, turn, now)
                parent = turn.parent_id
            elif turn.parent_id is None and not turn.root:
                parent = _head(conn, turn.owner, turn.conversation_id)
            elif not _owned(conn, turn.owner, turn.conversation_id):
                raise LookupError(turn.conversation_id)
            else:
                parent = turn.parent_id
            _update_stored(conn, turn, now)
            parent = _insert_messages(conn, turn, parent, now)
            if turn.copy_after:
                tree = load_tree(conn, turn.owner, turn.conversation_id)
                later = [tree.rows[i] for i in turn.copy_after if i in tree.rows]
                parent = copy_rows(
                    conn, later, conversation_id=turn.conversation_id, parent_id=parent, now=now
                )
            if not turn.create:
                conn.execute(
                    _MOVE_HEAD,
                    {"b_id": turn.conversation_id, "head_id": parent, "updated_at": now},
                )
                if turn.title is not None:
                    _title_if_blank(conn, turn.owner, turn.conversation_id, turn.title)

        await self._db.write(transaction)

    async def resume_turn(
        self, owner: str, conversation_id: str, message_id: str, parts: tuple[Part, ...]
    ) -> None:
        """A reply paused for approval carries on: its parts (the decisions applied) are
        written and it is streaming again. Exactly one resume wins: LookupError when the
        message is not (or no longer) awaiting approval."""

        def transaction(conn: Connection) -> None:
            result = conn.execute(
                update(messages)
                .where(
                    messages.c.id == message_id,
                    messages.c.conversation_id == conversation_id,
                    messages.c.owner == owner,
                    messages.c.status == "awaiting_approval",
                )
                .values(status="streaming", parts=parts_to_json(parts), updated_at=time.time())
            )
            if not result.rowcount:
                raise LookupError(message_id)

        await self._db.write(transaction)

    async def checkpoint(self, message_id: str, parts: tuple[Part, ...]) -> None:
        """Save partial assistant output of a streaming message."""
        values = {"b_id": message_id, "parts": parts_to_json(parts), "updated_at": time.time()}
        await self._db.write(lambda conn: conn.execute(_CHECKPOINT, values))

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
        values = {
            "b_id": message_id,
            "parts": parts_to_json(parts),
            "status": status,
            "model": model,
            "usage": usage,
            "finish_reason": finish_reason,
            "error": error,
            "updated_at": time.time(),
        }
        await self._db.write(lambda conn: conn.execute(_FINISH, values))

    async def interrupt_streaming(
        self,
        only: Sequence[tuple[str, str]] | None = None,
        *,
        updated_before: float | None = None,
    ) -> int:
        """Messages left ``streaming`` by a crash become ``interrupted``: all of them (at
        the start of a lone instance), or those of the ``only`` (owner, conversation)
        pairs last written before ``updated_before`` (a dead instance's, found by
        ``conversations/recovery.py``). How many."""
        where = [messages.c.status == "streaming"]
        if updated_before is not None:
            where.append(messages.c.updated_at < updated_before)
        if only is not None:
            if not only:
                return 0
            where.append(tuple_(messages.c.owner, messages.c.conversation_id).in_(list(only)))

        def transaction(conn: Connection) -> int:
            statement = update(messages).where(*where)
            result = conn.execute(statement.values(status="interrupted", updated_at=time.time()))
            return int(result.rowcount or 0)

        return await self._db.write(transaction)

    async def streaming_conversations(self, updated_before: float) -> list[tuple[str, str]]:
        """(owner, conversation id) of the messages still ``streaming`` that were last
        written before ``updated_before``."""
        statement = (
            select(messages.c.owner, messages.c.conversation_id)
            .where(messages.c.status == "streaming", messages.c.updated_at < updated_before)
            .distinct()
        )

        def query(conn: Connection) -> list[tuple[str, str]]:
            return [(str(row[0]), str(row[1])) for row in conn.execute(statement)]

        return await self._db.read(query)

    async def create_conversation(
        self, owner: str, *, title: str | None, meta: dict[str, Any] | None
    ) -> StoredConversation:
        """An empty conversation (``POST /v1/conversations``). A title given here is the
        user's own; without one, the first message's first line becomes a provisional
        title (see ``_title_if_blank``), which a generated one replaces."""
        now = time.time()
        conversation = StoredConversation(new_id("conv"), owner, title, None, now, now, meta)
        row = {
            "id": conversation.id,
            "owner": owner,
            "title": title,
            "head_id": None,
            "meta": meta,
            "created_at": now,
            "updated_at": now,
        }
        await self._db.write(lambda conn: conn.execute(_INSERT_CONVERSATION, row))
        return conversation

    # --- reading ----------------------------------------------------------------------

    async def get_conversation(self, owner: str, conversation_id: str) -> StoredConversation:
        def query(conn: Connection) -> StoredConversation:
            row = conn.execute(
                select(conversations).where(
                    conversations.c.id == conversation_id, conversations.c.owner == owner
                )
            ).first()
            if row is None:
                raise LookupError(conversation_id)
            return _conversation(row._mapping)

        return await self._db.read(query)

    async def message(self, owner: str, message_id: str) -> StoredMessage:
        """One of the owner's messages. LookupError: none of theirs has that id."""
        statement = select(messages).where(messages.c.id == message_id, messages.c.owner == owner)

        def query(conn: Connection) -> StoredMessage:
            row = conn.execute(statement).first()
            if row is None:
                raise LookupError(message_id)
            return _message(row._mapping)

        return await self._db.read(query)

    async def branch(self, owner: str, conversation_id: str) -> list[StoredMessage]:
        """The messages of the conversation's current branch, oldest first."""

        def query(conn: Connection) -> list[StoredMessage]:
            head = _head(conn, owner, conversation_id)
            rows = conn.execute(
                select(messages).where(
                    messages.c.conversation_id == conversation_id, messages.c.owner == owner
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

        return await self._db.read(query)

    async def branch_versions(
        self, owner: str, conversation_id: str
    ) -> list[tuple[StoredMessage, Versions]]:
        """The current branch, each message with the versions at its position."""

        def query(conn: Connection) -> list[tuple[StoredMessage, Versions]]:
            tree = load_tree(conn, owner, conversation_id)
            return [(_message(row), tree.versions(row)) for row in tree.path_to(tree.head)]

        return await self._db.read(query)

    async def around(
        self, owner: str, conversation_id: str, message_id: str
    ) -> tuple[list[StoredMessage], list[str]]:
        """(root .. ``message_id``, the ids that follow it on the branch a reader sees
        through it). LookupError: no such conversation or message."""

        def query(conn: Connection) -> tuple[list[StoredMessage], list[str]]:
            tree = load_tree(conn, owner, conversation_id)
            if message_id not in tree.rows:
                raise LookupError(message_id)
            return [_message(row) for row in tree.path_to(message_id)], tree.after(message_id)

        return await self._db.read(query)

    async def list_conversations(
        self, owner: str, *, limit: int, after: str | None = None
    ) -> list[StoredConversation]:
        """Newest first; ``after`` is the id of the last conversation of the previous page."""
        statement = _newest_first(owner, after).limit(limit)
        return await self._db.read(
            lambda conn: [_conversation(row._mapping) for row in conn.execute(statement).all()]
        )

    async def search_conversations(
        self, owner: str, query: str, *, limit: int, after: str | None = None
    ) -> list[StoredConversation]:
        """``list_conversations``, of those whose title or message text contains
        ``query`` (case-insensitive; ``search.py``)."""
        rows = await self.matching_conversations(
            _newest_first(owner, after), owner, query, limit=limit
        )
        return [_conversation(row) for row in rows]

    async def rename(self, owner: str, conversation_id: str, title: str) -> None:
        def transaction(conn: Connection) -> None:
            result = conn.execute(
                update(conversations)
                .where(conversations.c.id == conversation_id, conversations.c.owner == owner)
                .values(title=title, updated_at=time.time())
            )
            if not result.rowcount:
                raise LookupError(conversation_id)

        await self._db.write(transaction)

    async def delete_conversation(self, owner: str, conversation_id: str) -> None:
        def transaction(conn: Connection) -> None:
            conn.execute(
                delete(messages).where(
                    messages.c.conversation_id == conversation_id, messages.c.owner == owner
                )
            )
            result = conn.execute(
                delete(conversations).where(
                    conversations.c.id == conversation_id, conversations.c.owner == owner
                )
            )
            if not result.rowcount:
                raise LookupError(conversation_id)

        await self._db.write(transaction)


def _newest_first(owner: str, after: str | None) -> Select[Any]:
    """The owner's conversations, newest first, after the one ``after`` names."""
    statement = select(conversations).where(conversations.c.owner == owner)
    if after is not None:
        pivot = (
            select(conversations.c.updated_at)
            .where(conversations.c.id == after, conversations.c.owner == owner)
            .scalar_subquery()
        )
        statement = statement.where(
            or_(
                conversations.c.updated_at < pivot,
                and_(conversations.c.updated_at == pivot, conversations.c.id < after),
            )
        )
    return statement.order_by(conversations.c.updated_at.desc(), conversations.c.id.desc())


def _head(conn: Connection, owner: str, conversation_id: str) -> str | None:
    row = conn.execute(_HEAD, {"b_id": conversation_id, "b_owner": owner}).first()
    if row is None:
        raise LookupError(conversation_id)
    head: str | None = row.head_id
    return head


def _title_if_blank(conn: Connection, owner: str, conversation_id: str, title: str) -> None:
    """A conversation created empty (``POST /v1/conversations``) without a title takes its
    first message's first line, provisionally, as one created by a message does."""
    row = conn.execute(
        select(conversations.c.title, conversations.c.meta).where(
            conversations.c.id == conversation_id, conversations.c.owner == owner
        )
    ).first()
    if row is None or row.title is not None:
        return
    conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.owner == owner)
        .values(title=title, meta={**(row.meta or {}), "title_provisional": True})
    )


def _owned(conn: Connection, owner: str, conversation_id: str) -> bool:
    # the prebuilt head query: an ``exists()`` built per call cost a millisecond
    return conn.execute(_HEAD, {"b_id": conversation_id, "b_owner": owner}).first() is not None


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


def _create_conversation(conn: Connection, turn: NewTurn, now: float) -> None:
    # a title taken from the first line is provisional: a generated one replaces it, a
    # user's never is
    meta = {**({"title_provisional": True} if turn.title is not None else {}), **turn.meta}
    try:
        conn.execute(
            _INSERT_CONVERSATION,
            {
                "id": turn.conversation_id,
                "owner": turn.owner,
                "title": turn.title,
                "head_id": turn.messages[-1].id if turn.messages else None,
                "meta": meta or None,
                "created_at": now,
                "updated_at": now,
            },
        )
    except IntegrityError:
        raise LookupError(turn.conversation_id) from None


def _update_stored(conn: Connection, turn: NewTurn, now: float) -> None:
    """The stored messages the turn changes, and the paused reply it settles."""
    for message_id, parts in turn.update_parts.items():
        conn.execute(
            _SET_PARTS,
            {
                "b_id": message_id,
                "b_owner": turn.owner,
                "parts": parts_to_json(parts),
                "updated_at": now,
            },
        )
    if turn.settle is not None:
        conn.execute(
            update(messages)
            .where(
                messages.c.id == turn.settle,
                messages.c.owner == turn.owner,
                messages.c.status == "awaiting_approval",
            )
            .values(status="complete", updated_at=now)
        )


def _insert_messages(conn: Connection, turn: NewTurn, parent: str | None, now: float) -> str | None:
    """The turn's new messages, each under the one before; returns the last one's id."""
    rows: list[dict[str, Any]] = []
    for offset, message in enumerate(turn.messages):
        rows.append(
            {
                "id": message.id,
                "conversation_id": turn.conversation_id,
                "owner": turn.owner,
                "parent_id": parent,
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
        parent = message.id
    if rows:
        conn.execute(_INSERT_MESSAGES, rows)
    return parent
