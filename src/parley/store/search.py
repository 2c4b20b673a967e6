"""Searching an owner's own messages (the ``conversation_search`` tool) and conversations
(``GET /v1/conversations?q=``: by title or message text).

``SearchOps`` is mixed into ``ConversationStore``: one read transaction, scoped by owner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    RowMapping,
    Select,
    Text,
    and_,
    cast,
    or_,
    select,
    true,
)

from parley.messages import Role, TextPart, parts_from_json
from parley.store.database import Database
from parley.store.schema import conversations, messages


class SearchOps:
    _db: Database

    async def search_messages(self, owner: str, query: str, *, limit: int) -> list[MessageMatch]:
        """The owner's own messages whose text contains ``query``, newest first.

        Case-insensitive substring match over the text parts of user and assistant
        messages that are complete, incomplete or interrupted (never system messages,
        failed or still streaming ones). ``%`` and ``_`` in the query are literal.

        The SQL narrows the rows (see ``_text_filters``: the parts JSON may escape
        non-ASCII characters, so it cannot simply be matched against the query) and
        each candidate is checked in Python, a page of rows at a time, on one snapshot.
        """
        needle = query.lower()
        if not needle.strip() or limit < 1:
            return []
        statement = (
            select(
                messages.c.id,
                messages.c.conversation_id,
                conversations.c.title,
                messages.c.role,
                messages.c.parts,
                messages.c.created_at,
            )
            .join(conversations, conversations.c.id == messages.c.conversation_id)
            .where(conversations.c.owner == owner, *_searched_messages(owner, query))
            .order_by(messages.c.created_at.desc(), messages.c.id.desc())
        )
        page = max(4 * limit, 50)

        def run(conn: Connection) -> list[MessageMatch]:
            found: list[MessageMatch] = []
            offset = 0
            while len(found) < limit:
                rows = conn.execute(statement.limit(page).offset(offset)).all()
                for row in rows:
                    text = _matched_text(row.parts, needle)
                    if text is not None:
                        found.append(
                            MessageMatch(
                                message_id=row.id,
                                conversation_id=row.conversation_id,
                                conversation_title=row.title,
                                role=row.role,
                                text=text,
                                created_at=row.created_at,
                            )
                        )
                        if len(found) == limit:
                            break
                if len(rows) < page:
                    break
                offset += page
            return found

        return await self._db.read(run, heavy=True)

    async def matching_conversations(
        self, newest_first: Select[Any], owner: str, query: str, *, limit: int
    ) -> list[RowMapping]:
        """The first ``limit`` rows of ``newest_first`` (the owner's conversations, in
        their order) whose title contains ``query``, or one of whose messages does as
        ``search_messages`` finds it; case-insensitive, ``%`` and ``_`` literal.

        The SQL narrows the conversations as ``search_messages`` narrows messages; each
        candidate is checked in Python, a page at a time, on one snapshot."""
        needle = query.lower()
        if not needle.strip() or limit < 1:
            return []
        in_title = and_(true(), *_text_filters(conversations.c.title, query))
        in_messages = (
            select(messages.c.id)
            .where(messages.c.conversation_id == conversations.c.id)
            .where(*_searched_messages(owner, query))
            .exists()
        )
        candidates = newest_first.where(or_(in_title, in_messages))

        def run(conn: Connection) -> list[RowMapping]:
            found: list[RowMapping] = []
            for rows in _pages(conn, candidates, max(4 * limit, 50)):
                found += _conversations_matching(conn, rows, owner, query, needle)
                if len(found) >= limit:
                    break
            return found[:limit]

        return await self._db.read(run, heavy=True)


def _pages(conn: Connection, statement: Select[Any], size: int) -> Iterator[list[RowMapping]]:
    offset = 0
    while True:
        rows = [row._mapping for row in conn.execute(statement.limit(size).offset(offset))]
        if rows:
            yield rows
        if len(rows) < size:
            return
        offset += size


def _conversations_matching(
    conn: Connection, rows: list[RowMapping], owner: str, query: str, needle: str
) -> list[RowMapping]:
    """Those of ``rows`` (conversations, in order) whose title or a message holds ``needle``."""
    titled = {row["id"] for row in rows if needle in (row["title"] or "").lower()}
    others = [row["id"] for row in rows if row["id"] not in titled]
    if not others:
        return rows
    texts = conn.execute(
        select(messages.c.conversation_id, messages.c.parts).where(
            messages.c.conversation_id.in_(others), *_searched_messages(owner, query)
        )
    )
    said = {row.conversation_id for row in texts if _matched_text(row.parts, needle) is not None}
    return [row for row in rows if row["id"] in titled or row["id"] in said]


def _searched_messages(owner: str, query: str) -> list[ColumnElement[bool]]:
    """The messages a search reads (user and assistant messages, settled), narrowed to
    those whose JSON could hold ``query``."""
    return [
        messages.c.owner == owner,
        messages.c.role != "system",
        messages.c.status.in_(("complete", "incomplete", "interrupted")),
        *_text_filters(cast(messages.c.parts, Text), query),
    ]


def _matched_text(parts: list[dict[str, Any]], needle: str) -> str | None:
    """All the text of a message whose text parts hold ``needle`` (lower case), else None."""
    texts = [p.text for p in parts_from_json(parts) if isinstance(p, TextPart)]
    return "".join(texts) if any(needle in text.lower() for text in texts) else None


@dataclass(frozen=True, slots=True)
class MessageMatch:
    """A message found by ``ConversationStore.search_messages``; ``text`` is all of it."""

    message_id: str
    conversation_id: str
    conversation_title: str | None
    role: Role
    text: str
    created_at: float


_JSON_VERBATIM = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]+")
"""Runs of characters every JSON encoder writes as they are (printable ASCII but ``"`` and
``\\``)."""
_MAX_CHAR_FILTERS = 16


def _text_filters(column: ColumnElement[str], query: str) -> list[ColumnElement[bool]]:
    """Conditions met by the JSON text of every message whose text contains ``query``.

    They narrow the search; they do not decide it. An encoder may write a non-ASCII
    character as itself (orjson) or as a ``\\uXXXX`` escape (``json.dumps``, SQLAlchemy's
    default), and SQLite's ``lower`` folds ASCII only. So: each run of printable ASCII in
    the query must appear (case-insensitively); each non-ASCII character must appear in
    one of its forms (itself, lower or upper case, each raw or escaped).
    """
    conditions: list[ColumnElement[bool]] = []
    for run in _JSON_VERBATIM.findall(query):
        if run.strip():
            conditions.append(column.ilike(f"%{_escape_like(run)}%", escape="\\"))
    wide = [c for c in dict.fromkeys(query) if ord(c) > 0x7E][:_MAX_CHAR_FILTERS]
    for char in wide:
        forms = {
            form
            for variant in {char, char.lower(), char.upper()}
            for form in (variant, json.dumps(variant)[1:-1])
        }
        conditions.append(
            or_(*(column.ilike(f"%{_escape_like(f)}%", escape="\\") for f in sorted(forms)))
        )
    return conditions


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
