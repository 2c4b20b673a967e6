"""Langchain-Chatchat's image chat over a real server: an image uploaded with the official
OpenAI SDK (``POST /v1/files``, as its dialogue page's ``upload_image_file`` does), read
back (``/v1/files/{id}/content``), then sent as a chat's ``image_url`` of this server,
which must reach the upstream as the image itself (a ``data:`` URL): the upstream could
not fetch a URL of Parley's. Owner-scoped: another key can neither read nor use it.
"""

from __future__ import annotations

import base64
import socket
import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer, api_error

from parley.testing.mock_openai import MockOpenAI
from parley.transforms.images import own_image_id, sniff_media_type

MAX_BYTES = 10 * 2**20
"""The image store's limit (``ImageSaver.max_bytes``)."""


def png(width: int = 2, height: int = 2) -> bytes:
    """A real PNG: red pixels, 8-bit RGB."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def bmp() -> bytes:
    """A 1x1 24-bit BMP (BITMAPINFOHEADER)."""
    pixels = b"\x00\x00\xff\x00"  # one pixel, padded to 4 bytes
    info = struct.pack("<IiiHHIIiiII", 40, 1, 1, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    header = struct.pack("<2sIHHI", b"BM", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return header + info + pixels


PNG = png()


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("files"), server_config(upstream)) as running:
        yield running


@pytest.fixture(scope="module")
def keys(server: ParleyServer) -> dict[str, str]:
    return {owner: server.create_key(owner) for owner in ("alice", "bob")}


def files_client(server: ParleyServer, key: str) -> openai.OpenAI:
    """The dialogue page's upload client (``base_url={api}/v1``)."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def chat_client(server: ParleyServer, key: str) -> openai.OpenAI:
    """The dialogue page's chat client (``base_url={api}/chat``)."""
    return openai.OpenAI(base_url=f"{server.url}/chat", api_key=key, max_retries=0)


def upload(
    server: ParleyServer, key: str, data: bytes = PNG, name: str = "pic.png"
) -> dict[str, Any]:
    created = files_client(server, key).files.create(file=(name, data), purpose="assistants")
    return created.to_dict()


def vision_chat(server: ParleyServer, key: str, url: str) -> openai.types.chat.ChatCompletion:
    """The dialogue page's multimodal chat: not streamed, its ``extra_body`` as it sends it."""
    content = [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    return chat_client(server, key).chat.completions.create(
        model="fast",
        messages=[{"role": "user", "content": content}],  # type: ignore[list-item]
        stream=False,
        extra_body={
            "metadata": {"images": [], "videos": [], "audios": []},
            "chat_model_config": {"llm_model": {"fast": {"temperature": 0.7}}},
            "conversation_id": uuid.uuid4().hex,
            "tool_input": {},
            "upload_image": {"object": "file", "id": own_image_id(url)},
        },
    )


def sent_images(upstream: MockOpenAI) -> list[str]:
    """The image URLs of every request the upstream received."""
    return [
        item["image_url"]["url"]
        for request in upstream.requests
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for item in message["content"]
        if item.get("type") == "image_url"
    ]


def test_an_uploaded_image_is_a_file_object_and_reads_back(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    created = upload(server, keys["alice"])
    assert created["id"].startswith("img_")
    assert created["object"] == "file"
    assert created["bytes"] == len(PNG)
    assert created["filename"] == "pic.png"
    assert created["purpose"] == "assistants"
    assert created["status"] == "processed"
    assert isinstance(created["created_at"], int)
    assert created["created_at"] > 1_700_000_000
    # OpenAI's content route, through the SDK, and Parley's own route
    assert files_client(server, keys["alice"]).files.content(created["id"]).content == PNG
    with server.client(keys["alice"]) as http:
        response = http.get(f"/files/{created['id']}")
    assert response.status_code == 200
    assert response.content == PNG
    assert response.headers["content-type"] == "image/png"


def test_the_name_does_not_decide_the_type(server: ParleyServer, keys: dict[str, str]) -> None:
    created = upload(server, keys["alice"], bmp(), name="picture.png")
    with server.client(keys["alice"]) as http:
        response = http.get(f"/files/{created['id']}/content")
    assert response.status_code == 200
    assert response.content == bmp()
    assert response.headers["content-type"] == "image/bmp"


def test_the_dialogue_pages_vision_chat_sends_the_image_itself(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    created = upload(server, keys["alice"])
    upstream.queue_text("A red square.")
    reply = vision_chat(server, keys["alice"], f"{server.url}/v1/files/{created['id']}/content")
    assert reply.choices[0].message.content == "A red square."
    expected = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert sent_images(upstream) == [expected]


def test_any_host_and_parleys_own_path_name_the_same_file(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    """Matched by path: the page may reach the server as 127.0.0.1 or a public name."""
    file_id = upload(server, keys["alice"])["id"]
    expected = "data:image/png;base64," + base64.b64encode(PNG).decode()
    upstream.queue_text("Red.")
    vision_chat(server, keys["alice"], f"https://chat.example.org/v1/files/{file_id}/content")
    upstream.queue_text("Red again.")
    client = files_client(server, keys["alice"])
    content = [{"type": "image_url", "image_url": {"url": f"/v1/files/{file_id}"}}]
    client.chat.completions.create(model="fast", messages=[{"role": "user", "content": content}])  # type: ignore[list-item,misc]
    assert sent_images(upstream) == [expected, expected]


def test_another_key_can_neither_read_nor_use_the_file(
    server: ParleyServer, keys: dict[str, str], upstream: MockOpenAI
) -> None:
    file_id = upload(server, keys["alice"])["id"]
    bob = files_client(server, keys["bob"])
    with pytest.raises(openai.NotFoundError):
        bob.files.content(file_id)
    with server.client(keys["bob"]) as http:
        assert api_error(http.get(f"/files/{file_id}"), 404)["code"] == "file_not_found"
    url = f"{server.url}/v1/files/{file_id}/content"
    with pytest.raises(openai.BadRequestError) as refused:
        vision_chat(server, keys["bob"], url)
    assert url in refused.value.message
    missing = f"{server.url}/v1/files/img_0123456789abcdef/content"
    with pytest.raises(openai.BadRequestError) as refused:
        vision_chat(server, keys["alice"], missing)
    assert missing in refused.value.message
    assert upstream.requests == []  # neither reached the model


def test_a_text_file_or_another_purpose_is_a_400(
    server: ParleyServer, keys: dict[str, str]
) -> None:
    client = files_client(server, keys["alice"])
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("notes.png", b"just some text\n"), purpose="assistants")
    assert "only images are stored" in refused.value.message
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("data.jsonl", PNG), purpose="fine-tune")
    assert "stores only images" in refused.value.message
    with server.client(keys["alice"]) as http:
        error = api_error(http.post("/files", data={"purpose": "assistants"}), 400)
        assert error["param"] == "file"
        error = api_error(http.post("/files", json={"purpose": "assistants"}), 400)
        assert "multipart/form-data" in error["message"]


def test_an_image_over_the_limit_is_a_413(server: ParleyServer, keys: dict[str, str]) -> None:
    client = files_client(server, keys["alice"])
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("big.png", PNG + b"\x00" * MAX_BYTES), purpose="assistants")
    assert refused.value.status_code == 413
    # far over it: refused from its Content-Length, before a byte of the body is sent
    head = (
        "POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {keys['alice']}\r\n"
        "Content-Type: multipart/form-data; boundary=x\r\n"
        f"Content-Length: {3 * MAX_BYTES}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode())
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_own_urls_are_known_by_their_path() -> None:
    file_id = "img_0123456789abcdef"
    for url in (
        f"http://127.0.0.1:8000/v1/files/{file_id}/content",
        f"https://chat.example.org/parley/v1/files/{file_id}",
        f"/v1/files/{file_id}/content?download=1",
    ):
        assert own_image_id(url) == file_id, url
    for url in (
        "https://api.openai.com/v1/files/file-abc123/content",
        f"ftp://example.org/v1/files/{file_id}",
        f"//example.org/v1/files/{file_id}",
        f"https://example.org/v1/files/{file_id}/content/more",
        "data:image/png;base64,AAAA",
    ):
        assert own_image_id(url) is None, url


def test_bmp_is_sniffed_by_its_header() -> None:
    assert sniff_media_type(bmp()) == "image/bmp"
    assert sniff_media_type(b"BM" + b"\x00" * 30) is None  # "BM" alone is not a bitmap


def test_a_chunked_upload_is_a_411(server: ParleyServer, keys: dict[str, str]) -> None:
    def body() -> Iterator[bytes]:
        yield b"--x\r\n"

    headers = {"content-type": "multipart/form-data; boundary=x"}
    with server.client(keys["alice"]) as http:
        response = http.post("/files", headers=headers, content=body())
    assert api_error(response, 411)["code"] == "length_required"
