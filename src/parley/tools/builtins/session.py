"""Built-in tools about the session itself: the time, the caller's own past messages,
what this request can do, and bringing hidden tools back.

- ``current_time``: JSON ``{"iso", "timezone", "utc_offset", "weekday", "unix"}``;
  ``iso`` is ISO 8601 in the server's local zone with its offset, to the second
  (``2025-03-01T14:05:09+01:00``); ``timezone`` is the zone's name as the OS gives it
  (``CET``, ``UTC``); ``unix`` is whole seconds since the epoch.
- ``conversation_search``: the caller's own messages (never another owner's), newest
  first, each with its conversation, message id, role, time and a snippet around the
  match.
- ``get_session_capabilities``: what the running turn says it has (tools, retrieval).
- ``activate_tools``: pinned; brings tools the active-tool LRU hid back (``lru.py``) and
  answers JSON ``{"activated": [...], "unknown": [...]}`` (unknown: not among this
  request's server tools, or beyond ``tools.max_active`` in one call).

What does not belong here: the search itself (``store/repository.py``), the LRU.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from parley.tools.function import function_tool
from parley.tools.protocol import ToolContext, ToolError

if TYPE_CHECKING:
    from parley.store.search import MessageMatch

SNIPPET_CHARS = 160
"""About how much text a search result shows around its match."""


@function_tool
async def current_time() -> dict[str, Any]:
    """The current date and time in ISO 8601 with the server's time zone.

    Returns JSON: iso (local time with its UTC offset, to the second), timezone (the
    zone's name), utc_offset, weekday and unix (seconds since the epoch).
    """
    now = datetime.now().astimezone().replace(microsecond=0)
    offset = now.utcoffset() or timedelta(0)
    return {
        "iso": now.isoformat(),
        "timezone": now.tzname() or "",
        "utc_offset": _format_offset(offset),
        "weekday": now.strftime("%A"),
        "unix": int(now.timestamp()),
    }


@function_tool
async def conversation_search(
    query: str,
    context: ToolContext,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> dict[str, Any]:
    """Search the user's own past messages (all conversations) for a word or phrase.

    Case-insensitive substring match; results come newest first.

    Args:
        query: The text to look for, matched literally.
        limit: How many messages to return at most (1-50).
    """
    if context.messages is None:
        raise ToolError("conversation_search is not available: this server keeps no history")
    if not query.strip():
        raise ToolError("query must not be empty")
    matches = await context.messages.search_messages(context.owner, query, limit=limit)
    return {
        "query": query,
        "results": [_result(match, query) for match in matches],
    }


@function_tool
async def get_session_capabilities(context: ToolContext) -> dict[str, Any]:
    """What this conversation can really use right now: tools, retrieval and limits."""
    if context.session is None:
        raise ToolError("no session information is available for this call")
    return context.session.capabilities()


@function_tool(pinned=True)
async def activate_tools(names: list[str], context: ToolContext) -> dict[str, Any]:
    """Bring back tools that were hidden because they were not used for a while.

    Args:
        names: The names of the tools to make available again.
    """
    if context.session is None:
        raise ToolError("tools cannot be activated outside a running turn")
    requested = list(dict.fromkeys(names))
    active = set(context.session.activate(requested))
    # the session answers with the names now active (all of them, or just these)
    return {
        "activated": [name for name in requested if name in active],
        "unknown": [name for name in requested if name not in active],
    }


def _result(match: MessageMatch, query: str) -> dict[str, Any]:
    return {
        "conversation_id": match.conversation_id,
        "conversation_title": match.conversation_title,
        "message_id": match.message_id,
        "role": match.role,
        "created_at": datetime.fromtimestamp(match.created_at)
        .astimezone()
        .replace(microsecond=0)
        .isoformat(),
        "snippet": snippet(match.text, query),
    }


def snippet(text: str, query: str, width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around the first match of ``query``."""
    lowered = text.lower()
    at = lowered.find(query.lower()) if len(lowered) == len(text) else -1
    if at < 0:
        at = 0  # lower() changed the length (rare letters): show the start
    size = len(query)
    before = max(0, (width - size) // 2)
    start = max(0, at - before)
    end = min(len(text), max(start + width, at + size))
    start = max(0, min(start, end - width))
    piece = " ".join(text[start:end].split())
    return f"{'...' if start > 0 else ''}{piece}{'...' if end < len(text) else ''}"


def _format_offset(offset: timedelta) -> str:
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}"
