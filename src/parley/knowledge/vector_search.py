"""What the two vector indexes share: ``vectors.VectorIndexes`` (matrices in memory,
SQLite's) and ``pgvector.PgVectorIndexes`` (PostgreSQL's) answer ``VectorSearch``, take
their query through ``unit_query``, and rescale a cross-lingual model's cosines by script
the same way.

A cross-lingual model (``CROSS_LINGUAL``) gives a question a higher cosine with every
chunk in its own language than with any chunk in the other: with multilingual-e5-small,
English questions whose answer is in a Chinese document found it at rank 4 to 21 among
30 (figure 14's corpus). For those models a base's chunks are compared within their
script (``lexical.script``, stored per chunk): each script's cosines are standardised and
put back on the scale of the whole base (mean and spread), so that the best chunk of
each language competes on how far it stands out of its own language. Cross-language
recall@6 went from .50 to 1.0 on figure 14's questions and on its held-out set, with
Chinese paraphrase MRR .90 -> .74 the cost. A base in one script is searched as before.

What does not belong here: either index's storage and search (``vectors.py``,
``pgvector.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from parley.knowledge.background import Floors
from parley.knowledge.e5 import E5_MODEL_ID
from parley.knowledge.types import KbRef

if TYPE_CHECKING:
    from parley.knowledge.types import Vectors

CROSS_LINGUAL = frozenset({E5_MODEL_ID})
"""Models whose chunks are compared within their script (see the module)."""
MIN_SCRIPT_ROWS = 8
"""A script with fewer chunks than this in a base is left as it is: too few to say how
its cosines spread."""


def unit_query(vector: Vectors) -> npt.NDArray[np.float32] | None:
    """``vector`` as a flat float32 unit vector; None when it has no direction (zero,
    or not finite): nothing is near it."""
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(query))
    if not math.isfinite(norm) or norm == 0.0:
        return None
    unit: npt.NDArray[np.float32] = query / norm
    return unit


class VectorSearch(Protocol):
    """What knowledge needs of a vector index: ``VectorIndexes`` (in memory, SQLite's)
    and ``pgvector.PgVectorIndexes`` (PostgreSQL's)."""

    @property
    def nbytes(self) -> int: ...

    def cached(self, owner: str, kb_id: str) -> tuple[int, int] | None: ...

    async def search(
        self,
        owner: str,
        kbs: Sequence[KbRef],
        model: str,
        vector: Vectors,
        limit: int,
        *,
        floors: Floors | None = None,
    ) -> list[tuple[int, float]]: ...

    def document_ready(self, kb_id: str, version: int, document_id: str) -> None: ...

    def forget_document(self, kb_id: str, document_id: str) -> None: ...

    def forget_base(self, kb_id: str) -> None: ...

    def close(self) -> None: ...


def within_script(
    scores: npt.NDArray[np.float32], scripts: npt.NDArray[np.int8]
) -> npt.NDArray[np.float32]:
    """Each script's scores standardised, then given the mean and spread of all of them
    (rows of removed documents, at -inf, left out and left so). Unchanged when the rows
    are of one script, or a script has under ``MIN_SCRIPT_ROWS``. Sums per script by
    ``bincount``, one pass each: at 10k rows, 0.15 ms where a mask per script took 0.7."""
    live = np.isfinite(scores)
    values = np.where(live, scores, 0.0).astype(np.float64)
    groups = scripts.astype(np.intp)
    counts = np.bincount(groups, weights=live).astype(np.float64)
    sums = np.bincount(groups, weights=values).astype(np.float64)
    squares = np.bincount(groups, weights=values * values).astype(np.float64)
    out = rescale_by_script(scores, scripts, ScriptSpread(counts, sums, squares))
    out[~live] = -np.inf
    return out


@dataclass(frozen=True, slots=True)
class ScriptSpread:
    """Per script (the index), how many cosines, their sum and their sum of squares."""

    counts: npt.NDArray[np.float64]
    sums: npt.NDArray[np.float64]
    squares: npt.NDArray[np.float64]


def rescale_by_script(
    scores: npt.NDArray[np.float32], scripts: npt.NDArray[np.int8], spread: ScriptSpread
) -> npt.NDArray[np.float32]:
    """``scores`` standardised within their script, on the scale of the whole base, by
    the cosines of every row of the base (``spread``): unchanged when the base is of one
    script, or a script has under ``MIN_SCRIPT_ROWS``."""
    counts, sums, squares = spread.counts, spread.sums, spread.squares
    present = counts > 0
    if int(present.sum()) < 2 or counts[present].min() < MIN_SCRIPT_ROWS:
        return scores
    total = counts.sum()
    mean = sums.sum() / total
    whole = math.sqrt(max(0.0, squares.sum() / total - mean * mean))
    with np.errstate(divide="ignore", invalid="ignore"):
        own_mean = sums / counts
        own_spread = np.sqrt(np.maximum(0.0, squares / counts - own_mean * own_mean))
        scale = np.where(own_spread > 0, whole / own_spread, 1.0)
        shift = np.where(own_spread > 0, mean - own_mean * scale, 0.0)
    groups = scripts.astype(np.intp)
    out: npt.NDArray[np.float32] = scores * scale[groups].astype(np.float32) + shift[groups].astype(
        np.float32
    )
    return out
