"""``POST /v1/embeddings``: OpenAI's embeddings API, served by the knowledge embedder
(``knowledge.embedder``: multilingual-e5-small by default, MiniLM, or an OpenAI-compatible
endpoint), so that LangChain's ``OpenAIEmbeddings``, the official SDKs and the rest can
embed with Parley's model.

As OpenAI's:

- ``input`` a string or a list of up to ``MAX_INPUTS`` strings (none empty); vectors in
  ``data`` in the inputs' order, ``index`` each;
- ``encoding_format`` ``float`` (lists) or ``base64`` (the little-endian float32 bytes:
  what the official Python SDK asks for and decodes by itself);
- ``dimensions``: the model's own only (these models were not trained to be cut: a
  shorter vector would be a worse one), else 400;
- ``model``: the embedder's id (``GET /v1/models`` does not list it: it is not a chat
  model), else 404 naming it;
- ``usage``: the tokens the model reads, by its own tokenizer (an OpenAI-compatible
  embedder: about four characters a token).

Not served: token arrays as ``input`` (the ids of OpenAI's tokenizers, which are not
this model's): 400 saying so; LangChain sends them unless told not to
(``OpenAIEmbeddings(check_embedding_ctx_length=False)``). The vectors are those the
knowledge bases are searched with (queries: e5's ``query:`` prefix).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import httpx
import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from parley.api.openapi import answers
from parley.api.shapes import Shape
from parley.api.state import AppState
from parley.errors import InvalidRequest, NotFound
from parley.knowledge.embeddings import OnnxEmbedder
from parley.knowledge.types import Embedder, EmbeddingError

router = APIRouter(tags=["embeddings"])

MAX_INPUTS = 2_048
"""OpenAI's limit on the inputs of one request."""
MAX_INPUT_CHARS = 32_768
"""The longest input taken (the models read its first 256-512 tokens)."""

Texts = list[Annotated[str, Field(max_length=MAX_INPUT_CHARS)]]
Tokens = list[Annotated[int, Field(ge=0)]]


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI's further fields (user, ...) pass

    input: Annotated[str, Field(max_length=MAX_INPUT_CHARS)] | Texts | Tokens | list[Tokens]
    model: str = Field(max_length=200)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)


class Embedding(Shape):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class EmbeddingsUsage(Shape):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(Shape):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingsUsage


@router.post("/v1/embeddings", **answers(EmbeddingList, errors=(404, 502)))
async def create_embeddings(request: Request, body: EmbeddingsRequest) -> dict[str, Any]:
    """Embed the inputs with the server's knowledge embedder."""
    state: AppState = request.app.state.parley
    embedder = _embedder(state, body.model)
    texts = _texts(body.input)
    if body.dimensions is not None and body.dimensions != embedder.dimensions:
        raise InvalidRequest(
            f"{embedder.model} makes vectors of {embedder.dimensions} dimensions only",
            param="dimensions",
        )
    try:
        vectors = await embedder.embed(texts)
        tokens = await count_tokens(embedder, texts)
    except httpx.HTTPError as exc:
        raise EmbeddingError(f"the inputs could not be embedded: {exc}") from exc
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": n, "embedding": _encoded(row, body.encoding_format)}
            for n, row in enumerate(vectors)
        ],
        "model": embedder.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _embedder(state: AppState, model: str) -> Embedder:
    embedder = state.knowledge.embedder if state.knowledge is not None else None
    if embedder is None:
        why = "knowledge bases are off" if state.knowledge is None else "knowledge.embedder: none"
        raise NotFound(
            f"this server has no embedding model ({why})", param="model", code="model_not_found"
        )
    if model != embedder.model:
        raise NotFound(
            f"no embedding model {model!r}: this server embeds with {embedder.model!r}",
            param="model",
            code="model_not_found",
        )
    return embedder


def _texts(given: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    texts = [given] if isinstance(given, str) else given
    if not texts:
        raise InvalidRequest("input must not be empty", param="input")
    if len(texts) > MAX_INPUTS:
        raise InvalidRequest(f"at most {MAX_INPUTS} inputs in one request", param="input")
    if not all(isinstance(text, str) for text in texts):
        raise InvalidRequest(
            "input as token ids is not supported: they are ids of OpenAI's tokenizers, not "
            "of this model's; send the texts (LangChain: OpenAIEmbeddings("
            "check_embedding_ctx_length=False))",
            param="input",
            code="unsupported_value",
        )
    strings = [text for text in texts if isinstance(text, str)]
    if any(not text for text in strings):
        raise InvalidRequest("an input is an empty string", param="input")
    return strings


def _encoded(row: np.ndarray[Any, Any], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode("ascii")
    values: list[float] = np.asarray(row, dtype=np.float32).tolist()
    return values


async def count_tokens(embedder: Embedder, texts: list[str]) -> int:
    """The inputs' tokens by a local model's tokenizer; else about four characters each."""
    if isinstance(embedder, OnnxEmbedder):
        return await embedder.count_tokens(texts)
    return sum(max(1, (len(text) + 3) // 4) for text in texts)
