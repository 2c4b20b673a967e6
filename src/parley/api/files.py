"""OpenAI's Files API, for images: ``POST /v1/files`` (``files.create``), ``GET
/v1/files/{id}`` and ``GET /v1/files/{id}/content`` (the bytes).

Stored are the images of replies, saved when a reply was finished
(``conversations/finishing.py``), and images clients upload: Langchain-Chatchat's
dialogue page uploads one with the OpenAI SDK (``purpose="assistants"``), then sends
``{api}/v1/files/{id}/content`` as a chat's ``image_url``, which the service sends on as
the image itself (``transforms/images.py``, ``inline_own_images``). Both live in the
image store (``ImageSaver``) and are served by both routes.

An upload is ``multipart/form-data`` with ``file`` and ``purpose``, and answers OpenAI's
``FileObject``. Only images are kept (PNG, JPEG, GIF, WebP, BMP, known by their first
bytes, never by the name) of at most the image store's ``max_bytes`` (10 MiB, as reply
images): anything else is a 400, a larger one 413, an upload without Content-Length 411
(its size is checked before it is read). Only purposes an image is uploaded with are
taken (``IMAGE_PURPOSES``); the others (batch, fine-tune, evals) are a 400. Filename and
purpose are not kept: the stored image is the file.

Owner-scoped: another owner's id is a 404 like a missing one. Sent as user-supplied
content is (``api/downloads.py``): sandboxed, never sniffed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse

from parley.api.downloads import download_headers
from parley.api.openapi import answers, multipart_body
from parley.api.state import AppState
from parley.api.uploads import MULTIPART_SLACK, upload_refusal
from parley.errors import InvalidRequest, NotFound, PayloadTooLarge
from parley.transforms.images import KEPT, ImageSaver, sniff_media_type

router = APIRouter(prefix="/v1/files", tags=["files"])

IMAGE_PURPOSES = ("assistants", "vision", "user_data")
"""OpenAI's purposes an image is uploaded with (Chatchat sends ``assistants``)."""
MAX_FILENAME = 255

_IMAGE = {"image/*": {"schema": {"type": "string", "format": "binary"}}}
_UPLOAD_BODY = multipart_body(
    ["file", "purpose"],
    file={"type": "string", "format": "binary"},
    purpose={"type": "string", "enum": list(IMAGE_PURPOSES)},
)


class FileObject(BaseModel):
    """OpenAI's ``FileObject``: an uploaded file."""

    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["processed"]


@router.post(
    "",
    openapi_extra={"requestBody": _UPLOAD_BODY},
    **answers(FileObject, errors=(411, 413)),
)
async def upload_file(request: Request) -> dict[str, Any]:
    """``multipart/form-data``: ``file`` (an image) and ``purpose``; answers a FileObject."""
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    images = state.service.images
    form = await _read_form(request, images.max_bytes)
    try:
        purpose = _purpose(form.get("purpose"))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest(
                "send the image as the multipart/form-data file field 'file'", param="file"
            )
        data = await upload.read(images.max_bytes + 1)
        filename = _filename(upload.filename)
    finally:
        await form.close()
    _check_image(data, images)
    stored = await asyncio.to_thread(images.save_bytes, owner, data)
    return {
        "id": stored.id,
        "object": "file",
        "bytes": stored.size,
        "created_at": int(time.time()),
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
    }


@router.get("/{file_id}", response_class=FileResponse, **answers(content=_IMAGE))
async def get_file(request: Request, file_id: str) -> FileResponse:
    """The image's bytes (Parley's route since reply images; OpenAI's is ``/content``)."""
    return await _serve(request, file_id)


@router.get("/{file_id}/content", response_class=FileResponse, **answers(content=_IMAGE))
async def get_file_content(request: Request, file_id: str) -> FileResponse:
    """OpenAI's ``files.content``: the image's bytes."""
    return await _serve(request, file_id)


async def _serve(request: Request, file_id: str) -> FileResponse:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    found = state.service.images.open_image(owner, file_id)
    if found is None:
        raise NotFound(f"file {file_id!r} not found", param="file_id", code="file_not_found")
    path, media_type = found
    headers = {"Cache-Control": "private, max-age=86400", **download_headers(path.name, media_type)}
    return FileResponse(path, media_type=media_type, headers=headers)


async def _read_form(request: Request, limit: int) -> FormData:
    """The multipart form, its size checked from Content-Length before it is read."""
    content_type = request.headers.get("content-type", "").lower()
    if not content_type.startswith("multipart/form-data"):
        raise InvalidRequest(
            "send the file as multipart/form-data, with fields 'file' and 'purpose'",
            param="file",
            code="invalid_multipart",
        )
    too_large = f"the file is larger than {limit} bytes"
    refusal = upload_refusal(request, limit + MULTIPART_SLACK, too_large, param="file")
    if refusal is not None:
        raise refusal
    try:
        return await request.form(max_files=1, max_fields=10, max_part_size=1024)
    except HTTPException as exc:  # more than one file, or a malformed body
        raise InvalidRequest(str(exc.detail), param="file", code="invalid_multipart") from None


def _purpose(value: UploadFile | str | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(
            f"purpose is required (one of {', '.join(IMAGE_PURPOSES)})", param="purpose"
        )
    purpose = value.strip()
    if purpose not in IMAGE_PURPOSES:
        raise InvalidRequest(
            f"purpose {purpose[:60]!r} is not taken: this server stores only images, "
            f"uploaded with purpose {', '.join(IMAGE_PURPOSES)}",
            param="purpose",
        )
    return purpose


def _check_image(data: bytes, images: ImageSaver) -> None:
    """413 over the store's limit, 400 unless the bytes are a kept image type."""
    if len(data) > images.max_bytes:
        raise PayloadTooLarge(f"the file is larger than {images.max_bytes} bytes", param="file")
    if sniff_media_type(data) is None:
        raise InvalidRequest(
            f"only images are stored: the file is not a {KEPT} image",
            param="file",
            code="unsupported_file",
        )


def _filename(name: str | None) -> str:
    """The upload's name as OpenAI echoes it: without folders or control characters."""
    name = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(char for char in name if char.isprintable()).strip()
    return name[:MAX_FILENAME] or "upload"
