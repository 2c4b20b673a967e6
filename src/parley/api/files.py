"""``GET /v1/files/{id}``: the images of replies, saved as files when a reply was finished
(``conversations/finishing.py``). Owner-scoped: another owner's id is a 404 like a missing
one. Sent as user-supplied content is (``api/downloads.py``): sandboxed, never sniffed."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import FileResponse

from parley.api.downloads import download_headers
from parley.api.openapi import answers
from parley.api.state import AppState
from parley.errors import NotFound

router = APIRouter(prefix="/v1/files", tags=["files"])

_IMAGE = {"image/*": {"schema": {"type": "string", "format": "binary"}}}


@router.get("/{file_id}", response_class=FileResponse, **answers(content=_IMAGE))
async def get_file(request: Request, file_id: str) -> FileResponse:
    state: AppState = request.app.state.parley
    owner = await state.auth.owner(request)
    found = state.service.images.open_image(owner, file_id)
    if found is None:
        raise NotFound(f"file {file_id!r} not found", param="file_id", code="file_not_found")
    path, media_type = found
    headers = {"Cache-Control": "private, max-age=86400", **download_headers(path.name, media_type)}
    return FileResponse(path, media_type=media_type, headers=headers)
