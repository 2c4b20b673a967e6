"""Branches: the versions at each position of a conversation, and moving between them.

A conversation is a tree of messages (``parent_id``); its current branch is the path from
the root to ``conversations.head_id``. The versions at a position are the messages that
share a parent (at the first position: the roots), oldest first, and the selected one is
the one on the current branch. Nothing here deletes anything a user did not ask to
delete: regenerating or editing adds a version, and the old one stays selectable.

``BranchOps`` is mixed into ``ConversationStore`` (same database, same rules: one
transaction per method, every query scoped by owner, another owner's ids behave as
missing). What does not belong here: deciding what a regenerate or an edit sends to the
model (``conversations/service.py``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, select, update

from parley.ids import new_id
from parley.store.database import Database
from parley.store.schema import conversations, messages

Row = Mapping[str, Any]

FORK_KEEPS = ("assistant_id",)
"""Conversation meta a fork keeps (the assistant it runs with)."""


@dataclass(frozen=True, slots=True)
class Versions:
    """The alternatives at one message's position."""

    ids: tuple[str, ...]
    """Every version's id, oldest first."""
    index: int
    """Where this message is among them."""


class Tree:
    """One conversation's messages, loaded once, with the relations a branch needs."""

    def __init__(self, rows: Sequence[Row], head: str | None) -> None:
        self.rows = {row["id"]: row for row in rows}
        self.head = head
        self.children: dict[str | None, list[Row]] = defaultdict(list)
        for row in sorted(rows, key=lambda r: (r["created_at"], r["id"])):
            self.children[row["parent_id"]].append(row)

    def path_to(self, message_id: str | None) -> list[Row]:
        """Root .. ``message_id`` (empty for None)."""
        path: list[Row] = []
        cursor = message_id
        while cursor is not None and cursor in self.rows:
            row = self.rows[cursor]
            path.append(row)
            cursor = row["parent_id"]
        path.reverse()
        return path

    def versions(self, row: Row) -> Versions:
        ids = tuple(r["id"] for r in self.children[row["parent_id"]])
        return Versions(ids, ids.index(row["id"]))

    def subtree(self, message_id: str) -> list[str]:
        found: list[str] = []
        todo = [message_id]
        while todo:
            current = todo.pop()
            found.append(current)
            todo.extend(r["id"] for r in self.children.get(current, ()))
        return found

    def latest_leaf(self, message_id: str) -> str:
        """The leaf of ``message_id``'s subtree touched last: where a user who selects
        this version most likely left off."""
        leaves = [i for i in self.subtree(message_id) if not self.children.get(i)]
        return max(leaves, key=lambda i: (self.rows[i]["updated_at"], self.rows[i]["created_at"]))

    def on_branch(self, message_id: str) -> bool:
        return any(row["id"] == message_id for row in self.path_to(self.head))

    def after(self, message_id: str) -> list[str]:
        """The messages that follow ``message_id`` on the branch a reader sees through it:
        the current branch when it passes through it, else its latest leaf's."""
        end = self.head if self.on_branch(message_id) else self.latest_leaf(message_id)
        ids = [row["id"] for row in self.path_to(end)]
        return ids[ids.index(message_id) + 1 :]


def load_tree(conn: Connection, owner: str, conversation_id: str) -> Tree:
    """Raises LookupError when the conversation is missing or someone else's."""
    head = conn.execute(
        select(conversations.c.head_id).where(
            conversations.c.id == conversation_id, conversations.c.owner == owner
        )
    ).first()
    if head is None:
        raise LookupError(conversation_id)
    rows = conn.execute(
        select(messages).where(
            messages.c.conversation_id == conversation_id, messages.c.owner == owner
        )
    ).all()
    return Tree([dict(row._mapping) for row in rows], head.head_id)


def copy_rows(
    conn: Connection,
    rows: Sequence[Row],
    *,
    conversation_id: str,
    parent_id: str | None,
    now: float,
) -> str | None:
    """Insert copies of ``rows`` (a chain, oldest first) under ``parent_id`` with new
    ids; returns the last copy's id (``parent_id`` when there is nothing to copy). A copy
    of a message still being written, or of a reply waiting for approval, is kept as
    interrupted: only the original can be decided (a call runs once)."""
    parent = parent_id
    copies: list[dict[str, Any]] = []
    for offset, row in enumerate(rows, start=1):
        copy = dict(row)
        copy.update(
            id=new_id("msg"),
            conversation_id=conversation_id,
            parent_id=parent,
            status="interrupted"
            if row["status"] in ("streaming", "awaiting_approval")
            else row["status"],
            created_at=now + offset * 1e-6,
            updated_at=now,
        )
        copies.append(copy)
        parent = copy["id"]
    if copies:
        conn.execute(messages.insert(), copies)
    return parent


class BranchOps:
    """Branch reading and moving, for ``ConversationStore``."""

    _db: Database

    async def tree(self, owner: str, conversation_id: str) -> Tree:
        return await self._db.read(lambda conn: load_tree(conn, owner, conversation_id))

    async def select_version(self, owner: str, conversation_id: str, message_id: str) -> str:
        """Make ``message_id`` the selected version at its position: the branch moves to
        the latest leaf below it. Returns the new head. LookupError: no such message."""

        def transaction(conn: Connection) -> str:
            tree = load_tree(conn, owner, conversation_id)
            if message_id not in tree.rows:
                raise LookupError(message_id)
            head = tree.latest_leaf(message_id)
            _move_head(conn, conversation_id, head)
            return head

        return await self._db.write(transaction)

    async def delete_version(self, owner: str, conversation_id: str, message_id: str) -> list[str]:
        """Delete one version and everything below it; returns the deleted ids. When the
        current branch went through it, the branch moves to the newest other version at
        that position (or, with none left, ends at the message's parent)."""

        def transaction(conn: Connection) -> list[str]:
            tree = load_tree(conn, owner, conversation_id)
            row = tree.rows.get(message_id)
            if row is None:
                raise LookupError(message_id)
            doomed = tree.subtree(message_id)
            if tree.head in doomed:
                others = [r["id"] for r in tree.children[row["parent_id"]] if r["id"] != message_id]
                head = tree.latest_leaf(others[-1]) if others else row["parent_id"]
                _move_head(conn, conversation_id, head)
            conn.execute(
                delete(messages).where(messages.c.id.in_(doomed), messages.c.owner == owner)
            )
            return doomed

        return await self._db.write(transaction)

    async def fork(
        self, owner: str, conversation_id: str, message_id: str | None, title: str | None
    ) -> str:
        """A new conversation holding copies of the current branch up to ``message_id``
        (default: all of it). Returns its id. LookupError: no such message."""

        def transaction(conn: Connection) -> str:
            tree = load_tree(conn, owner, conversation_id)
            end = tree.head if message_id is None else message_id
            if end is not None and end not in tree.rows:
                raise LookupError(message_id)
            source = conn.execute(
                select(conversations.c.title, conversations.c.meta).where(
                    conversations.c.id == conversation_id
                )
            ).one()
            kept = {k: v for k, v in (source.meta or {}).items() if k in FORK_KEEPS}
            now = time.time()
            fork_id = new_id("conv")
            conn.execute(
                conversations.insert().values(
                    id=fork_id,
                    owner=owner,
                    title=title or source.title,
                    head_id=None,
                    meta={
                        **kept,
                        "forked_from": {"conversation_id": conversation_id, "message_id": end},
                    },
                    created_at=now,
                    updated_at=now,
                )
            )
            head = copy_rows(
                conn, tree.path_to(end), conversation_id=fork_id, parent_id=None, now=now
            )
            _move_head(conn, fork_id, head)
            return fork_id

        return await self._db.write(transaction)


def _move_head(conn: Connection, conversation_id: str, head: str | None) -> None:
    conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(head_id=head, updated_at=time.time())
    )
