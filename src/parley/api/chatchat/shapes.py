"""The shapes of Langchain-Chatchat's ``/knowledge_base/*`` answers, for the OpenAPI schema.

Chatchat answers ``{code, msg, data}`` with HTTP 200 and puts a failure in ``code``
(404, 403, 500; see ``api/chatchat/kb.py``), so each route's 200 is an envelope whose
``data`` is the route's value or null when ``code`` says it failed. ``search_docs``
answers a bare list. The bodies are written by ``api/chatchat/kb.py``,
``api/chatchat/docs.py`` and ``api/chatchat/recreate.py``; the schema fuzzing suite
checks that they match. What does not belong here: the request bodies (beside their
routes), Parley's own shapes (``api/shapes.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from parley.api.shapes import Shape


class Reply(Shape):
    """Chatchat's ``BaseResponse``: ``code`` 200 on success, else why it failed."""

    code: int
    msg: str
    data: None


class ChatchatBase(Shape):
    id: str
    kb_name: str
    kb_info: str
    vs_type: str
    embed_model: str
    file_count: int
    create_time: str


class BaseListReply(Shape):
    code: int
    msg: str
    data: list[ChatchatBase] | None


class KbInfo(Shape):
    kb_info: str


class InfoReply(Shape):
    code: int
    msg: str
    data: KbInfo | None


class ChatchatFile(Shape):
    kb_name: str
    file_name: str
    file_ext: str
    file_version: int
    document_loader: str
    docs_count: int
    text_splitter: str
    create_time: str
    file_mtime: float
    file_size: int
    custom_docs: bool
    in_folder: bool
    in_db: bool
    number: int = Field(alias="No")
    status: str
    error: str | None
    document_id: str


class FileListReply(Shape):
    code: int
    msg: str
    data: list[ChatchatFile]


class FailedFiles(Shape):
    failed_files: dict[str, str] = Field(description="File name -> why it failed.")


class FilesReply(Shape):
    code: int
    msg: str
    data: FailedFiles | None


class ChatchatDocument(Shape):
    id: str
    page_content: str
    metadata: dict[str, Any]
    type: str
    score: float


class RecreateEvent(Shape):
    """One file done (``code`` 200) or failed (500, only ``code`` and ``msg``)."""

    code: int
    msg: str
    total: int | None = None
    finished: int | None = None
    doc: str | None = None
