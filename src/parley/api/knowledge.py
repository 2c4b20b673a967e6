"""``/v1/knowledge_bases``: knowledge bases, their documents and search, over HTTP.

A knowledge base is named in the path by its id (``kb_...``) or its name; a document by
its id. Another owner's base or document answers 404, exactly like one that does not
exist; a name the owner already uses answers 409. When ``knowledge.enabled`` is false
every route answers 404 with code ``knowledge_disabled``.

Uploads are ``multipart/form-data`` with one or more ``files`` fields. Each file is
streamed to the service in pieces and queued for indexing; the answer (202) lists the
queued documents and, in ``failed_files``, the files refused (too large, empty, the
queue full, or the owner's share of it full: ``knowledge.max_queued_per_owner``). Only
when every file was refused is the answer an error. ``override=true`` replaces the
base's documents of the same file name once the new one is queued (Langchain-Chatchat's
semantics). A document's ``status`` then moves queued -> indexing -> ready, failed or
cancelled; clients poll it.

A document's original bytes are served as ``application/octet-stream`` unless their type
is plain text, Markdown, CSV, JSON, PDF or a raster image (PNG, JPEG, GIF, WebP), and as
user-supplied content is (``api/downloads.py``): sandboxed, never sniffed, inline only
when a raster image, a PDF or plain text, else as an attachment.

What does not belong here: storage (``store/knowledge.py``), ingestion and search
(``knowledge/``), Langchain-Chatchat's own API shapes (``api/chatchat/kb.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic_core import PydanticCustomError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse

from parley.api.downloads import download_headers
from parley.api.openapi import FILES, answers, multipart_body
from parley.api.pages import page
from parley.api.shapes import (
    Deleted,
    DocumentList,
    KnowledgeBaseList,
    Reindexed,
    SearchResults,
    UploadResult,
)
from parley.api.shapes import Document as DocumentShape
from parley.api.shapes import KnowledgeBase as BaseShape
from parley.api.state import AppState
from parley.api.uploads import too_many_bytes, upload_refusal, uploads_bound
from parley.errors import (
    InvalidRequest,
    NotFound,
    Overloaded,
    ParleyError,
    RateLimited,
)
from parley.knowledge.service import KnowledgeService, SearchResult, UploadTooLarge
from parley.settings.knowledge import MIN_CHUNK_SIZE
from parley.store.kb_documents import OWNER_QUEUE_FULL, QUEUE_RETRY_SECONDS
from parley.store.knowledge import ID_PREFIX, Document, KnowledgeBase

router = APIRouter(prefix="/v1/knowledge_bases", tags=["knowledge"])

READ_PIECE = 1024 * 1024
"""Bytes read from an uploaded file per step."""

SAFE_TYPES = frozenset(
    {
        "text/plain",
        "text/markdown",
        "text/csv",
        "application/json",
        "application/pdf",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    }
)
"""Content types a download keeps; anything else is served as application/octet-stream."""


def _check_name(name: str) -> str:
    if name.startswith(ID_PREFIX):
        raise PydanticCustomError(
            "reserved_name", f"a name may not start with {ID_PREFIX!r} (ids do)"
        )
    if "/" in name or any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise PydanticCustomError("invalid_name", "a name may not hold '/' or control characters")
    return name


Name = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=100),
    AfterValidator(_check_name),
]
Description = Annotated[str, StringConstraints(max_length=2_000)]
QueryText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4_000)]
Reference = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BaseCreate(_Body):
    name: Name
    description: Description = ""
    chunk_size: int | None = Field(default=None, ge=MIN_CHUNK_SIZE, le=20_000)
    chunk_overlap: int | None = Field(default=None, ge=0, le=10_000)


class BaseUpdate(_Body):
    name: Name | None = None
    description: Description | None = None


class SearchRequest(_Body):
    query: QueryText
    top_k: int = Field(default=6, ge=1, le=50)


class MultiSearchRequest(SearchRequest):
    knowledge_bases: list[Reference] = Field(min_length=1, max_length=20)


# --- JSON shapes -------------------------------------------------------------------------


def base_json(base: KnowledgeBase, *, reindex_needed: bool) -> dict[str, Any]:
    return {
        "id": base.id,
        "object": "knowledge_base",
        "name": base.name,
        "description": base.description,
        "embedding_model": base.embedding_model or None,
        "dimensions": base.dimensions,
        "reindex_needed": reindex_needed,
        "chunk_size": base.chunk_size,
        "chunk_overlap": base.chunk_overlap,
        "documents": base.documents,
        "chunks": base.chunks,
        "created_at": base.created_at,
        "updated_at": base.updated_at,
    }


def document_json(document: Document) -> dict[str, Any]:
    return {
        "id": document.id,
        "object": "knowledge_base.document",
        "knowledge_base_id": document.kb_id,
        "filename": document.filename,
        "content_type": document.content_type,
        "size": document.size,
        "sha256": document.sha256,
        "status": document.status,
        "error": document.error,
        "chunks_total": document.chunks_total,
        "chunks_done": document.chunks_done,
        "progress": _progress(document),
        "pages": document.pages,
        "title": document.title,
        "created_at": document.created_at,
        "updated_at": document.updated_at,
    }


def _progress(document: Document) -> float | None:
    """0..1: ready is 1, queued 0, indexing the share of chunks written once the count
    is known; None otherwise (failed, cancelled, or not yet chunked)."""
    if document.status == "ready":
        return 1.0
    if document.status == "queued":
        return 0.0
    if document.status == "indexing" and document.chunks_total:
        return round(min(1.0, document.chunks_done / document.chunks_total), 4)
    return None


def result_json(result: SearchResult) -> dict[str, Any]:
    chunk = result.chunk
    return {
        "rank": result.rank,
        "score": result.score,
        "chunk_id": str(chunk.id),
        "knowledge_base_id": chunk.kb_id,
        "knowledge_base": result.kb_name,
        "document_id": chunk.document_id,
        "filename": chunk.filename,
        "title": chunk.title,
        "page": chunk.page,
        "section": chunk.section,
        "text": chunk.text,
    }


# --- helpers -----------------------------------------------------------------------------


def _service(request: Request) -> KnowledgeService:
    state: AppState = request.app.state.parley
    if state.knowledge is None:
        raise NotFound(
            "knowledge bases are disabled on this server (knowledge.enabled is false)",
            code="knowledge_disabled",
        )
    return state.knowledge


async def _context(request: Request) -> tuple[KnowledgeService, str]:
    """The service and the caller (authenticated first: strangers learn nothing)."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    return _service(request), owner


def _base_not_found(reference: str) -> NotFound:
    return NotFound(
        f"knowledge base {reference!r} not found",
        param="knowledge_base_id",
        code="knowledge_base_not_found",
    )


def _document_not_found(document_id: str) -> NotFound:
    return NotFound(
        f"document {document_id!r} not found", param="document_id", code="document_not_found"
    )


async def _base(service: KnowledgeService, owner: str, reference: str) -> KnowledgeBase:
    try:
        return await service.store.get(owner, reference)
    except LookupError:
        raise _base_not_found(reference) from None


async def _document(
    service: KnowledgeService, owner: str, reference: str, document_id: str
) -> tuple[KnowledgeBase, Document]:
    base = await _base(service, owner, reference)
    try:
        return base, await service.store.document(owner, base.id, document_id)
    except LookupError:
        raise _document_not_found(document_id) from None


def _json(body: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


# --- search (declared before the routes with a /{kb} parameter) --------------------------


@router.post("/search", **answers(SearchResults, errors=(404,)))
async def search_many(request: Request, body: MultiSearchRequest) -> dict[str, Any]:
    """Search several of the owner's knowledge bases at once (ids or names)."""
    service, owner = await _context(request)
    try:
        bases = await service.store.resolve(owner, body.knowledge_bases)
    except LookupError as exc:
        raise _base_not_found(str(exc.args[0]) if exc.args else "") from None
    results = await service.search(owner, bases, body.query, top_k=body.top_k)
    return {"object": "list", "data": [result_json(r) for r in results]}


# --- knowledge bases ---------------------------------------------------------------------


@router.post("", **answers(BaseShape, errors=(404, 409)))
async def create_base(request: Request, body: BaseCreate) -> dict[str, Any]:
    service, owner = await _context(request)
    base = await service.create(
        owner,
        body.name,
        description=body.description,
        chunk_size=body.chunk_size,
        chunk_overlap=body.chunk_overlap,
    )
    return base_json(base, reindex_needed=service.reindex_needed(base))


@router.get("", **answers(KnowledgeBaseList, errors=(404,)))
async def list_bases(
    request: Request,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = Query(default=None, max_length=64),
) -> dict[str, Any]:
    """Newest first."""
    service, owner = await _context(request)
    rows = await service.store.bases(owner, limit=limit + 1, after=after)
    return page(rows, limit, lambda b: base_json(b, reindex_needed=service.reindex_needed(b)))


@router.get("/{kb}", **answers(BaseShape))
async def get_base(request: Request, kb: str) -> dict[str, Any]:
    """By id or by name."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    return base_json(base, reindex_needed=service.reindex_needed(base))


@router.patch("/{kb}", **answers(BaseShape, errors=(409,)))
async def update_base(request: Request, kb: str, body: BaseUpdate) -> dict[str, Any]:
    service, owner = await _context(request)
    try:
        base = await service.store.update(owner, kb, name=body.name, description=body.description)
    except LookupError:
        raise _base_not_found(kb) from None
    return base_json(base, reindex_needed=service.reindex_needed(base))


@router.delete("/{kb}", **answers(Deleted))
async def delete_base(request: Request, kb: str) -> dict[str, Any]:
    """The base, its documents, chunks, vectors and files."""
    service, owner = await _context(request)
    try:
        deleted = await service.delete(owner, kb)
    except LookupError:
        raise _base_not_found(kb) from None
    return {"id": deleted, "object": "knowledge_base.deleted", "deleted": True}


@router.post("/{kb}/reindex", **answers(Reindexed, errors=(429, 503)))
async def reindex_base(request: Request, kb: str) -> dict[str, Any]:
    """Index every document again with the server's current embedding model."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    return {"queued": await service.reindex_base(owner, base)}


@router.post("/{kb}/search", **answers(SearchResults))
async def search_base(request: Request, kb: str, body: SearchRequest) -> dict[str, Any]:
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    results = await service.search(owner, [base], body.query, top_k=body.top_k)
    return {"object": "list", "data": [result_json(r) for r in results]}


# --- documents ---------------------------------------------------------------------------


_FILE = {
    media: {"schema": {} if media == "application/json" else {"type": "string", "format": "binary"}}
    for media in (*sorted(SAFE_TYPES), "application/octet-stream")
}
_UPLOAD_BODY = multipart_body(
    ["files"], files=FILES, override={"type": "boolean", "default": False}
)


@router.post(
    "/{kb}/documents",
    openapi_extra={"requestBody": _UPLOAD_BODY},
    **answers(UploadResult, status=202, errors=(411, 413, 429, 503)),
)
async def upload_documents(request: Request, kb: str) -> JSONResponse:
    """``multipart/form-data``: ``files`` (one or more), ``override`` (optional)."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    settings = service.settings
    refusal = upload_refusal(
        request, uploads_bound(settings), too_many_bytes(settings), param="files"
    )
    if refusal is not None:
        raise refusal
    try:
        form = await request.form(
            max_files=settings.max_files_per_upload, max_fields=20, max_part_size=1024
        )
    except HTTPException as exc:  # too many files, or a malformed body
        too_many = "Too many files" in str(exc.detail)
        code = "too_many_files" if too_many else "invalid_multipart"
        raise InvalidRequest(str(exc.detail), param="files", code=code) from None
    try:
        files = [item for item in form.getlist("files") if isinstance(item, UploadFile)]
        override = str(form.get("override") or "").strip().lower() in ("1", "true", "yes", "on")
        if not files:
            raise InvalidRequest(
                "send one or more files as multipart/form-data fields named 'files'",
                param="files",
                code="missing_files",
            )
        queued, failed = await _queue_files(service, owner, base, files, override=override)
    finally:
        await form.close()
    if not queued:
        raise _all_failed(failed)
    return _json(
        {"object": "list", "data": [document_json(d) for d in queued], "failed_files": failed},
        202,
    )


async def _queue_files(
    service: KnowledgeService,
    owner: str,
    base: KnowledgeBase,
    files: list[UploadFile],
    *,
    override: bool,
) -> tuple[list[Document], list[dict[str, Any]]]:
    """The documents queued and the files refused, in the order sent."""
    queued: list[Document] = []
    failed: list[dict[str, Any]] = []
    for index, upload in enumerate(files):
        try:
            document = await _upload_one(service, owner, base, upload)
        except ParleyError as exc:
            # the queue is full (503, or 429 for the owner): the files not yet sent
            # would fail the same way
            full = exc.status >= 500 or isinstance(exc, RateLimited)
            failed.extend(_failure(f, exc) for f in (files[index:] if full else [upload]))
            if full:
                break
            continue
        queued.append(document)
        if override:
            await _delete_same_name(service, owner, base, document)
    return queued, failed


async def _upload_one(
    service: KnowledgeService, owner: str, base: KnowledgeBase, upload: UploadFile
) -> Document:
    filename = upload.filename or "document"
    limit = service.settings.max_upload_bytes
    if upload.size is not None and upload.size > limit:
        raise UploadTooLarge(f"{filename} is larger than {limit} bytes", param="files")
    first = await upload.read(READ_PIECE)
    if not first:
        raise InvalidRequest(f"{filename} is empty", param="files", code="empty_file")

    async def pieces() -> AsyncIterator[bytes]:
        piece = first
        while piece:
            yield piece
            piece = await upload.read(READ_PIECE)

    return await service.upload(owner, base, filename, upload.content_type, pieces())


def _failure(upload: UploadFile, error: ParleyError) -> dict[str, Any]:
    return {"filename": upload.filename or "", "error": error.message, "code": error.code}


async def _delete_same_name(
    service: KnowledgeService, owner: str, base: KnowledgeBase, document: Document
) -> None:
    """Delete the base's other documents named like ``document`` (``override``)."""
    while True:
        same = await service.store.documents(owner, base.id, limit=100, filename=document.filename)
        for old in same:
            if old.id != document.id:
                with suppress(LookupError):  # deleted meanwhile
                    await service.delete_document(owner, base.id, old.id)
        if len(same) < 100:
            return


def _all_failed(failed: list[dict[str, Any]]) -> ParleyError:
    """The error when no file was queued: 413 when every file was too large, the
    queue's own error when it was full (503, or 429 when the owner's share was), else
    400."""
    codes = {f["code"] for f in failed}
    summary = "; ".join(f"{f['filename']}: {f['error']}" for f in failed[:5])
    if len(failed) > 5:
        summary += f"; and {len(failed) - 5} more"
    message = f"no file was accepted: {summary}"
    if codes == {UploadTooLarge.code}:
        return UploadTooLarge(message, param="files")
    if codes == {"ingestion_queue_full"}:
        return Overloaded(message, code="ingestion_queue_full", retry_after=QUEUE_RETRY_SECONDS)
    if codes == {OWNER_QUEUE_FULL}:
        return RateLimited(message, code=OWNER_QUEUE_FULL, retry_after=QUEUE_RETRY_SECONDS)
    code = codes.pop() if len(codes) == 1 else "no_file_accepted"
    return InvalidRequest(message, param="files", code=code)


@router.get("/{kb}/documents", **answers(DocumentList))
async def list_documents(
    request: Request,
    kb: str,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = Query(default=None, max_length=64),
) -> dict[str, Any]:
    """Oldest first (the upload order), with ``counts``: documents per status."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    rows = await service.store.documents(owner, base.id, limit=limit + 1, after=after)
    body = page(rows, limit, document_json)
    body["counts"] = await service.store.status_counts(owner, base.id)
    return body


@router.get("/{kb}/documents/{document_id}", **answers(DocumentShape))
async def get_document(request: Request, kb: str, document_id: str) -> dict[str, Any]:
    service, owner = await _context(request)
    _, document = await _document(service, owner, kb, document_id)
    return document_json(document)


@router.delete("/{kb}/documents/{document_id}", **answers(Deleted))
async def delete_document(request: Request, kb: str, document_id: str) -> dict[str, Any]:
    """The document, its chunks and its file; it is no longer found at once."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    try:
        await service.delete_document(owner, base.id, document_id)
    except LookupError:
        raise _document_not_found(document_id) from None
    return {"id": document_id, "object": "knowledge_base.document.deleted", "deleted": True}


@router.post("/{kb}/documents/{document_id}/cancel", **answers(DocumentShape, errors=(409,)))
async def cancel_document(request: Request, kb: str, document_id: str) -> dict[str, Any]:
    """Stop indexing a queued or indexing document (409 otherwise)."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    try:
        return document_json(await service.store.cancel(owner, base.id, document_id))
    except LookupError:
        raise _document_not_found(document_id) from None


@router.post(
    "/{kb}/documents/{document_id}/reindex",
    **answers(DocumentShape, status=202, errors=(409, 429, 503)),
)
async def reindex_document(request: Request, kb: str, document_id: str) -> JSONResponse:
    """Queue a ready, failed or cancelled document again (409 while pending)."""
    service, owner = await _context(request)
    base = await _base(service, owner, kb)
    try:
        document = await service.reindex(owner, base.id, document_id)
    except LookupError:
        raise _document_not_found(document_id) from None
    return _json(document_json(document), 202)


@router.get(
    "/{kb}/documents/{document_id}/content",
    response_class=FileResponse,
    **answers(
        content=_FILE,
        description="The original bytes: inline when an image, a PDF or plain text, else as "
        "an attachment.",
    ),
)
async def document_content(request: Request, kb: str, document_id: str) -> FileResponse:
    """The original bytes (sandboxed: inline only when an image, a PDF or plain text)."""
    service, owner = await _context(request)
    _, document = await _document(service, owner, kb, document_id)
    path = service.file(document)
    if not path.is_file():
        raise _document_not_found(document_id)
    media_type = (document.content_type or "").split(";", 1)[0].strip().lower()
    if media_type not in SAFE_TYPES:
        media_type = "application/octet-stream"
    headers = download_headers(document.filename, media_type)
    return FileResponse(
        path, media_type=media_type, headers={**headers, "Cache-Control": "private, no-cache"}
    )
