"""Assistants: named presets (prompt, model, sampling, tools, transformers) per owner.

The ``Assistant`` row type lives here, beside its repository, as ``StoredConversation``
lives beside ``ConversationStore``: the store sits at the bottom of the import order, so
the type it returns is defined at its level. Validation of what a client sends (the
pydantic wire models), tool policies and the typed views of the JSON settings are in
``conversations/assistants.py``, which re-exports these names.

Rules kept here: names are unique per owner (a clash raises ``errors.Conflict``, which
the API answers with 409); every read and write is scoped by owner, and another owner's
assistant is missing (``LookupError``), exactly like one that does not exist. An
assistant is referred to by id (``asst_...``) or by name: names may not start with
``asst_``, so the two never meet.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sqlalchemy import Connection, and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from parley.errors import Conflict
from parley.ids import new_id
from parley.store.database import Database
from parley.store.schema import assistants

ID_PREFIX = "asst_"
ToolPolicy = Literal["auto", "ask", "deny"]
ReasoningEffort = Literal["low", "medium", "high", "max"]
MemoryScope = Literal["assistant", "global"]
RegexRole = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class AssistantMemory:
    enabled: bool = False
    retrieval: bool = False
    """Retrieve relevant memories per request (else: memories go into the system prompt)."""
    scope: MemoryScope = "assistant"


@dataclass(frozen=True, slots=True)
class RegexRule:
    """``re.sub(pattern, replacement, text)`` over the text of the given roles' messages;
    ``display_only`` rules change what is shown, never what is stored or sent."""

    pattern: str
    replacement: str = ""
    roles: tuple[RegexRole, ...] = ("user", "assistant")
    display_only: bool = False


@dataclass(frozen=True, slots=True)
class Assistant:
    id: str
    owner: str
    name: str
    description: str = ""
    system_prompt: str = ""
    model: str | None = None
    """A public model name; None: the server's default model."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """Only the options that are set: temperature, top_p, max_tokens, seed, stop, ...
    (``conversations.assistants.Sampling`` lists them)."""
    reasoning_effort: ReasoningEffort | None = None
    tools: tuple[str, ...] = ()
    """Server tools enabled, by name."""
    tool_policies: dict[str, ToolPolicy] = field(default_factory=dict)
    """Tool name or fnmatch glob -> policy (see ``conversations.assistants``)."""
    knowledge_bases: tuple[str, ...] = ()
    mcp_servers: tuple[str, ...] = ()
    """MCP servers whose tools the assistant gets, by name."""
    memory: AssistantMemory = AssistantMemory()
    regex_rules: tuple[RegexRule, ...] = ()
    transformers: dict[str, Any] = field(default_factory=dict)
    """Validated settings of the input transformers, every key present
    (``conversations.assistants.TransformerSettings``)."""
    generate_titles: bool = True
    generate_suggestions: bool = True
    created_at: float = 0.0
    updated_at: float = 0.0


EDITABLE = frozenset(
    {
        "name",
        "description",
        "system_prompt",
        "model",
        "sampling",
        "reasoning_effort",
        "tools",
        "tool_policies",
        "knowledge_bases",
        "mcp_servers",
        "memory",
        "regex_rules",
        "transformers",
        "generate_titles",
        "generate_suggestions",
    }
)
"""The fields ``create`` and ``update`` accept, with the types of ``Assistant``'s."""


class AssistantStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def create(self, owner: str, fields: Mapping[str, Any]) -> Assistant:
        """A new assistant from ``fields`` (``name`` required; the rest default).

        Raises ``Conflict`` when the owner already has an assistant of that name.
        """
        _columns(fields)  # unknown fields fail here
        now = time.time()
        assistant = Assistant(
            id=new_id("asst"), owner=owner, created_at=now, updated_at=now, **fields
        )
        row = {
            "id": assistant.id,
            "owner": owner,
            "created_at": now,
            "updated_at": now,
            **_columns({name: getattr(assistant, name) for name in EDITABLE}),
        }

        def transaction(conn: Connection) -> None:
            try:
                conn.execute(assistants.insert().values(row))
            except IntegrityError:
                raise _name_taken(assistant.name) from None

        await self._db.write(transaction)
        return assistant

    async def get(self, owner: str, id_or_name: str) -> Assistant:
        """The owner's assistant with this id or name; ``LookupError`` when there is none."""
        statement = select(assistants).where(assistants.c.owner == owner, _ref(id_or_name))

        def query(conn: Connection) -> Assistant:
            row = conn.execute(statement).first()
            if row is None:
                raise LookupError(id_or_name)
            return _assistant(row._mapping)

        return await self._db.read(query)

    async def get_by_name(self, owner: str, name: str) -> Assistant:
        """The owner's assistant named ``name``; ``LookupError`` when there is none."""
        statement = select(assistants).where(assistants.c.owner == owner, assistants.c.name == name)

        def query(conn: Connection) -> Assistant:
            row = conn.execute(statement).first()
            if row is None:
                raise LookupError(name)
            return _assistant(row._mapping)

        return await self._db.read(query)

    async def list(self, owner: str, *, limit: int, after: str | None = None) -> list[Assistant]:
        """Newest first; ``after`` is the id of the last assistant of the previous page."""
        table = assistants.c
        statement = select(assistants).where(table.owner == owner)
        if after is not None:
            pivot = (
                select(table.created_at)
                .where(table.id == after, table.owner == owner)
                .scalar_subquery()
            )
            statement = statement.where(
                or_(table.created_at < pivot, and_(table.created_at == pivot, table.id < after))
            )
        statement = statement.order_by(table.created_at.desc(), table.id.desc()).limit(limit)
        return await self._db.read(
            lambda conn: [_assistant(row._mapping) for row in conn.execute(statement).all()]
        )

    async def update(self, owner: str, id_or_name: str, fields: Mapping[str, Any]) -> Assistant:
        """Change the given fields only (each replaced whole) and move ``updated_at``;
        with no fields, nothing changes.

        Raises ``LookupError`` when the assistant is missing, ``Conflict`` when the new
        name is another of the owner's assistants'.
        """
        values = _columns(fields)
        values["updated_at"] = time.time()

        def transaction(conn: Connection) -> Assistant:
            found = conn.execute(
                select(assistants.c.id).where(assistants.c.owner == owner, _ref(id_or_name))
            ).first()
            if found is None:
                raise LookupError(id_or_name)
            if fields:
                try:
                    conn.execute(
                        update(assistants).where(assistants.c.id == found.id).values(values)
                    )
                except IntegrityError:
                    raise _name_taken(str(fields.get("name"))) from None
            row = conn.execute(select(assistants).where(assistants.c.id == found.id)).one()
            return _assistant(row._mapping)

        return await self._db.write(transaction)

    async def delete(self, owner: str, id_or_name: str) -> str:
        """Delete the assistant and return its id; ``LookupError`` when it is missing."""

        def transaction(conn: Connection) -> str:
            found = conn.execute(
                select(assistants.c.id).where(assistants.c.owner == owner, _ref(id_or_name))
            ).first()
            if found is None:
                raise LookupError(id_or_name)
            conn.execute(delete(assistants).where(assistants.c.id == found.id))
            return str(found.id)

        return await self._db.write(transaction)


def is_assistant_id(reference: str) -> bool:
    return reference.startswith(ID_PREFIX)


def _ref(id_or_name: str) -> Any:
    if is_assistant_id(id_or_name):
        return assistants.c.id == id_or_name
    return assistants.c.name == id_or_name


def _name_taken(name: str) -> Conflict:
    return Conflict(
        f"an assistant named {name!r} already exists", param="name", code="assistant_name_taken"
    )


def _columns(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Column values (JSON-ready) for editable fields given with ``Assistant``'s types."""
    unknown = set(fields) - EDITABLE
    if unknown:
        raise ValueError(f"not editable assistant fields: {sorted(unknown)}")
    values = dict(fields)
    for name in ("tools", "knowledge_bases", "mcp_servers"):
        if name in values:
            values[name] = list(values[name])
    if "memory" in values:
        values["memory"] = asdict(values["memory"])
    if "regex_rules" in values:
        values["regex_rules"] = [
            {**asdict(rule), "roles": list(rule.roles)} for rule in values["regex_rules"]
        ]
    for name in ("sampling", "tool_policies", "transformers"):
        if name in values:
            values[name] = dict(values[name])
    return values


def _assistant(row: Any) -> Assistant:
    memory = row["memory"] or {}
    return Assistant(
        id=row["id"],
        owner=row["owner"],
        name=row["name"],
        description=row["description"],
        system_prompt=row["system_prompt"],
        model=row["model"],
        sampling=dict(row["sampling"] or {}),
        reasoning_effort=row["reasoning_effort"],
        tools=tuple(row["tools"] or ()),
        tool_policies=dict(row["tool_policies"] or {}),
        knowledge_bases=tuple(row["knowledge_bases"] or ()),
        mcp_servers=tuple(row["mcp_servers"] or ()),
        memory=AssistantMemory(
            enabled=bool(memory.get("enabled", False)),
            retrieval=bool(memory.get("retrieval", False)),
            scope=memory.get("scope", "assistant"),
        ),
        regex_rules=tuple(
            RegexRule(
                pattern=rule["pattern"],
                replacement=rule.get("replacement", ""),
                roles=tuple(rule.get("roles", ("user", "assistant"))),
                display_only=bool(rule.get("display_only", False)),
            )
            for rule in row["regex_rules"] or ()
        ),
        transformers=dict(row["transformers"] or {}),
        generate_titles=bool(row["generate_titles"]),
        generate_suggestions=bool(row["generate_suggestions"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
