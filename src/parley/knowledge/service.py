"""``KnowledgeService``: knowledge bases as the routes, the tools and the chat see them.

It owns the parts (store, files, embedder, embedding cache, in-memory vectors, the
ingestion queue) and offers: managing bases and documents (every call scoped by owner),
uploads (written under server-made names, size-limited, queued for indexing), search
(hybrid: lexical + vectors fused by reciprocal rank; lexical alone when there are no
usable vectors) and a retriever for the knowledge transformer.

A search embeds the query once with the server's embedder and compares it only with
bases whose vectors come from that same model; other bases are searched by words.

What does not belong here: HTTP (``api/knowledge.py``, ``api/chatchat/kb.py``), the
SQL (``store/knowledge.py``, ``index.py``), the ingestion steps (``ingest.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from sqlalchemy import Connection, select

from parley.errors import ConfigurationError, Conflict, InvalidRequest, NotFound, Overloaded
from parley.ids import new_id
from parley.knowledge import background
from parley.knowledge.cache import EmbeddingCache
from parley.knowledge.index import ChunkView, fetch_chunks, hybrid_search
from parley.knowledge.ingest import Ingestor, document_path
from parley.knowledge.lanes import indexing_lane
from parley.knowledge.pgvector import vector_search
from parley.knowledge.reading import Extractor, InlineExtractor
from parley.knowledge.types import Embedder, EmbeddingError, Judge, KbRef
from parley.settings.knowledge import MIN_CHUNK_SIZE, KnowledgeSettings
from parley.store.database import Database
from parley.store.kb_documents import QUEUE_RETRY_SECONDS, owner_queue_full
from parley.store.knowledge import Document, KnowledgeBase, KnowledgeStore
from parley.store.schema import kb_chunks
from parley.transforms.protocol import Snippet, TransformContext

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4_000
"""A longer query is cut (its start is what it is about)."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A ranked chunk: ``rank`` from 1, ``score`` the fused score (higher is better)."""

    rank: int
    score: float
    chunk: ChunkView
    kb_name: str

    def snippet(self) -> Snippet:
        return Snippet(
            id=str(self.chunk.id),
            title=self.chunk.filename
            if not self.chunk.title or self.chunk.title == self.chunk.filename
            else f"{self.chunk.filename} — {self.chunk.title}",
            text=self.chunk.text,
            score=self.score,
            page=self.chunk.page,
            section=self.chunk.section,
            document_id=self.chunk.document_id,
            kb_id=self.chunk.kb_id,
        )


class UploadTooLarge(InvalidRequest):
    status = 413
    code = "file_too_large"


class KnowledgeService:
    def __init__(
        self,
        settings: KnowledgeSettings,
        database: Database,
        files: Path,
        embedder: Embedder | None,
        *,
        extractor: Extractor | None = None,
        judge: Judge | None = None,
    ) -> None:
        """``extractor`` reads uploads (the server passes its reader processes; default:
        ``InlineExtractor``, in the event loop's thread, for tests). ``judge`` keeps the
        passages a search found that answer the question (``knowledge.judge_model``)."""
        self.settings = settings
        self.judge = judge
        self.store = KnowledgeStore(database)
        self.embedder = embedder
        self._db = database
        self._files = files
        self.cache = EmbeddingCache(database)
        self.vectors = vector_search(database, max_bytes=settings.vector_cache_mb * 1024 * 1024)
        self.ingestor = Ingestor(
            self.store,
            database,
            files,
            embedder=indexing_lane(embedder),
            cache=self.cache,
            vectors=self.vectors,
            extractor=extractor or InlineExtractor(max_pdf_pages=settings.max_pdf_pages),
            workers=settings.workers,
        )

    async def start(self) -> None:
        await self.ingestor.start()

    async def close(self) -> None:
        await self.ingestor.close()
        self.vectors.close()

    # --- bases -------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        name: str,
        *,
        description: str = "",
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
    ) -> KnowledgeBase:
        size = chunk_size or self.settings.chunk_size
        overlap = self.settings.chunk_overlap if chunk_overlap is None else chunk_overlap
        if size < MIN_CHUNK_SIZE:
            raise InvalidRequest(
                f"chunk_size must be at least {MIN_CHUNK_SIZE} characters",
                param="chunk_size",
                code="invalid_chunk_size",
            )
        if overlap * 2 >= size:
            raise InvalidRequest(
                "chunk_overlap must be less than half of chunk_size",
                param="chunk_overlap",
                code="invalid_chunk_overlap",
            )
        return await self.store.create(
            owner, name, description=description, chunk_size=size, chunk_overlap=overlap
        )

    async def delete(self, owner: str, reference: str) -> str:
        """Delete a base with its documents, chunks, vectors and files; its id. It is
        gone from every query at once (its name free again); its rows and files are
        removed in the background. ``LookupError``: not the owner's."""
        kb_id, documents = await self.store.mark_base_deleting(owner, reference)
        self.vectors.forget_base(kb_id)
        self.ingestor.purge_base(kb_id, documents)
        return kb_id

    # --- documents ---------------------------------------------------------------------

    async def upload(
        self,
        owner: str,
        base: KnowledgeBase,
        filename: str,
        content_type: str | None,
        data: AsyncIterator[bytes],
    ) -> Document:
        """Store an upload under a new id and queue it. ``UploadTooLarge`` past
        ``knowledge.max_upload_bytes`` (nothing is kept); ``Overloaded`` when the queue
        is full."""
        name = _clean_filename(filename)
        document_id = new_id("doc")
        path = document_path(self._files, base.id, document_id)
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        try:
            with await asyncio.to_thread(path.open, "wb") as out:
                async for piece in data:
                    size += len(piece)
                    if size > self.settings.max_upload_bytes:
                        raise UploadTooLarge(
                            f"{name} is larger than {self.settings.max_upload_bytes} bytes",
                            param="files",
                        )
                    digest.update(piece)
                    await asyncio.to_thread(out.write, piece)
            document = await self.store.add_document(
                owner,
                base.id,
                document_id=document_id,
                filename=name,
                content_type=content_type,
                size=size,
                sha256=digest.hexdigest(),
                max_pending=self.settings.max_queued_documents,
                max_per_owner=self.settings.max_queued_per_owner,
            )
        except LookupError:
            await asyncio.to_thread(path.unlink, True)
            raise NotFound(
                f"knowledge base {base.name!r} was deleted during the upload",
                code="knowledge_base_not_found",
            ) from None
        except BaseException:
            await asyncio.to_thread(path.unlink, True)
            raise
        self.ingestor.enqueue(owner, document.id)
        return document

    async def delete_document(self, owner: str, kb_id: str, document_id: str) -> None:
        """Hide the document at once; its chunks, vectors and file are removed in the
        background. ``LookupError``: not the owner's."""
        await self.store.mark_document_deleting(owner, kb_id, document_id)
        self.vectors.forget_document(kb_id, document_id)
        self.ingestor.remove_later(kb_id, document_id)

    async def reindex(self, owner: str, kb_id: str, document_id: str) -> Document:
        document = await self.store.requeue(
            owner,
            kb_id,
            document_id,
            max_pending=self.settings.max_queued_documents,
            max_per_owner=self.settings.max_queued_per_owner,
        )
        self.vectors.forget_document(kb_id, document_id)
        self.ingestor.enqueue(owner, document_id)
        return document

    def reindex_needed(self, base: KnowledgeBase) -> bool:
        """Whether the base has chunks without vectors of the server's embedding model
        (indexed with another model, or with none): searched by words only until it is
        re-indexed (``reindex_base``)."""
        embedder = self.embedder
        return embedder is not None and base.chunks > 0 and base.embedding_model != embedder.model

    async def reindex_base(self, owner: str, base: KnowledgeBase) -> int:
        """Index every document of the base again, with the server's current embedding
        model (Langchain-Chatchat's ``recreate_vector_store``); how many were queued."""
        # every document must fit in the queue first: a base half re-indexed would hold
        # vectors of two models
        ready: list[Document] = []
        after: str | None = None
        while page := await self.store.documents(owner, base.id, limit=500, after=after):
            ready += [d for d in page if d.status not in ("queued", "indexing")]
            after = page[-1].id
        await self._check_room(owner, len(ready))
        await self.store.reset_embedding_model(owner, base.id)
        self.vectors.forget_base(base.id)
        queued = 0
        for document in ready:
            try:
                await self.reindex(owner, base.id, document.id)
            except (LookupError, Conflict):  # deleted, or queued by another call, meanwhile
                continue
            queued += 1
        return queued

    async def _check_room(self, owner: str, documents: int) -> None:
        """Refuse ``documents`` more of the owner's that would not fit in the queue:
        ``Overloaded`` server-wide, ``RateLimited`` past the owner's share."""
        waiting = await self.store.pending_count()
        if waiting + documents > self.settings.max_queued_documents:
            raise Overloaded(
                f"{documents} documents do not fit in the ingestion queue now "
                f"({waiting} waiting); try again later",
                code="ingestion_queue_full",
                retry_after=QUEUE_RETRY_SECONDS,
            )
        mine = await self.store.pending_count(owner)
        if mine + documents > self.settings.max_queued_per_owner:
            raise owner_queue_full(self.settings.max_queued_per_owner)

    def file(self, document: Document) -> Path:
        return document_path(self._files, document.kb_id, document.id)

    async def document_chunks(self, owner: str, document: Document) -> list[ChunkView]:
        """The document's chunks in order (by ordinal), whatever its status; empty when
        it is not the owner's."""

        def query(conn: Connection) -> list[ChunkView]:
            ids = conn.execute(
                select(kb_chunks.c.id)
                .where(kb_chunks.c.document_id == document.id, kb_chunks.c.owner == owner)
                .order_by(kb_chunks.c.ordinal, kb_chunks.c.id)
            ).scalars()
            order = [int(i) for i in ids]
            views = fetch_chunks(conn, owner, order)
            return [views[i] for i in order if i in views]

        return await self._db.read(query)

    # --- search ------------------------------------------------------------------------

    async def search(
        self, owner: str, bases: Sequence[KnowledgeBase], query: str, *, top_k: int
    ) -> list[SearchResult]:
        """The best ``top_k`` chunks of ``bases`` (already the owner's) for ``query``."""
        query = query.strip()[:MAX_QUERY_CHARS]
        if not bases or not query:
            return []
        vector = await self._query_vector(query, bases)
        model = self.embedder.model if self.embedder is not None else None
        floors = None
        if vector is not None and model and self.settings.nothing_matches:
            floors = background.floors(model, vector)
        hits = await hybrid_search(
            self._db,
            self.vectors,
            owner=owner,
            kbs=[KbRef(b.id, b.embedding_model, b.version) for b in bases],
            query=query,
            query_vector=vector,
            model=model,
            top_k=top_k,
            min_similarity=self.settings.min_similarity,
            min_relative_score=self.settings.min_relative_score,
            floors=floors,
        )
        if not hits:
            return []
        chunks = await self._db.read(
            lambda conn: fetch_chunks(conn, owner, [h.chunk_id for h in hits], ready_only=True)
        )
        names = {b.id: b.name for b in bases}
        found = [(hit, chunks[hit.chunk_id]) for hit in hits if hit.chunk_id in chunks]
        if self.judge is not None and found:
            kept = await self.judge.answering(owner, query, [chunk.text for _, chunk in found])
            if kept is not None:
                found = [found[n] for n in kept]
        return [
            SearchResult(rank, hit.score, chunk, names.get(chunk.kb_id, ""))
            for rank, (hit, chunk) in enumerate(found, 1)
        ]

    async def _query_vector(self, query: str, bases: Sequence[KnowledgeBase]) -> Vectors | None:
        embedder = self.embedder
        if embedder is None or not any(b.embedding_model == embedder.model for b in bases):
            return None
        try:
            vectors = await embedder.embed([query])  # not cached: queries pile up
        except (EmbeddingError, httpx.HTTPError) as exc:
            log.warning("query embedding failed; searching by words only: %s", exc)
            return None
        vector: Vectors = vectors[0]
        return vector

    async def retrieve(self, query: str, context: TransformContext) -> list[Snippet]:
        """The knowledge transformer's retriever: the best ``knowledge.top_k`` chunks of
        the request's bases (``context.knowledge_bases``, ids already checked to be
        ``context.owner``'s). A base deleted since is skipped."""
        if not context.knowledge_bases:
            return []
        bases = await self.store.resolve_existing(context.owner, context.knowledge_bases)
        results = await self.search(context.owner, bases, query, top_k=self.settings.top_k)
        return [result.snippet() for result in results]


def _clean_filename(filename: str) -> str:
    """The name as metadata only: its last path component, control characters out."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    return name[:255] or "document"


def build_embedder(settings: KnowledgeSettings, client: httpx.AsyncClient) -> Embedder | None:
    """The embedder ``knowledge.embedder`` names. ``auto``: multilingual-e5-small when
    the ``embed`` extra is installed, else none (lexical search only). ``local`` or
    ``multilingual-e5-small`` without the extra is a ``ConfigurationError``. Converted
    models are kept in ``model_cache_dir``, else the user's cache
    (``default_cache_dir()/models``), shared by every data directory."""
    from parley.knowledge.embeddings import LocalEmbedder
    from parley.knowledge.openai_embeddings import OpenAIEmbedder

    match settings.embedder:
        case "none":
            return None
        case "multilingual-e5-small":
            try:
                return _e5(settings)
            except EmbeddingError as exc:
                message = f"knowledge.embedder is multilingual-e5-small, but {exc}"
                raise ConfigurationError(message) from None
        case "openai":
            endpoint = settings.embedding
            key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
            return OpenAIEmbedder(
                client,
                endpoint.base_url,
                key,
                endpoint.model,
                dimensions=endpoint.dimensions,
                batch_size=endpoint.batch_size,
                timeout=endpoint.timeout_seconds,
            )
        case "local":
            try:
                return LocalEmbedder()
            except EmbeddingError as exc:
                raise ConfigurationError(f"knowledge.embedder is local, but {exc}") from None
        case "auto":
            try:
                return _e5(settings)
            except EmbeddingError as exc:
                log.info("no local embedding model (%s): knowledge search is lexical", exc)
                return None


def _e5(settings: KnowledgeSettings) -> Embedder:
    from parley.knowledge.e5 import E5Embedder
    from parley.settings import default_cache_dir

    return E5Embedder(settings.model_cache_dir or default_cache_dir() / "models")
