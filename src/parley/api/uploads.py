"""The gate in front of every multipart upload (knowledge bases, files, Chatchat's two
upload routes): its size is checked from ``Content-Length`` before a byte of it is read,
so an upload that is too large, or of a size nobody can know (chunked), costs nothing.

What does not belong here: reading the form and its files (each route's own), the
limits themselves (``settings.knowledge``, ``settings.files``).
"""

from __future__ import annotations

from fastapi import Request

from parley.errors import InvalidRequest, PayloadTooLarge
from parley.settings.knowledge import KnowledgeSettings

MULTIPART_SLACK = 64 * 1024
"""Per-file allowance for multipart headers when checking Content-Length up front."""
LENGTH_REQUIRED = (
    "send the upload with a Content-Length header (its size is checked before it is read)"
)


class LengthRequired(InvalidRequest):
    """An upload sent without Content-Length (chunked), whose size cannot be checked."""

    status = 411
    code = "length_required"


def uploads_bound(settings: KnowledgeSettings) -> int:
    """The largest knowledge upload: the most files, each of the largest size."""
    return settings.max_files_per_upload * (settings.max_upload_bytes + MULTIPART_SLACK)


def too_many_bytes(settings: KnowledgeSettings) -> str:
    return (
        f"the request is larger than {settings.max_files_per_upload} files of "
        f"{settings.max_upload_bytes} bytes"
    )


def upload_refusal(
    request: Request, bound: int, too_large: str, *, param: str
) -> LengthRequired | PayloadTooLarge | None:
    """Why the upload is refused before it is read (None: it may be read): no
    Content-Length (411), or more than ``bound`` bytes (413, ``too_large``)."""
    declared = request.headers.get("content-length", "")
    if not declared.isdigit():  # chunked: its size could not be checked before reading
        return LengthRequired(LENGTH_REQUIRED, param=param)
    if int(declared) > bound:
        return PayloadTooLarge(too_large, param=param)
    return None
