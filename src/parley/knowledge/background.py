"""What "nothing matches" means by vector: a chunk is a match only when it is nearer the
question than generic text is.

multilingual-e5-small gives a question a cosine of 0.75-0.85 with every chunk of a base,
whatever it asks: on figure 14's corpus an off-topic question ("What is the capital of
France?") scored 0.81 at the median against its best chunk, an answerable one 0.84 against
its answer, and no fixed cosine told them apart. What does tell them apart is a
comparison with text that is about nothing in particular: ``background.json`` (240
generic passages in English and Chinese, written for Parley: everyday subjects, general
knowledge, small talk, requests; no evaluation question was seen writing them). A chunk is
kept when its cosine is at least the mean of the question's three best background
cosines in the chunk's own script (``lexical.script``: a question is nearer every passage
in its own language), plus ``MARGINS[model]``.

Measured on figure 14 (``bench/quality.py``), margin -0.03 chosen on its questions so
that 95% of the answers stay: of its 25 off-topic questions 64% then find no chunk by
vector, of the 30 held out 77%, with every held-out answer kept. Questions on a near
topic that no document answers (``unanswerable``) are not told apart this way: they are
as near the base as a paraphrase is.

The passages' vectors are shipped (``background-e5.npy``, float16, made by ``build``):
embedding them takes about 8 s on 2 cores, at every start of every data directory. A
test checks them against the model. Other models have no margin: no cut.

What does not belong here: the vector search (``vectors.py``) applies the floors.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import orjson

from parley.knowledge import lexical
from parley.knowledge.e5 import E5_MODEL_ID

if TYPE_CHECKING:
    from parley.knowledge.e5 import E5Embedder

HERE = Path(__file__).parent
PASSAGES = HERE / "background.json"
VECTORS = {E5_MODEL_ID: HERE / "background-e5.npy"}
"""Each model's shipped vectors of ``PASSAGES`` (in their order)."""
MARGINS = {E5_MODEL_ID: -0.03}
"""How much nearer than background text a chunk must be, per model (see the module)."""
TOP = 3
"""The background cosines averaged: the best few, not the single best (one passage on
the question's very subject, "the capital of Canada", would set the bar too high)."""

Floors = tuple[float, float]
"""The least cosine a chunk of each script needs: (``lexical.LATIN``, ``lexical.CJK``)."""


def passages() -> list[str]:
    data = orjson.loads(PASSAGES.read_bytes())
    return [str(item["text"]) for item in data["passages"]]


@functools.cache
def _matrix(model: str) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int8]] | None:
    path = VECTORS.get(model)
    if path is None or model not in MARGINS:
        return None
    vectors = np.load(path).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scripts = np.array([lexical.script(text) for text in passages()], dtype=np.int8)
    if len(scripts) != len(vectors):
        raise RuntimeError(f"{path.name} holds {len(vectors)} vectors for {len(scripts)} passages")
    return vectors, scripts


def floors(model: str, query: npt.NDArray[np.float32]) -> Floors | None:
    """Per script, the least cosine a chunk must have with ``query`` (made by ``model``)
    to be a match; None for a model without a margin (every chunk may match)."""
    found = _matrix(model)
    if found is None:
        return None
    vectors, scripts = found
    unit = np.asarray(query, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(unit))
    if norm == 0.0 or len(unit) != vectors.shape[1]:
        return None
    cosines = vectors @ (unit / norm)
    margin = MARGINS[model]

    def floor(script: int) -> float:
        own = np.sort(cosines[scripts == script])[-TOP:]
        return float(own.mean()) + margin

    return floor(lexical.LATIN), floor(lexical.CJK)


async def build(embedder: E5Embedder, path: Path) -> None:
    """Embed ``PASSAGES`` with ``embedder`` (as passages) into ``path`` (float16)."""
    vectors = await embedder.for_indexing().embed(passages())
    np.save(path, np.asarray(vectors, dtype=np.float16))
