"""The file routes of Langchain-Chatchat's ``/knowledge_base/*`` API: ``list_files``,
``upload_docs``, ``delete_docs``, ``update_docs`` and ``download_doc``, with their
request bodies and the helpers only they use (file names, Chatchat's ``override`` rule,
waiting for indexing, multipart form fields).

Their shapes, and where they deviate from Chatchat, are described in
``api/chatchat/kb.py``, which includes this module's ``router`` into the one the app
mounts. What does not belong here: the knowledge-base routes and ``search_docs``
(``api/chatchat/kb.py``), ``recreate_vector_store`` (``api/chatchat/recreate.py``),
what the modules share (``api/chatchat/common.py``), storage and indexing
(``knowledge/``, ``store/knowledge.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import suppress
from pathlib import PurePosixPath
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.datastructures import FormData, UploadFile
from starlette.responses import FileResponse, JSONResponse, Response

from parley.api.chatchat.common import (
    CHUNK_SIZE,
    LIST_PAGE,
    OVERLAP_SIZE,
    PENDING,
    POLL_SECONDS,
    all_documents,
    bad_name,
    caller,
    chatchat_time,
    disabled,
    find_base,
    missing_base,
    open_base,
    reply,
    valid_name,
)
from parley.api.chatchat.shapes import FileListReply, FilesReply, Reply
from parley.api.openapi import FILES, answers, model_schema, multipart_body
from parley.api.uploads import LengthRequired, too_many_bytes, upload_refusal, uploads_bound
from parley.errors import Conflict, InvalidRequest, ParleyError, RateLimited
from parley.knowledge.service import KnowledgeService
from parley.store.knowledge import Document, KnowledgeBase

router = APIRouter()
"""Without prefix or tags: ``api/chatchat/kb.py``'s router, which includes it, adds both."""

INDEX_WAIT_SECONDS = 60.0
"""How long ``upload_docs`` and ``update_docs`` wait for their files to be indexed."""
READ_PIECE = 1024 * 1024
INLINE_TYPES = frozenset({"application/pdf", "image/png", "image/jpeg", "image/gif", "image/webp"})
"""Previewed inline as they are; ``text/*`` other than HTML and XML is inline as
``text/plain``; everything else is an attachment even with ``preview``."""
_NOT_TEXT = ("text/html", "text/xml", "text/xsl", "text/javascript", "text/ecmascript")
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


# --- request bodies ----------------------------------------------------------------------

_FLAG = {"type": "boolean"}
_UPLOAD_BODY = multipart_body(
    ["knowledge_base_name", "files"],
    knowledge_base_name={"type": "string", "minLength": 1},
    files=FILES,
    override=_FLAG,
    to_vector_store=_FLAG,
    chunk_size={"type": "integer"},
    chunk_overlap={"type": "integer"},
    zh_title_enhance=_FLAG,
    docs={"type": "string", "description": "Custom docs (not supported)."},
    not_refresh_vs_cache=_FLAG,
)
_LENGTH_REQUIRED = {
    "411": {
        "description": "An upload without Content-Length (as a Chatchat reply).",
        "content": {"application/json": {"schema": model_schema(Reply)}},
    }
}


class DeleteDocsBody(BaseModel):
    knowledge_base_name: str = Field(max_length=1_000)
    file_names: list[str] = Field(max_length=10_000)
    delete_content: bool = False
    not_refresh_vs_cache: bool = False


class UpdateDocsBody(BaseModel):
    knowledge_base_name: str = Field(max_length=1_000)
    file_names: list[str] = Field(max_length=10_000)
    chunk_size: int = CHUNK_SIZE
    chunk_overlap: int = OVERLAP_SIZE
    zh_title_enhance: bool = False
    override_custom_docs: bool = False
    docs: str | dict[str, Any] = ""
    not_refresh_vs_cache: bool = False


# --- helpers -----------------------------------------------------------------------------


def file_json(base: KnowledgeBase, document: Document, number: int) -> dict[str, Any]:
    """A file as one row of Chatchat's ``get_kb_file_details``, plus Parley's status."""
    return {
        "kb_name": base.name,
        "file_name": document.filename,
        "file_ext": PurePosixPath(document.filename).suffix,
        "file_version": 1,
        "document_loader": "",
        "docs_count": document.chunks_done if document.status == "ready" else 0,
        "text_splitter": "",
        "create_time": chatchat_time(document.created_at),
        "file_mtime": document.updated_at,
        "file_size": document.size,
        "custom_docs": False,
        "in_folder": True,
        "in_db": document.status == "ready",
        "No": number,
        "status": document.status,
        "error": document.error,
        "document_id": document.id,
    }


async def _named(
    service: KnowledgeService, owner: str, kb_id: str, filename: str
) -> list[Document]:
    """The base's documents of this file name, oldest first."""
    found: list[Document] = []
    after: str | None = None
    while True:
        page = await service.store.documents(
            owner, kb_id, limit=LIST_PAGE, after=after, filename=filename
        )
        found.extend(page)
        if len(page) < LIST_PAGE:
            return found
        after = page[-1].id


def _newest_by_name(documents: Iterable[Document]) -> list[Document]:
    """One document per file name (oldest first): the newest of that name, in the place
    the name first appears."""
    newest: dict[str, Document] = {}
    for document in documents:
        newest[document.filename] = document  # a dict keeps a key's first place
    return list(newest.values())


def _stored_name(filename: str | None) -> str:
    """The name the service keeps for an upload: its last path component without
    control characters (as ``KnowledgeService.upload`` cleans it)."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    return name[:255] or "document"


def _chunking_note(base: KnowledgeBase, size: int, overlap: int) -> str:
    if (size, overlap) == (base.chunk_size, base.chunk_overlap):
        return ""
    return (
        f"; chunk_size {size} and chunk_overlap {overlap} ignored: knowledge base "
        f"{base.name} is chunked at {base.chunk_size} with {base.chunk_overlap} of overlap"
    )


def _custom_docs(value: str | dict[str, Any]) -> dict[str, Any]:
    """The ``docs`` field: a JSON object string (or object) of file name -> documents."""
    if isinstance(value, dict):
        return value
    if not value.strip():
        return {}
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise InvalidRequest("docs must be a JSON object", param="docs") from None
    if not isinstance(parsed, dict):
        raise InvalidRequest("docs must be a JSON object", param="docs")
    return parsed


async def _unindex(service: KnowledgeService, owner: str, kb_id: str, document_id: str) -> None:
    """Keep the document and its file but out of search (status ``cancelled``)."""
    try:
        await service.store.cancel(owner, kb_id, document_id)
    except Conflict:  # ready or failed: queue it again, then cancel that
        with suppress(Conflict):  # queued by another call meanwhile: cancelled all the same
            await service.reindex(owner, kb_id, document_id)
        with suppress(Conflict):
            await service.store.cancel(owner, kb_id, document_id)


async def _wait(
    service: KnowledgeService, owner: str, kb_id: str, document_ids: Iterable[str]
) -> tuple[list[Document], list[str]]:
    """Wait up to ``INDEX_WAIT_SECONDS`` for the documents to leave queued / indexing:
    (those that did, in their final state; the ids still pending). A document deleted
    meanwhile is in neither."""
    pending = list(dict.fromkeys(document_ids))
    done: list[Document] = []
    deadline = time.monotonic() + INDEX_WAIT_SECONDS
    while pending:
        still: list[str] = []
        for document_id in pending:
            try:
                document = await service.store.document(owner, kb_id, document_id)
            except LookupError:
                continue
            if document.status in PENDING:
                still.append(document_id)
            else:
                done.append(document)
        pending = still
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    return done, pending


def _index_failures(done: Iterable[Document]) -> dict[str, str]:
    return {
        d.filename: d.error or f"{d.filename} could not be indexed"
        for d in done
        if d.status != "ready"
    }


def _pending_note(count: int) -> str:
    if not count:
        return ""
    files = "file is" if count == 1 else "files are"
    return f"; {count} {files} still being indexed (see list_files)"


def _flag(form: FormData, key: str, default: bool) -> bool:
    value = form.get(key)
    if value is None or isinstance(value, UploadFile):
        return default
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidRequest(f"{key} must be true or false", param=key)


def _number(form: FormData, key: str, default: int) -> int:
    value = form.get(key)
    if value is None or isinstance(value, UploadFile) or not value.strip():
        return default
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidRequest(f"{key} must be an integer", param=key) from None


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value if isinstance(value, str) else ""


# --- files -------------------------------------------------------------------------------


@router.get("/list_files", **answers(FileListReply))
async def list_files(
    request: Request, knowledge_base_name: str = Query(max_length=1_000)
) -> dict[str, Any]:
    service, owner = await caller(request)
    if service is None:
        return {**disabled(), "data": []}
    if not valid_name(knowledge_base_name):
        return {**bad_name(), "data": []}
    base = await find_base(service, owner, knowledge_base_name)
    if base is None:
        return {**missing_base(knowledge_base_name), "data": []}
    files = _newest_by_name(await all_documents(service, owner, base.id))
    return reply(data=[file_json(base, d, n) for n, d in enumerate(files, 1)])


@router.post(
    "/upload_docs",
    openapi_extra={"requestBody": _UPLOAD_BODY, "responses": _LENGTH_REQUIRED},
    **answers(FilesReply, errors=(413,)),
)
async def upload_docs(request: Request) -> dict[str, Any] | JSONResponse:
    """``multipart/form-data``, the fields of Chatchat's ``upload_docs``."""
    service, owner = await caller(request)
    if service is None:
        return disabled()
    settings = service.settings
    refusal = upload_refusal(
        request, uploads_bound(settings), too_many_bytes(settings), param="files"
    )
    if isinstance(refusal, LengthRequired):  # answered as Chatchat's reply
        return JSONResponse(reply(411, refusal.message), status_code=411)
    if refusal is not None:
        raise refusal
    async with request.form(max_files=settings.max_files_per_upload, max_fields=50) as form:
        name = _text(form, "knowledge_base_name")
        if not name:
            raise InvalidRequest("knowledge_base_name is required", param="knowledge_base_name")
        override = _flag(form, "override", False)
        to_vector_store = _flag(form, "to_vector_store", True)
        chunk_size = _number(form, "chunk_size", CHUNK_SIZE)
        chunk_overlap = _number(form, "chunk_overlap", OVERLAP_SIZE)
        _flag(form, "zh_title_enhance", False)
        _flag(form, "not_refresh_vs_cache", False)
        custom = _custom_docs(_text(form, "docs"))
        files = [item for item in form.getlist("files") if isinstance(item, UploadFile)]
        if not files:
            raise InvalidRequest(
                "send one or more files as multipart/form-data fields named 'files'",
                param="files",
            )
        if not valid_name(name):
            return bad_name()
        base = await find_base(service, owner, name)
        if base is None:
            return missing_base(name)
        failed: dict[str, str] = {}
        stored: list[Document] = []
        for index, upload in enumerate(files):
            filename = _stored_name(upload.filename)
            try:
                document = await _store_upload(service, owner, base, upload, filename, override)
            except _Refused as refused:
                failed[filename] = refused.reason
                continue
            except ParleyError as exc:
                failed[filename] = exc.message
                if exc.status >= 500 or isinstance(exc, RateLimited):
                    # the queue (or the owner's share of it) is full: the rest would
                    # fail the same way
                    for rest in files[index + 1 :]:
                        failed[_stored_name(rest.filename)] = exc.message
                    break
                continue
            stored.append(document)
            if not to_vector_store:
                with suppress(LookupError):
                    await _unindex(service, owner, base.id, document.id)
    uploaded = {d.filename for d in stored}
    for custom_name in custom:
        if custom_name not in uploaded and custom_name not in failed:
            failed[custom_name] = "custom docs are not supported by this server"
    notes = _chunking_note(base, chunk_size, chunk_overlap)
    ignored = sorted(uploaded & set(custom))
    if ignored:
        notes += f"; custom docs ignored (indexed from the files): {', '.join(ignored)}"
    if not to_vector_store:
        return reply(msg="files uploaded" + notes, data={"failed_files": failed})
    done, pending = await _wait(service, owner, base.id, [d.id for d in stored])
    failed.update(_index_failures(done))
    return reply(
        msg="files uploaded and indexed" + notes + _pending_note(len(pending)),
        data={"failed_files": failed},
    )


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _store_upload(
    service: KnowledgeService,
    owner: str,
    base: KnowledgeBase,
    upload: UploadFile,
    filename: str,
    override: bool,
) -> Document:
    """Store one file; ``_Refused`` when Chatchat's rule keeps the existing file. Older
    files of the name are deleted once the new one is stored (only older ones: of two
    uploads of a name at once, the newer is kept)."""
    existing = await _named(service, owner, base.id, filename)
    if existing and not override and upload.size is not None and existing[-1].size == upload.size:
        raise _Refused(f"file {filename} already exists")

    async def pieces() -> AsyncIterator[bytes]:
        while piece := await upload.read(READ_PIECE):
            yield piece

    document = await service.upload(owner, base, filename, upload.content_type, pieces())
    for old in await _named(service, owner, base.id, document.filename):
        if old.id == document.id:
            break
        with suppress(LookupError):
            await service.delete_document(owner, base.id, old.id)
    return document


@router.post("/delete_docs", **answers(FilesReply))
async def delete_docs(request: Request, body: DeleteDocsBody) -> dict[str, Any]:
    opened = await open_base(request, body.knowledge_base_name)
    if isinstance(opened, dict):
        return opened
    service, owner, base = opened.service, opened.owner, opened.base
    failed: dict[str, str] = {}
    for filename in dict.fromkeys(body.file_names):
        documents = await _named(service, owner, base.id, filename)
        if not documents:
            failed[filename] = f"file {filename} not found"
            continue
        try:
            for document in documents:
                with suppress(LookupError):
                    if body.delete_content:
                        await service.delete_document(owner, base.id, document.id)
                    else:
                        await _unindex(service, owner, base.id, document.id)
        except ParleyError as exc:
            failed[filename] = f"could not delete {filename}: {exc.message}"
    return reply(msg="files deleted", data={"failed_files": failed})


@router.post("/update_docs", **answers(FilesReply))
async def update_docs(request: Request, body: UpdateDocsBody) -> dict[str, Any]:
    """Index the named files again (from their stored content)."""
    opened = await open_base(request, body.knowledge_base_name)
    if isinstance(opened, dict):
        return opened
    service, owner, base = opened.service, opened.owner, opened.base
    custom = _custom_docs(body.docs)
    failed: dict[str, str] = {}
    queued: list[str] = []
    for filename in dict.fromkeys(body.file_names):
        documents = await _named(service, owner, base.id, filename)
        if not documents:
            failed[filename] = f"file {filename} not found"
            continue
        for document in documents:
            try:
                await service.reindex(owner, base.id, document.id)
            except LookupError:
                continue
            except Conflict:  # already queued or indexing: wait for it all the same
                pass
            except ParleyError as exc:
                failed[filename] = f"could not index {filename} again: {exc.message}"
                continue
            queued.append(document.id)
    for custom_name in custom:
        failed.setdefault(custom_name, "custom docs are not supported by this server")
    done, pending = await _wait(service, owner, base.id, queued)
    failed.update(_index_failures(done))
    notes = _chunking_note(base, body.chunk_size, body.chunk_overlap)
    return reply(
        msg="files indexed again" + notes + _pending_note(len(pending)),
        data={"failed_files": failed},
    )


@router.get(
    "/download_doc",
    **answers(
        Reply,
        description="The file, or a Chatchat reply saying why not.",
        content={"*/*": {"schema": {"type": "string", "format": "binary"}}},
    ),
)
async def download_doc(
    request: Request,
    knowledge_base_name: str = Query(max_length=1_000),
    file_name: str = Query(max_length=1_000),
    preview: bool = Query(default=False),
) -> Response | dict[str, Any]:
    """The newest file of the name: an attachment, or inline with ``preview`` when its
    type is safe to show (PDF, images other than SVG, text as ``text/plain``)."""
    service, owner = await caller(request)
    if service is None:
        return disabled()
    if not valid_name(knowledge_base_name):
        return bad_name()
    base = await find_base(service, owner, knowledge_base_name)
    if base is None:
        return missing_base(knowledge_base_name)
    documents = await _named(service, owner, base.id, file_name)
    path = service.file(documents[-1]) if documents else None
    if path is None or not path.is_file():
        return reply(404, f"file {file_name} not found")
    document = documents[-1]
    media_type = (document.content_type or "").split(";", 1)[0].strip().lower()
    disposition = "attachment"
    served = "application/octet-stream"
    if preview and media_type in INLINE_TYPES:
        disposition, served = "inline", media_type
    elif preview and media_type.startswith("text/") and media_type not in _NOT_TEXT:
        disposition, served = "inline", "text/plain; charset=utf-8"
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "private, no-cache"}
    if served != "application/pdf":  # a sandboxed PDF does not open in Chromium's viewer
        headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return FileResponse(
        path,
        media_type=served,
        filename=document.filename,
        content_disposition_type=disposition,
        headers=headers,
    )
