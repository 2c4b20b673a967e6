"""The fingerprint of a request sent with an Idempotency-Key: the same however the body
arrives in chunks, the same for a multipart body under a new boundary, and different
when anything a server would read differs."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message

from parley.api.idempotency import _Body


def _fingerprint(body: bytes, cuts: list[int], content_type: str, **scope: Any) -> str:
    points = sorted({min(c, len(body)) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    messages: list[Message] = [
        {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1}
        for i, p in enumerate(pieces)
    ]

    async def receive() -> Message:
        return messages.pop(0)

    request = {
        "type": "http",
        "method": "POST",
        "path": "/v1/knowledge_bases/kb/documents",
        "query_string": b"",
        "headers": [(b"content-type", content_type.encode())],
        **scope,
    }
    read = asyncio.run(_Body.read(request, receive, 10**9))
    assert read is not None
    read.close()
    return read.fingerprint


def _multipart(boundary: str, payload: bytes) -> bytes:
    b = boundary.encode()
    return (
        b"--" + b + b'\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n'
        b"Content-Type: text/plain\r\n\r\n" + payload + b"\r\n--" + b + b"--\r\n"
    )


@given(
    payload=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 500), max_size=8),
    other_cuts=st.lists(st.integers(0, 500), max_size=8),
    boundaries=st.tuples(
        st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=8, max_size=40),
        st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=8, max_size=40),
    ),
)
def test_multipart_bodies_match_under_any_boundary_and_chunking(
    payload: bytes, cuts: list[int], other_cuts: list[int], boundaries: tuple[str, str]
) -> None:
    one, two = boundaries
    first = _fingerprint(_multipart(one, payload), cuts, f"multipart/form-data; boundary={one}")
    again = _fingerprint(
        _multipart(two, payload), other_cuts, f'multipart/form-data; boundary="{two}"'
    )
    assert first == again


@given(body=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=8))
def test_json_bodies_match_however_they_arrive(body: bytes, cuts: list[int]) -> None:
    assert _fingerprint(body, cuts, "application/json") == _fingerprint(
        body, [], "application/json"
    )


def test_what_a_server_reads_changes_the_fingerprint() -> None:
    base = _fingerprint(b'{"a": 1}', [], "application/json")
    assert _fingerprint(b'{"a": 2}', [], "application/json") != base
    assert _fingerprint(b'{"a": 1}', [], "text/plain") != base
    assert _fingerprint(b'{"a": 1}', [], "application/json", method="PATCH") != base
    assert _fingerprint(b'{"a": 1}', [], "application/json", path="/v1/other") != base
    assert _fingerprint(b'{"a": 1}', [], "application/json", query_string=b"x=1") != base
    one = _fingerprint(_multipart("b1", b"x"), [], "multipart/form-data; boundary=b1")
    two = _fingerprint(_multipart("b2", b"y"), [], "multipart/form-data; boundary=b2")
    assert one != two
