"""A streamed reply, resumed: ``POST /v1/chat/completions`` (or Chatchat's route) with a
``Last-Event-ID`` header answers the rest of the reply that event belongs to, from any
instance, instead of starting a new turn (the body is not read).

- **The reply's events are still kept** (``parley.streams``: while it runs and
  ``RETAIN_SECONDS`` after): the events after the one named, then each as the reply
  produces it, to its end. Events the reply produced while the client was away are
  there too.
- **The instance running it died**: once the reply is no longer held by any instance
  and is no longer ``streaming`` in the database (``conversations/recovery.py`` marks
  it interrupted), the stream ends with an ``interrupted`` error event and ``[DONE]``:
  the client can regenerate.
- **Its events are gone** (older than ``RETAIN_SECONDS``): the stored reply, whole, in
  one chunk marked ``parley.resumed: "storage"`` (the client replaces what it has),
  then its finish and ``[DONE]``.

Only the owner of the reply may resume it (others get 404, as for any id not theirs).

What does not belong here: keeping the events (``parley.streams``), the live stream
(``replies.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse

from parley.api.sse import DONE
from parley.api.state import AppState
from parley.errors import InvalidRequest, NotFound
from parley.messages import TextPart
from parley.store.repository import StoredMessage
from parley.streams import parse_event_id, with_id

_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def resumed(state: AppState, owner: str, last_event_id: str) -> Response:
    """The rest of the reply ``last_event_id`` belongs to, as an event stream."""
    parsed = parse_event_id(last_event_id)
    if parsed is None:
        raise InvalidRequest(
            "Last-Event-ID is not the id of an event this server sent "
            "(they look like msg_<id>.<n>)",
            param="Last-Event-ID",
            code="invalid_last_event_id",
        )
    message_id, after = parsed
    try:
        message = await state.conversations.message(owner, message_id)
    except LookupError:
        raise NotFound(f"no reply {message_id}", param="Last-Event-ID") from None
    if await state.events.exists(message_id):
        body = _following(state, owner, message, after)
    else:
        body = _from_storage(message)
    return StreamingResponse(body, media_type="text/event-stream", headers=_HEADERS)


async def _following(
    state: AppState, owner: str, message: StoredMessage, after: int
) -> AsyncIterator[bytes]:
    last = after
    async for entry in state.events.read(message.id, after):
        if entry is None:
            if await _abandoned(state, owner, message):
                yield with_id(message.id, last + 1, _interrupted(message))
                yield with_id(message.id, last + 2, DONE)
                return
            continue
        if entry.end:
            return
        last = entry.n
        yield with_id(message.id, entry.n, entry.event)


async def _abandoned(state: AppState, owner: str, message: StoredMessage) -> bool:
    """No instance runs the reply any more, and it was found cut off."""
    key = (owner, message.conversation_id)
    if state.service.running_message(*key) == message.id:
        return False
    if await state.cluster.holder(key) is not None:
        return False
    stored = await state.conversations.message(owner, message.id)
    return stored.status != "streaming"


def _interrupted(message: StoredMessage) -> bytes:
    payload = {
        "error": {
            "message": "the instance running this reply stopped before it finished; what "
            "it said is kept in the conversation: regenerate it to go on",
            "type": "server_error",
            "param": None,
            "code": "interrupted",
        },
        "parley": {"conversation_id": message.conversation_id, "message_id": message.id},
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def _from_storage(message: StoredMessage) -> AsyncIterator[bytes]:
    """The stored reply as one chunk, its finish, and ``[DONE]``."""
    text = "".join(part.text for part in message.parts if isinstance(part, TextPart))
    head: dict[str, Any] = {
        "id": f"chatcmpl-{message.id}",
        "object": "chat.completion.chunk",
        "created": int(message.created_at),
        "model": message.model or "",
    }
    parley = {
        "conversation_id": message.conversation_id,
        "message_id": message.id,
        "resumed": "storage",
        "status": message.status,
    }
    delta = {"role": "assistant", "content": text}
    chunks: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
    ]
    if message.status == "complete":
        finish = {"index": 0, "delta": {}, "finish_reason": message.finish_reason or "stop"}
        chunks.append({**head, "choices": [finish]})
    n = 0
    for chunk in chunks:
        n += 1
        yield with_id(
            message.id, n, b"data: " + orjson.dumps({**chunk, "parley": parley}) + b"\n\n"
        )
    if message.status not in ("complete", "streaming"):  # streaming: come back later
        n += 1
        yield with_id(message.id, n, _interrupted(message))
    yield with_id(message.id, n + 1, DONE)
