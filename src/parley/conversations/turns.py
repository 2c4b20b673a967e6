"""A chat request as the conversation service takes it: the turn, the client's tool
results, and where a regenerate or an edit answers.

What does not belong here: reading the wire format (``api/wire.py``), running the turn
(``service.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parley.conversations.approvals import Decision
from parley.identity import Caller
from parley.messages import Message, ToolSpec
from parley.providers.protocol import TokensField


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A client's result for a tool call (a ``tool`` message)."""

    call_id: str
    content: str
    param: str
    """Where it came from in the request, for error messages."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """A regenerate or an edit: the turn answers at a stored message, not at the end.

    - regenerate an assistant message: a new version of it, from the history before it;
      the messages after it are kept (copied after the new version);
    - regenerate from a user message: a new reply under it; what followed stays on the
      old version;
    - edit (``edit``): the turn's one user message is a new version of this user
      message, and the reply is generated under it.
    """

    message_id: str
    edit: bool = False


@dataclass(frozen=True, slots=True)
class ChatTurn:
    owner: str
    model: str | None
    messages: tuple[Message, ...]
    """The request's messages, neutral (client tool results folded into their calls)."""
    trailing_answers: tuple[ToolAnswer, ...] = ()
    """The tool results that end the request (after its last non-tool message)."""
    orphan_answers: tuple[ToolAnswer, ...] = ()
    """Tool results that answer no call in the request's own messages."""
    conversation_id: str | None = None
    create_missing: bool = False
    tools: tuple[ToolSpec, ...] = ()
    """The client's tools: calls to them end the turn with ``tool_calls``."""
    server_tools: tuple[str, ...] = ()
    """Server tools named by the request (beside the configured defaults); the agent
    loop runs them."""
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = None
    tokens_field: TokensField | None = None
    """Which field the client set ``max_tokens`` by (sent upstream under that name)."""
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    store: bool = True
    """False: run the turn without recording it (the request said ``store: false``)."""
    stream: bool = True
    """False: the client waits for the whole reply."""
    caller: Caller | None = None
    """Who asked (None: ``owner`` with no key); the interceptors see it."""
    source: str = "api"
    """Which door the request came through (``chat.completions``, ``chatchat``, ...)."""
    client_retries: bool = False
    """The client retries a failed request by itself and Parley leaves that to it
    (``agent.client_retries: defer``): a model that fails before anything reached the
    client is not tried again (the alias's fallbacks are)."""
    anchor: Anchor | None = None
    """Where a regenerate or an edit answers (None: after the current branch)."""
    approvals: tuple[Decision, ...] = ()
    """Decisions on calls waiting for approval: the paused reply carries on (the
    request's messages are not used)."""
    assistant: str | None = None
    """An assistant preset by id or name (None: the conversation's, if it has one)."""
    knowledge_bases: tuple[str, ...] = ()
    """Knowledge bases to search for this turn, by id or name (empty: the assistant's)."""
    use_mcp: bool | None = None
    """Offer every enabled MCP server's tools (None: the source's default)."""
    notes: tuple[str, ...] = ()
    """What the request asked for that the reply goes without (Chatchat tool names Parley
    has no tool for); the reply's ``parley.notes`` carry them."""
