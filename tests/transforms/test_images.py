"""Inline base64 images saved as files: validation, owner scoping, Markdown rewriting."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from parley.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from parley.transforms.images import ImageSaver, rewrite_markdown_images, sniff_media_type

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
JPEG = b"\xff\xd8\xff\xe0" + b"\x01" * 20
GIF = b"GIF89a" + b"\x02" * 10
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x03" * 8


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@pytest.fixture
def saver(tmp_path: Path) -> ImageSaver:
    return ImageSaver(tmp_path / "images", "/v1/images/", max_bytes=1000)


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("data", "media_type", "ext"),
    [(PNG, "image/png", "png"), (JPEG, "image/jpeg", "jpg"), (GIF, "image/gif", "gif"),
     (WEBP, "image/webp", "webp")],
)  # fmt: skip
def test_an_image_is_saved_under_a_server_made_name(
    saver: ImageSaver, tmp_path: Path, data: bytes, media_type: str, ext: str
) -> None:
    image = saver.save_data_url("alice", data_url(data, media_type))
    assert image.id.startswith("img_")
    assert image.url == f"/v1/images/{image.id}"
    assert image.media_type == media_type
    assert image.size == len(data)
    assert image.path.name == f"{image.id}.{ext}"
    assert image.path.read_bytes() == data
    assert files_under(tmp_path) == [image.path]  # no temporary file left behind
    assert saver.open_image("alice", image.id) == (image.path, media_type)


def test_the_content_decides_the_type_not_the_declaration(saver: ImageSaver) -> None:
    image = saver.save_data_url("alice", data_url(PNG, "IMAGE/JPG"))
    assert image.media_type == "image/png"
    assert image.path.suffix == ".png"


def test_lenient_base64_is_accepted(saver: ImageSaver) -> None:
    encoded = base64.b64encode(PNG).decode().rstrip("=")
    spaced = "\n".join(encoded[i : i + 8] for i in range(0, len(encoded), 8))
    image = saver.save_data_url("alice", f"data:image/png;base64,{spaced}")
    assert image.path.read_bytes() == PNG


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("https://example.com/a.png", InvalidRequest),
        ("data:image/png,rawbytes", InvalidRequest),
        ("data:image/png;base64,not*base64!", InvalidRequest),
        ("data:image/png;base64,AAAAA", InvalidRequest),
        (data_url(PNG, "image/svg+xml"), UnsupportedMediaType),
        (data_url(PNG, "text/html"), UnsupportedMediaType),
        (data_url(b"<svg onload=alert(1)>", "image/png"), UnsupportedMediaType),
        (data_url(PNG + b"\x00" * 1000), PayloadTooLarge),
        (data_url(PNG + b"\x00" * 5000), PayloadTooLarge),
    ],
)
def test_invalid_images_are_refused(
    saver: ImageSaver, tmp_path: Path, url: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        saver.save_data_url("alice", url)
    assert files_under(tmp_path) == []


def test_images_are_scoped_to_their_owner(saver: ImageSaver, tmp_path: Path) -> None:
    image = saver.save_data_url("alice", data_url(PNG))
    assert saver.open_image("bob", image.id) is None
    assert saver.open_image("alice", "img_00000000000000000000000000") is None


@pytest.mark.parametrize(
    "image_id", ["", "../x", "img_../../etc/passwd", "IMG_ABC", "img_abc.png", "img_abc/", "img_"]
)
def test_ids_not_made_here_are_missing(saver: ImageSaver, image_id: str) -> None:
    assert saver.open_image("alice", image_id) is None


def test_an_owner_cannot_name_a_folder(saver: ImageSaver, tmp_path: Path) -> None:
    image = saver.save_data_url("../../evil/..", data_url(PNG))
    assert image.path.parent.parent == tmp_path / "images"
    assert saver.open_image("../../evil/..", image.id) == (image.path, "image/png")


def test_a_failed_write_leaves_nothing(
    saver: ImageSaver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        saver.save_data_url("alice", data_url(PNG))
    assert files_under(tmp_path) == []
    # the finish transform keeps the image inline rather than failing the reply
    text = f"![x]({data_url(PNG)})"
    assert rewrite_markdown_images(text, saver, "alice") == text


def test_markdown_images_are_saved_and_linked(saver: ImageSaver, tmp_path: Path) -> None:
    png, gif = data_url(PNG), data_url(GIF, "image/gif")
    bad = "data:image/png;base64,@@@@"
    text = (
        f'Here: ![a chart]({png} "Title") and ![]({gif}).\n'
        f"Again ![same]({png}), broken ![b]({bad}), "
        f"and not an image ![t](data:text/plain;base64,aGk=) or a link [l]({png})."
    )
    out = rewrite_markdown_images(text, saver, "alice")
    saved = files_under(tmp_path)
    assert len(saved) == 2  # the repeated image is saved once
    png_url = f"/v1/images/{next(p.stem for p in saved if p.suffix == '.png')}"
    gif_url = f"/v1/images/{next(p.stem for p in saved if p.suffix == '.gif')}"
    assert out == (
        f'Here: ![a chart]({png_url} "Title") and ![]({gif_url}).\n'
        f"Again ![same]({png_url}), broken ![b]({bad}), "
        f"and not an image ![t](data:text/plain;base64,aGk=) or a link [l]({png})."
    )


def test_text_without_inline_images_is_unchanged(saver: ImageSaver, tmp_path: Path) -> None:
    text = "![remote](https://example.com/a.png) and plain words"
    assert rewrite_markdown_images(text, saver, "alice") == text
    assert not (tmp_path / "images").exists()


def test_sniffing() -> None:
    assert sniff_media_type(PNG) == "image/png"
    assert sniff_media_type(WEBP) == "image/webp"
    assert sniff_media_type(b"RIFF\x00\x00\x00\x00WAVE") is None
    assert sniff_media_type(b"") is None
