"""What a reader process runs for each job: Parley's own readers, or another.

``read(job)`` yields the reply frames of one job: an attachment becomes its ``Text``
(``documents.attached.read_file_part``); a knowledge upload is read from its file,
extracted (``knowledge.extract.extract``) and chunked (``knowledge.chunking.chunk``),
then sent as ``Chunks`` frames and an ``Extracted``. A document that cannot be read is a
``Failed`` frame with the reason, never an exception.

Another reader is named by an import path, ``package.module:function``, in
``documents.reader``: a function of a job that yields its frames (it may wrap ``read``).
The reader process imports it, so a different parser (or a test's misbehaving one) runs
under the same supervision. Only reader processes import this module.

What does not belong here: the process itself, its limits and its pipes (``worker.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path

from parley.documents.attached import read_file_part
from parley.documents.types import DocumentError, DocumentLimits, UnreadableDocument
from parley.extraction.protocol import (
    CHUNK_FRAME_CHARS,
    Chunks,
    Extracted,
    Failed,
    ReadAttachment,
    ReadKnowledge,
    Reply,
    Request,
    Text,
)
from parley.knowledge.chunking import chunk
from parley.knowledge.extract import extract
from parley.messages import FilePart

DEFAULT_READER = "parley.extraction.readers:read"

Reader = Callable[[Request], Iterator[Reply]]


def read(job: Request) -> Iterator[Reply]:
    """The frames answering ``job``."""
    if isinstance(job, ReadAttachment):
        yield _attachment(job)
    else:
        yield from _knowledge(job)


def _attachment(job: ReadAttachment) -> Reply:
    known = {f.name for f in fields(DocumentLimits)}
    limits = DocumentLimits(**{k: v for k, v in job.limits.items() if k in known})
    try:
        document = read_file_part(FilePart(job.name, job.data, job.media_type), limits=limits)
    except DocumentError as exc:
        return Failed(job.id, exc.reason, exc.message)
    return Text(job.id, document.text, document.pages, document.kind, document.truncated)


def _knowledge(job: ReadKnowledge) -> Iterator[Reply]:
    try:
        data = Path(job.path).read_bytes()
    except OSError as exc:
        yield Failed(job.id, "os_error", f"{type(exc).__name__}: {exc.strerror or exc}")
        return
    try:
        extracted = extract(
            data,
            job.filename,
            job.content_type,
            max_pdf_pages=job.max_pdf_pages,
            max_page_content_bytes=job.max_page_content_bytes,
        )
    except UnreadableDocument as exc:
        yield Failed(job.id, "unreadable", str(exc))
        return
    del data
    chunks = chunk(extracted, job.chunk_size, job.chunk_overlap)
    batch: list[list[object]] = []
    size = 0
    for item in chunks:
        batch.append([item.ordinal, item.text, item.page, item.section])
        size += len(item.text)
        if size >= CHUNK_FRAME_CHARS:
            yield Chunks(job.id, batch)
            batch, size = [], 0
    if batch:
        yield Chunks(job.id, batch)
    yield Extracted(job.id, len(chunks), extracted.pages, extracted.title)


def load_reader(name: str) -> Reader:
    """The reader named ``module:function``; ValueError if there is none."""
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"reader {name!r} is not 'module:function'")
    module = importlib.import_module(module_name)
    reader = getattr(module, attribute, None)
    if not callable(reader):
        raise ValueError(f"reader {name!r}: {attribute} is not a callable in {module_name}")
    found: Reader = reader
    return found
