"""The ``documents`` section of the settings: the reader processes that turn chat
attachments and knowledge uploads into text (``settings.py`` includes it;
``examples/parley.yaml`` documents every key). The knowledge-only limits
(``knowledge.extract_timeout_seconds``, ``knowledge.max_pdf_pages``) are in
``settings/knowledge.py``.

What does not belong here: the YAML file and the environment (``settings.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DocumentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Documents read at once, server-wide: each in a reader process of its "
        "own (processes are kept for the next document, at a lower CPU priority than the "
        "server's).",
    )
    per_owner: int = Field(
        default=2,
        ge=1,
        description="Of those, for one owner (chat attachments and knowledge uploads "
        "together): one owner's documents cannot take every reader.",
    )
    queue_seconds: float = Field(
        default=20.0,
        gt=0,
        description="How long a chat attachment waits for a free reader; then the request "
        "fails with 503 (429 when its owner already has per_owner being read). Knowledge "
        "uploads wait as long as it takes.",
    )
    timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="The deadline for reading one chat attachment: its reader is killed "
        "and the model is told the file could not be read.",
    )
    max_memory_mb: int = Field(
        default=1024,
        ge=128,
        description="A reader process's address space (RLIMIT_AS): a document that needs "
        "more cannot be read.",
    )
    max_page_content_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=1024,
        description="A PDF page whose content streams decompress to more is skipped "
        "(text extraction costs about 1-2 µs a byte).",
    )
    max_pdf_content_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="A chat attachment's PDF is read until its pages' content passes "
        "this; the rest is left out (the model is told it is longer).",
    )
    idle_seconds: float = Field(
        default=300.0, gt=0, description="An idle reader process exits after this."
    )
    reader: str = Field(
        default="parley.extraction.readers:read",
        description="What the reader processes run for each document (module:function): "
        "Parley's own readers, or another parser under the same supervision.",
    )
