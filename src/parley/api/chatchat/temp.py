"""Chatchat's temporary knowledge bases (its file chat): ``/knowledge_base/upload_temp_docs``
and ``/knowledge_base/search_temp_docs``.

Shapes are those of Langchain-Chatchat 0.3.x (``server/chat/file_chat.py``
``upload_temp_docs``, ``server/knowledge_base/kb_doc_api.py`` ``search_temp_docs``),
called as its ``ApiRequest.upload_temp_docs`` calls them; the web UI keeps the answered
id and chats with ``/knowledge_base/temp_kb/{id}/chat/completions``
(``api/chatchat/rag.py``, which finds the base with ``knowledge.temporary.find_temp_base``).

- ``POST upload_temp_docs`` multipart ``files`` (one or more) + ``prev_id`` (Chatchat's
  server) or ``knowledge_id`` (what ``ApiRequest`` sends; either names the base to add
  to), ``chunk_size=750``, ``chunk_overlap=150``, ``zh_title_enhance``: ``{id,
  failed_files: [{name: reason}]}``. It answers once the files are indexed (waiting up
  to ``chatchat_docs.INDEX_WAIT_SECONDS``; a file still indexing then is named in
  ``msg``), so a file that could not be read is in ``failed_files``.
- ``POST search_temp_docs`` JSON ``{knowledge_id, query, top_k=3, score_threshold=2.0}``:
  a bare list ``[{id, page_content, metadata, type, score}]`` as ``search_docs``
  answers (scores: see ``api/chatchat/kb.py``).

A temporary base is a real knowledge base of the caller's (``knowledge/temporary.py``):
Parley's indexing and hybrid search, left out of both listings, deleted with its files
``knowledge.temporary_ttl_seconds`` after its last upload. Another key's id, an expired
id and an unknown one are all ``{"code": 404}`` (HTTP 200, as Chatchat's failures).

Deviations: an upload with a previous id adds its files to that base (Chatchat starts
the base over); a file of a name already there replaces it. The base keeps the chunking
it was made with (``msg`` says when other values were ignored). ``zh_title_enhance`` is
ignored. The upload limits are Parley's (``knowledge.max_upload_bytes`` per file,
``max_files_per_upload``): a request over them is refused with a Chatchat reply and HTTP
411 or 413, a file over them is in ``failed_files``.

What does not belong here: the bases' lifetime and sweep (``knowledge/temporary.py``),
Chatchat's permanent bases (``api/chatchat/kb.py``, ``api/chatchat/docs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from parley.api.chatchat.common import CHUNK_SIZE, OVERLAP_SIZE, caller, disabled, reply
from parley.api.chatchat.docs import (
    _chunking_note,
    _flag,
    _index_failures,
    _number,
    _pending_note,
    _store_upload,
    _stored_name,
    _text,
    _wait,
)
from parley.api.chatchat.kb import (
    MAX_SCORE,
    SCORE_THRESHOLD,
    VECTOR_SEARCH_TOP_K,
    search_documents,
)
from parley.api.chatchat.shapes import ChatchatDocument, Reply
from parley.api.openapi import FILES, answers, model_schema, multipart_body
from parley.api.shapes import Shape
from parley.api.uploads import too_many_bytes, upload_refusal, uploads_bound
from parley.errors import InvalidRequest, ParleyError, RateLimited
from parley.knowledge.service import KnowledgeService
from parley.knowledge.temporary import find_temp_base, temporary_bases
from parley.store.knowledge import Document, KnowledgeBase

router = APIRouter(prefix="/knowledge_base", tags=["langchain-chatchat"])


# --- shapes ------------------------------------------------------------------------------


class TempUpload(Shape):
    id: str | None = Field(description="The temporary knowledge base (null: none made).")
    failed_files: list[dict[str, str]] = Field(description="One {file name: why} per file.")


class TempUploadReply(Shape):
    code: int
    msg: str
    data: TempUpload | None


class TempSearchBody(BaseModel):
    knowledge_id: str = Field(max_length=200)
    query: str = Field(default="", max_length=20_000)
    top_k: int = Field(default=VECTOR_SEARCH_TOP_K, ge=0, le=1_000)
    score_threshold: float = Field(default=SCORE_THRESHOLD, ge=0.0, le=MAX_SCORE)


_FLAG = {"type": "boolean"}
_UPLOAD_BODY = multipart_body(
    ["files"],
    files=FILES,
    prev_id={"type": "string"},
    knowledge_id={"type": "string"},
    chunk_size={"type": "integer"},
    chunk_overlap={"type": "integer"},
    zh_title_enhance=_FLAG,
)
_REFUSAL = {
    "content": {"application/json": {"schema": model_schema(TempUploadReply)}},
}
_REFUSALS = {
    "411": {"description": "An upload without Content-Length.", **_REFUSAL},
    "413": {"description": "More or larger files than the server takes.", **_REFUSAL},
}
_SEARCH_ANSWER = {
    "application/json": {
        "schema": {
            "anyOf": [
                {"type": "array", "items": model_schema(ChatchatDocument)},
                model_schema(Reply),
            ]
        }
    }
}


def _upload_reply(
    code: int, msg: str, base_id: str | None, failed: dict[str, str]
) -> dict[str, Any]:
    """``upload_temp_docs``'s answer; ``data`` is an object even on failure, as the web UI
    reads ``data.id`` whatever the code."""
    files = [{name: reason} for name, reason in failed.items()]
    return reply(code, msg, {"id": base_id, "failed_files": files})


def _refused(status: int, msg: str) -> JSONResponse:
    return JSONResponse(_upload_reply(status, msg, None, {}), status_code=status)


def _missing(knowledge_id: str) -> str:
    return f"temporary knowledge base {knowledge_id} not found (it may have expired)"


# --- upload ------------------------------------------------------------------------------


@router.post(
    "/upload_temp_docs",
    openapi_extra={"requestBody": _UPLOAD_BODY, "responses": _REFUSALS},
    **answers(TempUploadReply),
)
async def upload_temp_docs(request: Request) -> dict[str, Any] | JSONResponse:
    """``multipart/form-data``, the fields of Chatchat's ``upload_temp_docs``."""
    service, owner = await caller(request)
    if service is None:
        return _upload_reply(404, disabled()["msg"], None, {})
    form = await _read_form(request, service)
    if isinstance(form, JSONResponse):
        return form
    try:
        return await _upload(service, owner, form)
    finally:
        await form.close()


async def _read_form(request: Request, service: KnowledgeService) -> FormData | JSONResponse:
    """The multipart form within Parley's upload limits, or the Chatchat refusal: no
    Content-Length (411), larger than the most files of the largest size, or more files
    than ``max_files_per_upload`` (413)."""
    settings = service.settings
    refusal = upload_refusal(
        request, uploads_bound(settings), too_many_bytes(settings), param="files"
    )
    if refusal is not None:
        return _refused(refusal.status, refusal.message)
    try:
        return await request.form(max_files=settings.max_files_per_upload, max_fields=50)
    except HTTPException as exc:
        # Starlette's refusals of a form over max_files / max_fields ("Too many files.
        # ..."); any other malformed form stays Parley's 400
        if exc.status_code == 400 and "too many" in exc.detail.lower():
            return _refused(413, exc.detail)
        raise


async def _upload(service: KnowledgeService, owner: str, form: FormData) -> dict[str, Any]:
    previous = _text(form, "prev_id").strip() or _text(form, "knowledge_id").strip()
    chunk_size = _number(form, "chunk_size", CHUNK_SIZE)
    chunk_overlap = _number(form, "chunk_overlap", OVERLAP_SIZE)
    _flag(form, "zh_title_enhance", False)
    files = [item for item in form.getlist("files") if isinstance(item, UploadFile)]
    if not files:
        raise InvalidRequest(
            "send one or more files as multipart/form-data fields named 'files'", param="files"
        )
    temporary = temporary_bases(service)
    notes = ""
    if previous:
        base = await find_temp_base(service, owner, previous)
        if base is None:
            return _upload_reply(404, _missing(previous), None, {})
        notes = _chunking_note(base, chunk_size, chunk_overlap)
    else:
        await temporary.sweep()
        base = await temporary.create(owner, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    stored, failed = await _store_files(service, owner, base, files)
    done, pending = await _wait(service, owner, base.id, [d.id for d in stored])
    failed.update(_index_failures(done))
    try:
        await temporary.renew(owner, base.id)
    except LookupError:  # expired and swept, or deleted, while the files were indexed
        return _upload_reply(404, _missing(base.id), None, failed)
    return _upload_reply(200, "success" + notes + _pending_note(len(pending)), base.id, failed)


async def _store_files(
    service: KnowledgeService, owner: str, base: KnowledgeBase, files: Sequence[UploadFile]
) -> tuple[list[Document], dict[str, str]]:
    """Store and queue each file (one of a name already there replaces it): (the
    documents stored, file name -> why it was not). Once the queue refuses one file for
    being full, the rest are refused with it."""
    failed: dict[str, str] = {}
    stored: list[Document] = []
    for index, upload in enumerate(files):
        filename = _stored_name(upload.filename)
        try:
            stored.append(
                await _store_upload(service, owner, base, upload, filename, override=True)
            )
        except ParleyError as exc:
            failed[filename] = exc.message
            if exc.status >= 500 or isinstance(exc, RateLimited):
                for rest in files[index + 1 :]:
                    failed[_stored_name(rest.filename)] = exc.message
                break
    return stored, failed


# --- search ------------------------------------------------------------------------------


@router.post("/search_temp_docs", **answers(content=_SEARCH_ANSWER))
async def search_temp_docs(
    request: Request, body: TempSearchBody
) -> list[dict[str, Any]] | dict[str, Any]:
    """A bare list of the best passages, as ``search_docs``; a Chatchat reply when the
    temporary base is missing."""
    service, owner = await caller(request)
    if service is None:
        return disabled()
    base = await find_temp_base(service, owner, body.knowledge_id)
    if base is None:
        return reply(404, _missing(body.knowledge_id))
    return await search_documents(
        service, owner, base, body.query, top_k=body.top_k, score_threshold=body.score_threshold
    )
