"""``/knowledge_base/recreate_vector_store``: Langchain-Chatchat's route that indexes
every file of a base again, answered as Server-Sent Events, one per file as it finishes
(``{code: 200, msg: "(i / n): name", total, finished, doc}`` or ``{code: 500, msg}``).

It is apart from the other file routes because it alone streams: its request body, the
route and the progress stream belong here. Its shape and deviations are described in
``api/chatchat/kb.py``, which includes this module's ``router`` into the one the app
mounts. What does not belong here: the other routes (``api/chatchat/kb.py``,
``api/chatchat/docs.py``), what the modules share (``api/chatchat/common.py``),
indexing itself (``KnowledgeService.reindex_base``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import StreamingResponse

from parley.api.chatchat.common import (
    CHUNK_SIZE,
    OVERLAP_SIZE,
    PENDING,
    POLL_SECONDS,
    all_documents,
    bad_name,
    caller,
    disabled,
    find_base,
    missing_base,
    name_problem,
    reply,
    valid_name,
)
from parley.api.chatchat.shapes import RecreateEvent, Reply
from parley.api.openapi import answers, event_stream
from parley.errors import ParleyError
from parley.knowledge.service import KnowledgeService
from parley.store.knowledge import Document, KnowledgeBase

STALL_SECONDS = 600.0
"""``recreate_vector_store`` stops streaming after this long without a file finishing."""
KEEPALIVE_SECONDS = 15.0


class RecreateBody(BaseModel):
    knowledge_base_name: str = Field(max_length=1_000)
    allow_empty_kb: bool = True
    vs_type: str = "faiss"
    embed_model: str = ""
    chunk_size: int = CHUNK_SIZE
    chunk_overlap: int = OVERLAP_SIZE
    zh_title_enhance: bool = False
    not_refresh_vs_cache: bool = False


router = APIRouter()
"""Without prefix or tags: ``api/chatchat/kb.py``'s router, which includes it, adds both."""


@router.post(
    "/recreate_vector_store",
    **answers(
        Reply,
        description="One event per file as it finishes, or a Chatchat reply saying why not.",
        content=event_stream(RecreateEvent, description="One event per finished file."),
    ),
)
async def recreate_vector_store(
    request: Request, body: RecreateBody
) -> StreamingResponse | dict[str, Any]:
    """Index every file of the base again; Server-Sent Events, one per finished file.
    A missing base is created (with ``allow_empty_kb``, Chatchat's default) and has
    nothing to index."""
    service, owner = await caller(request)
    if service is None:
        return disabled()
    name = body.knowledge_base_name
    if not valid_name(name):
        return bad_name()
    base = await find_base(service, owner, name)
    if base is None:
        if not body.allow_empty_kb:
            return missing_base(name)
        problem = name_problem(name.strip())
        if problem is not None:
            return reply(404, problem)
        try:
            base = await service.create(
                owner, name.strip(), chunk_size=CHUNK_SIZE, chunk_overlap=OVERLAP_SIZE
            )
        except ParleyError as exc:
            return reply(500, f"could not create knowledge base {name}: {exc.message}")
    # listed first: each is queued again (or still pending), and a small one may be
    # indexed before the call returns
    documents = await all_documents(service, owner, base.id)
    try:
        await service.reindex_base(owner, base)
    except ParleyError as exc:
        return reply(500, f"could not index knowledge base {name} again: {exc.message}")
    return StreamingResponse(
        _progress(service, owner, base, documents, request.is_disconnected),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def _progress(
    service: KnowledgeService,
    owner: str,
    base: KnowledgeBase,
    documents: list[Document],
    disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[bytes]:
    """One event per document as it leaves queued / indexing, in the order they end."""
    total = len(documents)
    pending = {d.id: d.filename for d in documents}
    finished = 0
    last_change = last_sent = time.monotonic()
    while pending:
        if await disconnected():
            return
        for document_id, filename in list(pending.items()):
            try:
                document = await service.store.document(owner, base.id, document_id)
            except LookupError:
                document = None
            if document is not None and document.status in PENDING:
                continue
            del pending[document_id]
            finished += 1
            last_change = last_sent = time.monotonic()
            if document is not None and document.status == "ready":
                yield _event(
                    {
                        "code": 200,
                        "msg": f"({finished} / {total}): {filename}",
                        "total": total,
                        "finished": finished,
                        "doc": filename,
                    }
                )
            else:
                reason = "it was deleted or cancelled"
                if document is not None:
                    reason = document.error or "it could not be read"
                yield _event(
                    {
                        "code": 500,
                        "msg": f"adding file {filename} to knowledge base {base.name} "
                        f"failed: {reason}; skipped",
                    }
                )
        if not pending:
            return
        now = time.monotonic()
        if now - last_change > STALL_SECONDS:
            yield _event(
                {
                    "code": 500,
                    "msg": f"stopped waiting: {len(pending)} files are still being indexed",
                }
            )
            return
        if now - last_sent > KEEPALIVE_SECONDS:
            last_sent = now
            yield b": ping\n\n"
        await asyncio.sleep(POLL_SECONDS * 2.5)
