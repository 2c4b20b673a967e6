"""``OpenAIEmbedder``: an OpenAI-compatible ``POST {base_url}/embeddings`` as an embedder.

Its ``model`` names the endpoint's host as well as the model (``openai/HOST/MODEL``, with
``@DIMENSIONS`` when they are asked for), since the same model name on two servers need
not give the same vectors; ``model_id`` overrides it. It asks for base64 float32 vectors
(lists of numbers are accepted too) and decodes an answer of more than ``THREAD_BATCH``
vectors on a worker thread, off the event loop. Errors never carry the key.

What does not belong here: the local models and the vector helpers (``embeddings.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson

from parley.knowledge.embeddings import _valid
from parley.knowledge.types import EmbeddingError

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors


THREAD_BATCH = 8
"""An answer with more vectors than this is decoded and normalised on a worker thread."""
_MAX_ERROR_DETAIL = 300
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key)[-_][\w*.\-]{4,}", re.IGNORECASE)


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint, ``batch_size`` texts per request.

    ``dimensions``, when given, is sent (for models that can shorten their vectors) and
    every answer must have it; otherwise it is learnt from the first answer and is 0
    until then. Vectors are normalised here whatever the endpoint returns. Failures
    raise ``EmbeddingError``; no message holds the API key."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        api_key: str | None,
        model: str,
        *,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        model_id: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be positive")
        self._client = client
        self._url = base_url.rstrip("/") + "/embeddings"
        url = httpx.URL(base_url)
        self._host = url.host + (f":{url.port}" if url.port else "")
        self._api_key = api_key or None
        self._name = model
        self._configured = dimensions
        self._dimensions = dimensions or 0
        self._batch_size = batch_size
        self._timeout = timeout
        suffix = f"@{dimensions}" if dimensions else ""
        self._model_id = model_id or f"openai/{self._host}/{model}{suffix}"

    @property
    def model(self) -> str:
        return self._model_id

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> Vectors:
        parts = [
            await self._request(list(texts[start : start + self._batch_size]))
            for start in range(0, len(texts), self._batch_size)
        ]
        if not parts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    async def _request(self, texts: list[str]) -> Vectors:
        # OpenAI refuses an empty string as an input; a space embeds the same nothing.
        body: dict[str, Any] = {
            "model": self._name,
            "input": [_valid(t) or " " for t in texts],
            # base64 float32: a quarter of the JSON, and no float parsing (a server that
            # ignores it answers lists of numbers, which are accepted too)
            "encoding_format": "base64",
        }
        if self._configured:
            body["dimensions"] = self._configured
        headers = {"content-type": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        try:
            response = await self._client.post(
                self._url, content=orjson.dumps(body), headers=headers, timeout=self._timeout
            )
        except httpx.TimeoutException:
            raise self._error(f"did not answer within {self._timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise self._error(f"could not be reached ({type(exc).__name__})") from None
        if response.status_code in (401, 403):
            raise self._error(f"rejected the API key (HTTP {response.status_code})")
        if response.status_code != 200:
            detail = _error_detail(response.content)
            raise self._error(f"answered HTTP {response.status_code}: {detail}")
        if len(texts) > THREAD_BATCH:  # decoding a large answer takes tens of ms
            return await asyncio.to_thread(self._decode, response.content, len(texts))
        return self._decode(response.content, len(texts))

    def _decode(self, content: bytes, count: int) -> Vectors:
        try:
            answer = orjson.loads(content)
        except orjson.JSONDecodeError:
            raise self._error("answered with malformed JSON") from None
        return self._vectors(answer, count)

    def _vectors(self, answer: object, count: int) -> Vectors:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise self._error("answered without a list of embeddings ('data')")
        if len(data) != count:
            raise self._error(f"returned {len(data)} embeddings for {count} inputs")
        rows: list[object] = [None] * count
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise self._error("returned an item without an 'embedding'")
            index = item.get("index", position)
            if type(index) is not int or not 0 <= index < count or rows[index] is not None:
                raise self._error(f"returned an embedding with a bad index ({index!r})")
            rows[index] = item["embedding"]
        try:
            values = [_floats(row) for row in rows]
        except (TypeError, ValueError):
            raise self._error("returned embeddings that are not lists of numbers") from None
        widths = {len(row) for row in values}
        if len(widths) != 1 or 0 in widths:
            raise self._error(f"returned embeddings of differing or no dimensions {sorted(widths)}")
        width = widths.pop()
        expected = self._dimensions
        if expected and width != expected:
            raise self._error(f"returned vectors of {width} dimensions, expected {expected}")
        matrix = np.array(values, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise self._error("returned a zero or non-finite vector")
        self._dimensions = width
        unit: Vectors = (matrix / norms).astype(np.float32)
        return unit

    def _error(self, what: str) -> EmbeddingError:
        message = f"the embedding endpoint {self._host} ({self._name}) {what}"
        return EmbeddingError(_redact(message, self._api_key))


def _floats(value: object) -> Sequence[float] | npt.NDArray[np.float32]:
    """An embedding as given: a list of numbers, or base64 float32 (``encoding_format``
    "base64")."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise ValueError("not base64") from None
        if len(raw) % 4:
            raise ValueError("not float32")
        return np.frombuffer(raw, dtype="<f4")
    if not isinstance(value, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise TypeError("not a list of numbers")
    return value


def _error_detail(body: bytes) -> str:
    """The message of an upstream error body, shortened."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", errors="replace")
    else:
        error = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(error, dict):
            error = error.get("message", error)
        text = error if isinstance(error, str) else orjson.dumps(error).decode()
    text = " ".join(text.split())
    if len(text) > _MAX_ERROR_DETAIL:
        text = text[: _MAX_ERROR_DETAIL - 1] + "…"
    return text or "(empty body)"


def _redact(text: str, api_key: str | None) -> str:
    """``text`` without the key, nor anything shaped like a (masked) key."""
    if api_key:
        text = text.replace(api_key, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)
