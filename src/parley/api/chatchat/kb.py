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
(the same API keys; a missing or wrong key is HTTP 401 with an OpenAI error body that
also carries Chatchat's ``code`` and ``msg``, as every error on its routes does), and
every base is its owner's: another owner's base is "not found", exactly like a missing
one. A body that does not validate (a missing ``knowledge_base_name``, a
``score_threshold`` outside 0..2) is HTTP 400 with that body (Chatchat: 422).

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

Layout: this module holds the router the app mounts (``router``), the knowledge-base
routes and ``search_docs``. The file routes (``list_files``, ``upload_docs``,
``delete_docs``, ``update_docs``, ``download_doc``) are in ``api/chatchat/docs.py`` and
the streaming ``recreate_vector_store`` in ``api/chatchat/recreate.py``; both are
included into ``router``. What the modules share (the answer envelope, the caller and
base lookup, Chatchat's chunking defaults) is in ``api/chatchat/common.py``.

What does not belong here: storage and search (``knowledge/``, ``store/knowledge.py``),
Parley's own knowledge-base API (``api/knowledge.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, Field

from parley.api.chatchat import docs as chatchat_docs
from parley.api.chatchat import recreate as chatchat_recreate
from parley.api.chatchat.common import (
    CHUNK_SIZE,
    LIST_PAGE,
    OVERLAP_SIZE,
    all_documents,
    bad_name,
    caller,
    chatchat_time,
    disabled,
    find_base,
    missing_base,
    name_problem,
    open_base,
    reply,
    valid_name,
)
from parley.api.chatchat.shapes import BaseListReply, ChatchatDocument, InfoReply, Reply
from parley.api.openapi import answers, model_schema
from parley.errors import Conflict, InvalidRequest, ParleyError
from parley.knowledge.index import ChunkView
from parley.knowledge.service import KnowledgeService, SearchResult
from parley.store.knowledge import KnowledgeBase

router = APIRouter(prefix="/knowledge_base", tags=["langchain-chatchat"])

VECTOR_SEARCH_TOP_K = 3
SCORE_THRESHOLD = 2.0
"""Chatchat's default: a distance of 2 keeps every hit."""
MAX_SCORE = 2.0
MAX_TOP_K = 50
"""More hits than this are not searched for (a larger ``top_k`` is cut to it)."""
VS_TYPE = "parley"
"""What ``vs_type`` reports: Parley's own index, whatever type the client asked for."""
MAX_LISTED_CHUNKS = 10_000
"""The most chunks ``search_docs`` lists without a query."""
MAX_INFO = 2_000
MAX_FILE_NAME = 255
"""The longest ``file_name`` pattern ``search_docs`` takes."""


# --- request bodies ----------------------------------------------------------------------

_NAME_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"type": "string", "description": "The knowledge base's name."},
                        {
                            "type": "object",
                            "required": ["knowledge_base_name"],
                            "properties": {"knowledge_base_name": {"type": "string"}},
                        },
                    ]
                }
            }
        }
    }
}


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
    top_k: int = Field(default=VECTOR_SEARCH_TOP_K, ge=0, le=1_000)
    score_threshold: float = Field(default=SCORE_THRESHOLD, ge=0.0, le=MAX_SCORE)
    file_name: str = Field(default="", max_length=MAX_FILE_NAME)
    metadata: dict[str, Any] = Field(default_factory=dict)


# --- answers -----------------------------------------------------------------------------


def base_json(base: KnowledgeBase) -> dict[str, Any]:
    """A base as Chatchat's ``KnowledgeBaseSchema``."""
    return {
        "id": base.id,
        "kb_name": base.name,
        "kb_info": base.description,
        "vs_type": VS_TYPE,
        "embed_model": base.embedding_model,
        "file_count": base.documents,
        "create_time": chatchat_time(base.created_at),
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


async def scored_search(
    service: KnowledgeService,
    owner: str,
    base: KnowledgeBase,
    query: str,
    *,
    top_k: int,
    score_threshold: float,
) -> list[tuple[SearchResult, float]]:
    """The base's hits for ``query`` with their distances, those within
    ``score_threshold`` only, best first: Chatchat's search without filters (its knowledge
    and file chats, its knowledge tool, ``search_temp_docs``)."""
    top_k = min(top_k, MAX_TOP_K)
    if top_k <= 0 or not query.strip():
        return []
    results = await service.search(owner, [base], query, top_k=top_k)
    scored = zip(results, distances(results), strict=True)
    return [(result, score) for result, score in scored if score <= score_threshold]


async def search_documents(
    service: KnowledgeService,
    owner: str,
    base: KnowledgeBase,
    query: str,
    *,
    top_k: int,
    score_threshold: float,
) -> list[dict[str, Any]]:
    """``scored_search``'s hits as Chatchat documents."""
    found = await scored_search(
        service, owner, base, query, top_k=top_k, score_threshold=score_threshold
    )
    return [document_json(result.chunk, score) for result, score in found]


# --- helpers -----------------------------------------------------------------------------


class LikePattern:
    """A SQL ``LIKE`` pattern (``%`` any run, ``_`` one character; no escape character),
    matched without case against a whole string.

    Matching is a greedy two-pointer scan that backtracks only to the last ``%`` seen, so
    it takes at most ``len(pattern) * len(text)`` steps (no regular expression, whose
    backtracking on patterns like ``%%%%%%%%x`` is exponential).
    """

    def __init__(self, pattern: str) -> None:
        folded: list[str] = []
        for ch in pattern:
            if ch == "%" and folded and folded[-1] == "%":
                continue  # consecutive % mean the same as one
            folded.append(ch if ch in "%_" else ch.lower())
        self._pattern = folded

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches."""
        pattern = self._pattern
        chars = [ch.lower() for ch in text]
        p = t = 0
        star = -1  # index in pattern of the last % seen
        resume = 0  # index in text the last % currently stops at
        while t < len(chars):
            if p < len(pattern) and pattern[p] != "%" and pattern[p] in ("_", chars[t]):
                p += 1
                t += 1
            elif p < len(pattern) and pattern[p] == "%":
                star, resume = p, t
                p += 1
            elif star >= 0:
                resume += 1
                p, t = star + 1, resume
            else:
                return False
        while p < len(pattern) and pattern[p] == "%":
            p += 1
        return p == len(pattern)


def _like(pattern: str) -> LikePattern:
    """A SQL ``LIKE`` pattern (``%``, ``_``; no escape character), without case."""
    return LikePattern(pattern)


def _metadata_matches(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Chatchat's metadata filter: each first-level key equal as a string."""
    return all(k in metadata and str(metadata[k]) == str(v) for k, v in wanted.items())


# --- knowledge bases ---------------------------------------------------------------------


@router.get("/list_knowledge_bases", **answers(BaseListReply))
async def list_knowledge_bases(request: Request) -> dict[str, Any]:
    service, owner = await caller(request)
    if service is None:
        return disabled()
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


@router.post("/create_knowledge_base", **answers(Reply))
async def create_knowledge_base(request: Request, body: CreateBody) -> dict[str, Any]:
    service, owner = await caller(request)
    if service is None:
        return disabled()
    name = body.knowledge_base_name.strip()
    if not valid_name(name):
        return bad_name()
    problem = name_problem(name)
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


@router.post("/delete_knowledge_base", openapi_extra=_NAME_BODY, **answers(Reply))
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
    service, owner = await caller(request)
    if service is None:
        return disabled()
    name = body
    if not valid_name(name):
        return bad_name()
    if await find_base(service, owner, name) is None:
        return missing_base(name)
    try:
        await service.delete(owner, name)
    except LookupError:
        return missing_base(name)
    except ParleyError as exc:
        return reply(500, f"could not delete knowledge base {name}: {exc.message}")
    return reply(msg=f"deleted knowledge base {name}")


@router.post("/update_info", **answers(InfoReply))
async def update_info(request: Request, body: InfoBody) -> dict[str, Any]:
    opened = await open_base(request, body.knowledge_base_name)
    if isinstance(opened, dict):
        return opened
    service, owner, name = opened.service, opened.owner, body.knowledge_base_name
    try:
        await service.store.update(owner, name, name=None, description=body.kb_info)
    except LookupError:
        return missing_base(name)
    return reply(msg="knowledge base description updated", data={"kb_info": body.kb_info})


# --- search ------------------------------------------------------------------------------


@router.post(
    "/search_docs",
    **answers(
        content={
            "application/json": {
                "schema": {"type": "array", "items": model_schema(ChatchatDocument)}
            }
        }
    ),
)
async def search_docs(request: Request, body: SearchBody) -> list[dict[str, Any]]:
    """A bare list, as in Chatchat; ``[]`` for a missing base."""
    service, owner = await caller(request)
    if service is None or not valid_name(body.knowledge_base_name):
        return []
    base = await find_base(service, owner, body.knowledge_base_name)
    if base is None:
        return []
    top_k = min(body.top_k, MAX_TOP_K)
    name_filter = _like(body.file_name) if body.file_name else None
    if not body.query.strip():
        if name_filter is None and not body.metadata:
            return []
        return await _file_chunks(service, owner, base, name_filter, body.metadata)
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
    owner: str,
    base: KnowledgeBase,
    name_filter: LikePattern | None,
    metadata: dict[str, Any],
) -> list[dict[str, Any]]:
    """The indexed chunks of the base's files that match, file by file, in order
    (Chatchat's ``list_docs``: no query, a file name or metadata)."""
    documents = [
        d
        for d in await all_documents(service, owner, base.id)
        if d.status == "ready" and (name_filter is None or name_filter.fullmatch(d.filename))
    ]
    found: list[dict[str, Any]] = []
    for document in documents:
        for chunk in await service.document_chunks(owner, document):
            if not metadata or _metadata_matches(chunk_metadata(chunk), metadata):
                found.append(document_json(chunk, 0.0))
                if len(found) >= MAX_LISTED_CHUNKS:
                    return found
    return found


router.include_router(chatchat_docs.router)
router.include_router(chatchat_recreate.router)
