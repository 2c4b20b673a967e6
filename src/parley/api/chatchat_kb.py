"""``/knowledge_base/*``: Langchain-Chatchat's knowledge-base API over Parley's knowledge bases.

The shapes are those of Langchain-Chatchat 0.3.x (``libs/chatchat-server``: routes in
``chatchat/server/api_server/kb_routes.py``, handlers in ``chatchat/server/knowledge_base/
kb_api.py`` and ``kb_doc_api.py``, defaults in ``chatchat/settings.py``), called the way
its web UI's ``ApiRequest`` (``chatchat/webui_pages/utils.py``) calls them. 0.3.x is the
version whose defaults the reference describes (``chunk_size`` 750, ``chunk_overlap``
150, ``top_k`` 3, ``score_threshold`` 2.0); in it ``list_knowledge_bases`` answers base
details, not bare names (0.2.x).

Answers are ``{"code", "msg", "data"}`` with HTTP 200, and, as in Chatchat, a failure
is a ``code`` inside that body (404 for a missing base or a name in use, 403 for a name
with ``../``, 500 for a failure): clients read ``code``, not the HTTP status. Two routes
answer otherwise, as in Chatchat: ``search_docs`` answers a bare list of documents
(``[]`` when the base is missing) and ``download_doc`` the file itself.
``recreate_vector_store`` streams Server-Sent Events. Authentication is Parley's own
(the same API keys; a missing or wrong key is HTTP 401 with an OpenAI error body), and
every base is its owner's: another owner's base is "not found", exactly like a missing
one. A body that does not validate (a missing ``knowledge_base_name``, a
``score_threshold`` outside 0..2) is HTTP 400 with an OpenAI error body (Chatchat: 422).

Routes (method, body, ``data``):

- ``GET list_knowledge_bases``: ``[{id, kb_name, kb_info, vs_type, embed_model,
  file_count, create_time}]``, oldest first.
- ``POST create_knowledge_base`` JSON ``{knowledge_base_name, vector_store_type, kb_info,
  embed_model}``: the base is made with Chatchat's chunking, 750 characters with 150
  of overlap.
- ``POST delete_knowledge_base``: the body is the bare JSON string of the name
  (``"samples"``), as Chatchat's client sends it; ``{"knowledge_base_name": ...}`` is
  accepted too.
- ``POST update_info`` JSON ``{knowledge_base_name, kb_info}``: ``{kb_info}``.
- ``GET list_files?knowledge_base_name=``: one detail dict per file name (Chatchat's
  ``get_kb_file_details`` keys; ``in_db`` is true once the file is indexed) with
  Parley's ``status``, ``error`` and ``document_id`` added.
- ``POST search_docs`` JSON ``{query, knowledge_base_name, top_k=3, score_threshold=2.0,
  file_name="", metadata={}}``: ``[{id, page_content, metadata, type: "Document",
  score}]``; with an empty query, the chunks of the files ``file_name`` names (or whose
  metadata match), in order.
- ``POST upload_docs`` multipart ``files`` + ``knowledge_base_name, override=false,
  to_vector_store=true, chunk_size=750, chunk_overlap=150, zh_title_enhance=false,
  docs="", not_refresh_vs_cache=false``: ``{failed_files: {name: reason}}``.
- ``POST delete_docs`` JSON ``{knowledge_base_name, file_names, delete_content=false,
  not_refresh_vs_cache}``: ``{failed_files}``.
- ``POST update_docs`` JSON ``{knowledge_base_name, file_names, chunk_size,
  chunk_overlap, zh_title_enhance, override_custom_docs, docs, not_refresh_vs_cache}``:
  indexes the named files again; ``{failed_files}``.
- ``GET download_doc?knowledge_base_name=&file_name=&preview=false``.
- ``POST recreate_vector_store`` JSON ``{knowledge_base_name, allow_empty_kb=true,
  vs_type, embed_model, chunk_size, chunk_overlap, zh_title_enhance}``: every file is
  indexed again with the server's embedding model; one event per file as it finishes,
  ``{code: 200, msg: "(i / n): name", total, finished, doc}`` or ``{code: 500, msg}``.

Files are named by their file name within a base, as in Chatchat: a name maps to the
base's documents of that name (``delete_docs`` and ``update_docs`` act on all of them,
``download_doc`` and ``list_files`` use the newest). Names match exactly (Chatchat:
without case) except in ``search_docs``'s ``file_name``, a SQL ``LIKE`` pattern there
as in Chatchat (``%`` any run, ``_`` one character, no case).

Scores. Chatchat's scores are distances, lower is more relevant, and its
``score_threshold`` keeps hits at most that far (2 keeps everything). Parley ranks by
reciprocal rank fusion of a search by words and one by vectors (higher is better), a
score with no absolute scale, so no true distance exists. ``score`` is therefore the
hit's distance from the best hit of the same search (after the ``file_name`` and
``metadata`` filters): ``2 * (1 - fused / best fused)``, 0 for the best hit, at most 2,
and the threshold applies to that. It is relative: a threshold drops hits much weaker
than the best one, never the best one itself. (Chatchat 0.3.x itself answers ``score``
3.0, its default, for every hit of a query: its clients cannot rely on the value.)

Indexing in Parley runs in the background, while Chatchat's ``upload_docs`` and
``update_docs`` answer once the files are vectorised. These routes wait for their
files up to ``INDEX_WAIT_SECONDS``, so that a file that could not be read is in
``failed_files`` as in Chatchat; a file still indexing then is named in ``msg`` and
shows ``in_db: false`` in ``list_files`` until it is done.

Deviations, beyond the above:

- One chunk size per base. ``create_knowledge_base`` (and ``recreate_vector_store``
  when it creates the base) makes it 750 / 150; the ``chunk_size`` and
  ``chunk_overlap`` of an upload or update apply to the whole base in Chatchat's model
  but cannot here: values other than the base's are ignored, and ``msg`` says so.
- Ignored: ``vector_store_type`` / ``vs_type`` (``vs_type`` is reported as
  ``"parley"``), ``embed_model`` (the server's embedder is used),
  ``zh_title_enhance``, ``not_refresh_vs_cache``, ``override_custom_docs``.
- Custom ``docs`` (pre-split documents) are not supported: a name only in ``docs`` is
  in ``failed_files``; an uploaded file that also has custom docs is indexed from its
  own content, and ``msg`` says so.
- ``to_vector_store=false`` and ``delete_docs`` with ``delete_content=false`` keep the
  file (listed, downloadable, ``in_db: false``) and out of search until ``update_docs``.
- ``upload_docs`` keeps Chatchat's ``override`` rule: without it, a file whose name and
  size match the newest file of that name is refused ("already exists"); otherwise the
  new file replaces every older one of its name once it is stored.
- ``search_docs`` applies ``file_name`` and ``metadata`` to a query's hits too
  (Chatchat ignores them when there is a query).
- Base ids are Parley's (``kb_...``, a string; Chatchat: an integer); a base may also be
  named by its id. ``msg`` texts are English.
- ``download_doc`` serves an attachment unless ``preview``; a preview is inline only
  for PDF, images other than SVG and text (served as ``text/plain``); anything else
  (HTML, SVG, office files) stays an attachment.
- Not provided: the knowledge-base chat (``/knowledge_base/chat/completions``),
  temporary knowledge bases (``upload_temp_docs``, ``search_temp_docs``) and the
  summary routes (``/knowledge_base/kb_summary_api/*``).

What does not belong here: storage and search (``knowledge/``, ``store/knowledge.py``),
Parley's own knowledge-base API (``api/knowledge.py``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy import Connection, select
from starlette.datastructures import FormData, UploadFile
from starlette.responses import FileResponse, Response, StreamingResponse

from parley.api.state import AppState
from parley.errors import Conflict, InvalidRequest, ParleyError, PayloadTooLarge
from parley.knowledge.index import ChunkView, fetch_chunks
from parley.knowledge.service import KnowledgeService, SearchResult
from parley.store.database import Database
from parley.store.knowledge import ID_PREFIX, Document, KnowledgeBase
from parley.store.schema import kb_chunks

router = APIRouter(prefix="/knowledge_base", tags=["langchain-chatchat"])

CHUNK_SIZE = 750
"""Chatchat's ``kb_settings.CHUNK_SIZE``: the chunk size of bases made here."""
OVERLAP_SIZE = 150
"""Chatchat's ``kb_settings.OVERLAP_SIZE``."""
VECTOR_SEARCH_TOP_K = 3
SCORE_THRESHOLD = 2.0
"""Chatchat's default: a distance of 2 keeps every hit."""
MAX_SCORE = 2.0
MAX_TOP_K = 50
"""More hits than this are not searched for (a larger ``top_k`` is cut to it)."""
VS_TYPE = "parley"
"""What ``vs_type`` reports: Parley's own index, whatever type the client asked for."""
INDEX_WAIT_SECONDS = 60.0
"""How long ``upload_docs`` and ``update_docs`` wait for their files to be indexed."""
POLL_SECONDS = 0.2
"""How often a wait looks at the documents' status."""
STALL_SECONDS = 600.0
"""``recreate_vector_store`` stops streaming after this long without a file finishing."""
KEEPALIVE_SECONDS = 15.0
MAX_LISTED_CHUNKS = 10_000
"""The most chunks ``search_docs`` lists without a query."""
LIST_PAGE = 200
READ_PIECE = 1024 * 1024
MULTIPART_SLACK = 64 * 1024
MAX_NAME = 100
MAX_INFO = 2_000
PENDING = ("queued", "indexing")
INLINE_TYPES = frozenset({"application/pdf", "image/png", "image/jpeg", "image/gif", "image/webp"})
"""Previewed inline as they are; ``text/*`` other than HTML and XML is inline as
``text/plain``; everything else is an attachment even with ``preview``."""
_NOT_TEXT = ("text/html", "text/xml", "text/xsl", "text/javascript", "text/ecmascript")
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


# --- request bodies ----------------------------------------------------------------------


class CreateBody(BaseModel):
    knowledge_base_name: str = Field(max_length=1_000)
    vector_store_type: str = "faiss"
    kb_info: str = Field(default="", max_length=MAX_INFO)
    embed_model: str = ""


class InfoBody(BaseModel):
    knowledge_base_name: str = Field(max_length=1_000)
    kb_info: str = Field(max_length=MAX_INFO)


class SearchBody(BaseModel):
    query: str = Field(default="", max_length=20_000)
    knowledge_base_name: str = Field(max_length=1_000)
    top_k: int = Field(default=VECTOR_SEARCH_TOP_K, ge=0)
    score_threshold: float = Field(default=SCORE_THRESHOLD, ge=0.0, le=MAX_SCORE)
    file_name: str = Field(default="", max_length=1_000)
    metadata: dict[str, Any] = Field(default_factory=dict)


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


class RecreateBody(BaseModel):
    knowledge_base_name: str = Field(max_length=1_000)
    allow_empty_kb: bool = True
    vs_type: str = "faiss"
    embed_model: str = ""
    chunk_size: int = CHUNK_SIZE
    chunk_overlap: int = OVERLAP_SIZE
    zh_title_enhance: bool = False
    not_refresh_vs_cache: bool = False


# --- answers -----------------------------------------------------------------------------


def reply(code: int = 200, msg: str = "success", data: Any = None) -> dict[str, Any]:
    """Chatchat's ``BaseResponse``."""
    return {"code": code, "msg": msg, "data": data}


def _missing_base(name: str) -> dict[str, Any]:
    return reply(404, f"knowledge base {name} not found")


def _disabled() -> dict[str, Any]:
    return reply(404, "knowledge bases are turned off on this server (knowledge.enabled)")


def _bad_name() -> dict[str, Any]:
    """Chatchat's ``validate_kb_name`` refusal."""
    return reply(403, "invalid knowledge base name")


def _time(stamp: float) -> str:
    """A time as Chatchat's ``create_time`` (ISO 8601, UTC, no zone)."""
    return datetime.fromtimestamp(stamp, UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def base_json(base: KnowledgeBase) -> dict[str, Any]:
    """A base as Chatchat's ``KnowledgeBaseSchema``."""
    return {
        "id": base.id,
        "kb_name": base.name,
        "kb_info": base.description,
        "vs_type": VS_TYPE,
        "embed_model": base.embedding_model,
        "file_count": base.documents,
        "create_time": _time(base.created_at),
    }


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
        "create_time": _time(document.created_at),
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


def chunk_metadata(chunk: ChunkView) -> dict[str, Any]:
    """A chunk's ``metadata``: ``source`` is its file name, as in Chatchat."""
    return {
        "source": chunk.filename,
        "page": chunk.page,
        "section": chunk.section,
        "title": chunk.title,
        "document_id": chunk.document_id,
    }


def document_json(chunk: ChunkView, score: float) -> dict[str, Any]:
    """A chunk as Chatchat's ``DocumentWithVSId``."""
    return {
        "id": str(chunk.id),
        "page_content": chunk.text,
        "metadata": chunk_metadata(chunk),
        "type": "Document",
        "score": score,
    }


def distances(results: Sequence[SearchResult]) -> list[float]:
    """Each hit's distance from the best hit of its search, in 0..2 (see the module's
    notes on scores)."""
    best = max((r.score for r in results), default=0.0)
    if best <= 0:
        return [0.0 if r.rank == 1 else MAX_SCORE for r in results]
    return [round(min(MAX_SCORE, max(0.0, 2 * (1 - r.score / best))), 4) for r in results]


# --- helpers -----------------------------------------------------------------------------


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.parley
    return state


async def _caller(request: Request) -> tuple[KnowledgeService | None, str]:
    """The service (None: knowledge bases are off) and the caller's owner."""
    state = _state(request)
    owner = await state.auth.owner(request)
    return state.knowledge, owner


def _valid(name: str) -> bool:
    """Chatchat's ``validate_kb_name``: no ``../``."""
    return "../" not in name


async def _base(service: KnowledgeService, owner: str, name: str) -> KnowledgeBase | None:
    """The owner's base by name (or id); None when it is missing or another owner's."""
    if not name.strip():
        return None
    try:
        return await service.store.get(owner, name)
    except LookupError:
        return None


def _name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new base (Parley's rules), or None."""
    if not name:
        return "the knowledge base name must not be empty"
    if len(name) > MAX_NAME:
        return f"the knowledge base name must be at most {MAX_NAME} characters"
    if name.startswith(ID_PREFIX):
        return f"a knowledge base name may not start with {ID_PREFIX!r} (ids do)"
    if "/" in name or any(ord(char) < 32 or ord(char) == 127 for char in name):
        return "a knowledge base name may not hold '/' or control characters"
    return None


async def _all_documents(service: KnowledgeService, owner: str, kb_id: str) -> list[Document]:
    """Every document of the base, oldest first."""
    found: list[Document] = []
    after: str | None = None
    while True:
        page = await service.store.documents(owner, kb_id, limit=LIST_PAGE, after=after)
        found.extend(page)
        if len(page) < LIST_PAGE:
            return found
        after = page[-1].id


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


def _like(pattern: str) -> re.Pattern[str]:
    """A SQL ``LIKE`` pattern (``%``, ``_``; no escape character), without case."""
    parts = [".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern]
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _metadata_matches(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Chatchat's metadata filter: each first-level key equal as a string."""
    return all(k in metadata and str(metadata[k]) == str(v) for k, v in wanted.items())


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


# --- knowledge bases ---------------------------------------------------------------------


@router.get("/list_knowledge_bases")
async def list_knowledge_bases(request: Request) -> dict[str, Any]:
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    bases: list[KnowledgeBase] = []
    after: str | None = None
    while True:
        page = await service.store.bases(owner, limit=LIST_PAGE, after=after)
        bases.extend(page)
        if len(page) < LIST_PAGE:
            break
        after = page[-1].id
    bases.reverse()  # the store lists newest first; Chatchat lists in creation order
    return reply(data=[base_json(b) for b in bases])


@router.post("/create_knowledge_base")
async def create_knowledge_base(request: Request, body: CreateBody) -> dict[str, Any]:
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    name = body.knowledge_base_name.strip()
    if not _valid(name):
        return _bad_name()
    problem = _name_problem(name)
    if problem is not None:
        return reply(404, problem)
    try:
        await service.create(
            owner, name, description=body.kb_info, chunk_size=CHUNK_SIZE, chunk_overlap=OVERLAP_SIZE
        )
    except Conflict:
        return reply(404, f"a knowledge base named {name} already exists")
    except ParleyError as exc:
        return reply(500, f"could not create knowledge base {name}: {exc.message}")
    return reply(msg=f"created knowledge base {name}")


@router.post("/delete_knowledge_base")
async def delete_knowledge_base(request: Request, body: Annotated[Any, Body()]) -> dict[str, Any]:
    """The body is the name as a bare JSON string (``"samples"``), as Chatchat's client
    sends it, or ``{"knowledge_base_name": ...}``."""
    if isinstance(body, dict):
        body = body.get("knowledge_base_name")
    if not isinstance(body, str):
        raise InvalidRequest(
            "the body must be the knowledge base name as a JSON string",
            param="knowledge_base_name",
        )
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    name = body
    if not _valid(name):
        return _bad_name()
    if await _base(service, owner, name) is None:
        return _missing_base(name)
    try:
        await service.delete(owner, name)
    except LookupError:
        return _missing_base(name)
    except ParleyError as exc:
        return reply(500, f"could not delete knowledge base {name}: {exc.message}")
    return reply(msg=f"deleted knowledge base {name}")


@router.post("/update_info")
async def update_info(request: Request, body: InfoBody) -> dict[str, Any]:
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    name = body.knowledge_base_name
    if not _valid(name):
        return _bad_name()
    if await _base(service, owner, name) is None:
        return _missing_base(name)
    try:
        await service.store.update(owner, name, name=None, description=body.kb_info)
    except LookupError:
        return _missing_base(name)
    return reply(msg="knowledge base description updated", data={"kb_info": body.kb_info})


# --- files -------------------------------------------------------------------------------


@router.get("/list_files")
async def list_files(
    request: Request, knowledge_base_name: str = Query(max_length=1_000)
) -> dict[str, Any]:
    service, owner = await _caller(request)
    if service is None:
        return {**_disabled(), "data": []}
    if not _valid(knowledge_base_name):
        return {**_bad_name(), "data": []}
    base = await _base(service, owner, knowledge_base_name)
    if base is None:
        return {**_missing_base(knowledge_base_name), "data": []}
    files = _newest_by_name(await _all_documents(service, owner, base.id))
    return reply(data=[file_json(base, d, n) for n, d in enumerate(files, 1)])


@router.post("/search_docs")
async def search_docs(request: Request, body: SearchBody) -> list[dict[str, Any]]:
    """A bare list, as in Chatchat; ``[]`` for a missing base."""
    service, owner = await _caller(request)
    if service is None or not _valid(body.knowledge_base_name):
        return []
    base = await _base(service, owner, body.knowledge_base_name)
    if base is None:
        return []
    top_k = min(body.top_k, MAX_TOP_K)
    name_filter = _like(body.file_name) if body.file_name else None
    if not body.query.strip():
        if name_filter is None and not body.metadata:
            return []
        return await _file_chunks(
            service, _state(request).database, owner, base, name_filter, body.metadata
        )
    if top_k <= 0:
        return []
    filtered = name_filter is not None or bool(body.metadata)
    results = await service.search(
        owner, [base], body.query, top_k=MAX_TOP_K if filtered else top_k
    )
    if name_filter is not None:
        results = [r for r in results if name_filter.fullmatch(r.chunk.filename)]
    if body.metadata:
        results = [r for r in results if _metadata_matches(chunk_metadata(r.chunk), body.metadata)]
    hits = [
        document_json(result.chunk, score)
        for result, score in zip(results, distances(results), strict=True)
        if score <= body.score_threshold
    ]
    return hits[:top_k]


async def _file_chunks(
    service: KnowledgeService,
    database: Database,
    owner: str,
    base: KnowledgeBase,
    name_filter: re.Pattern[str] | None,
    metadata: dict[str, Any],
) -> list[dict[str, Any]]:
    """The indexed chunks of the base's files that match, file by file, in order
    (Chatchat's ``list_docs``: no query, a file name or metadata)."""
    documents = [
        d
        for d in await _all_documents(service, owner, base.id)
        if d.status == "ready" and (name_filter is None or name_filter.fullmatch(d.filename))
    ]
    found: list[dict[str, Any]] = []
    for document in documents:
        for chunk in await _document_chunks(database, owner, document):
            if not metadata or _metadata_matches(chunk_metadata(chunk), metadata):
                found.append(document_json(chunk, 0.0))
                if len(found) >= MAX_LISTED_CHUNKS:
                    return found
    return found


async def _document_chunks(database: Database, owner: str, document: Document) -> list[ChunkView]:
    """A document's chunks in order. (The one read of the chunk table here: the store
    offers no listing of a document's chunks.)"""

    def query(conn: Connection) -> list[ChunkView]:
        ids = conn.execute(
            select(kb_chunks.c.id)
            .where(kb_chunks.c.document_id == document.id, kb_chunks.c.owner == owner)
            .order_by(kb_chunks.c.ordinal, kb_chunks.c.id)
        ).scalars()
        order = [int(i) for i in ids]
        views = fetch_chunks(conn, owner, order)
        return [views[i] for i in order if i in views]

    return await database.read(query)


@router.post("/upload_docs")
async def upload_docs(request: Request) -> dict[str, Any]:
    """``multipart/form-data``, the fields of Chatchat's ``upload_docs``."""
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    settings = service.settings
    declared = request.headers.get("content-length", "")
    bound = settings.max_files_per_upload * (settings.max_upload_bytes + MULTIPART_SLACK)
    if declared.isdigit() and int(declared) > bound:
        raise PayloadTooLarge(
            f"the request is larger than {settings.max_files_per_upload} files of "
            f"{settings.max_upload_bytes} bytes",
            param="files",
        )
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
        if not _valid(name):
            return _bad_name()
        base = await _base(service, owner, name)
        if base is None:
            return _missing_base(name)
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
                if exc.status >= 500:  # the queue is full: the rest would fail the same way
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
    files of the name are deleted once the new one is stored."""
    existing = await _named(service, owner, base.id, filename)
    if existing and not override and upload.size is not None and existing[-1].size == upload.size:
        raise _Refused(f"file {filename} already exists")

    async def pieces() -> AsyncIterator[bytes]:
        while piece := await upload.read(READ_PIECE):
            yield piece

    document = await service.upload(owner, base, filename, upload.content_type, pieces())
    for old in await _named(service, owner, base.id, document.filename):
        if old.id != document.id:
            with suppress(LookupError):
                await service.delete_document(owner, base.id, old.id)
    return document


@router.post("/delete_docs")
async def delete_docs(request: Request, body: DeleteDocsBody) -> dict[str, Any]:
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    name = body.knowledge_base_name
    if not _valid(name):
        return _bad_name()
    base = await _base(service, owner, name)
    if base is None:
        return _missing_base(name)
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


@router.post("/update_docs")
async def update_docs(request: Request, body: UpdateDocsBody) -> dict[str, Any]:
    """Index the named files again (from their stored content)."""
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    name = body.knowledge_base_name
    if not _valid(name):
        return _bad_name()
    base = await _base(service, owner, name)
    if base is None:
        return _missing_base(name)
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


@router.get("/download_doc", response_model=None)
async def download_doc(
    request: Request,
    knowledge_base_name: str = Query(max_length=1_000),
    file_name: str = Query(max_length=1_000),
    preview: bool = Query(default=False),
) -> Response | dict[str, Any]:
    """The newest file of the name: an attachment, or inline with ``preview`` when its
    type is safe to show (PDF, images other than SVG, text as ``text/plain``)."""
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    if not _valid(knowledge_base_name):
        return _bad_name()
    base = await _base(service, owner, knowledge_base_name)
    if base is None:
        return _missing_base(knowledge_base_name)
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


# --- recreate_vector_store ---------------------------------------------------------------


@router.post("/recreate_vector_store", response_model=None)
async def recreate_vector_store(
    request: Request, body: RecreateBody
) -> StreamingResponse | dict[str, Any]:
    """Index every file of the base again; Server-Sent Events, one per finished file.
    A missing base is created (with ``allow_empty_kb``, Chatchat's default) and has
    nothing to index."""
    service, owner = await _caller(request)
    if service is None:
        return _disabled()
    name = body.knowledge_base_name
    if not _valid(name):
        return _bad_name()
    base = await _base(service, owner, name)
    if base is None:
        if not body.allow_empty_kb:
            return _missing_base(name)
        problem = _name_problem(name.strip())
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
    documents = await _all_documents(service, owner, base.id)
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
