"""Input transformers over HTTP: documents attached as OpenAI file parts reach the model
as text; images for a model that cannot read them are read by ``chat.ocr_model`` (or
left, with a note). The stored conversation keeps what the client sent."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()


def start(upstream: MockOpenAI, folder: Any, **chat: Any) -> ParleyServer:
    config = server_config(
        upstream,
        models={
            "fast": {"provider": "mock", "model": "mock-model"},
            "blind": {"provider": "mock", "model": "mock-model", "vision": False},
            "reader": {"provider": "mock", "model": "mock-large"},
        },
        chat=chat,
    )
    return ParleyServer(folder, config)


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with start(upstream, tmp_path_factory.mktemp("ocr"), ocr_model="reader") as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer, upstream: MockOpenAI) -> Iterator[openai.OpenAI]:
    upstream.reset()
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as c:
        yield c


def test_a_document_goes_to_the_model_as_text_and_stays_a_file(
    client: openai.OpenAI, upstream: MockOpenAI, server: ParleyServer
) -> None:
    note = base64.b64encode(b"Meeting moved to Thursday, room 4.").decode()
    upstream.queue_text("Thursday.")
    reply = client.chat.completions.create(
        model="fast",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "When is the meeting?"},
                    {
                        "type": "file",
                        "file": {
                            "filename": "memo.txt",
                            "file_data": f"data:text/plain;base64,{note}",
                        },
                    },
                ],
            }
        ],
    )
    assert reply.choices[0].message.content == "Thursday."
    sent = str(upstream.requests[-1]["messages"][-1]["content"])
    assert "Meeting moved to Thursday, room 4." in sent
    assert "memo.txt" in sent
    cid = (reply.model_extra or {})["parley"]["conversation_id"]
    stored = httpx.get(f"{server.url}/v1/conversations/{cid}").json()["messages"][0]
    assert [p["kind"] for p in stored["parts"]] == ["text", "file"]


def test_images_for_a_blind_model_are_read_by_the_ocr_model(
    client: openai.OpenAI, upstream: MockOpenAI
) -> None:
    upstream.route_text("Transcribe", "INVOICE 42, total 99 EUR")
    upstream.queue_text("It is invoice 42.")
    image_message = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": PNG}},
            ],
        }
    ]
    reply = client.chat.completions.create(model="blind", messages=image_message)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "It is invoice 42."
    ocr, chat = upstream.requests
    assert ocr["model"] == "mock-large"
    assert ocr["messages"][0]["content"][1]["image_url"]["url"] == PNG
    sent = str(chat["messages"][-1]["content"])
    assert "INVOICE 42, total 99 EUR" in sent
    assert "image_url" not in sent  # the image itself did not go to the blind model
    # a model that reads images gets the image itself
    upstream.queue_text("A picture.")
    client.chat.completions.create(model="fast", messages=image_message)  # type: ignore[arg-type]
    assert "image_url" in str(upstream.requests[-1]["messages"][-1]["content"])


def test_without_an_ocr_model_the_reply_says_why(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    upstream.reset()
    with start(upstream, tmp_path_factory.mktemp("no-ocr")) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        upstream.queue_text("I cannot see it.")
        reply = client.chat.completions.create(
            model="blind",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": PNG}},
                    ],
                }
            ],
        )
        notes = (reply.model_extra or {})["parley"]["notes"]
        assert any("OCR" in note for note in notes)
