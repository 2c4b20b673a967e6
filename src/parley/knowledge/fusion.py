"""Fusing a search by words and a search by vector into one ranking.

- ``fuse_scores`` (what ``index.hybrid_search`` uses): half the score is how much of the
  question a chunk holds by words (its BM25 over that of a chunk holding every word,
  cubed: one shared word counts next to nothing), half its cosine rescaled among the
  candidates. Chosen by measuring seven variants on figure 14's corpus with two
  embedders (see ``COVERAGE_POWER``).
- ``reciprocal_ranks``: reciprocal rank fusion of any rankings (memory recall uses it,
  with its own tie-break); ``fuse`` applies it to chunks, kept for callers that have
  ranks alone (figure 11's sequential timing). It rewarded any chunk in both lists, so
  that distractors sharing "how" or "the" with a question beat the passage found by
  meaning alone (figure 14).

What does not belong here: the searches themselves (``index.py``), terms (``lexical.py``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from parley.knowledge.types import Hit

K = TypeVar("K", bound=Hashable)

RRF_K = 60
"""``fuse``'s k (reciprocal rank fusion, kept for callers that fuse ranks alone)."""
LEXICAL_WEIGHT = 0.5
"""``fuse_scores``: the share of a hybrid score given to words, the rest to vectors.
Equal: neither half is trusted more a priori (weak word evidence is made small by
``COVERAGE_POWER``, not by this weight)."""
COVERAGE_POWER = 4
"""``fuse_scores``: word evidence is the share of the question's words a chunk holds,
to this power. A chunk holding every word counts fully, half of them 1/16, one word of
five under 1/600: sharing a word or two with the question (a paraphrase's distractors,
another topic's "year" and "bridge", an English chunk near an English question whose
answer is in Chinese) must not outweigh a small lead by meaning, while a chunk holding
the question's words still wins. Measured on figure 14's corpus: with MiniLM, powers 1
to 4 all keep every kind of its 70 questions at least as good as its better half (of
the 40 held out, one Chinese question found by an English name alone is lost at 3 and
4 alike: MiniLM cannot read the Chinese); with
multilingual-e5-small, compared within scripts (``vectors.py``), 3 put two English
questions' Chinese answers a place lower than vectors alone did (cross-language MRR
.40 against .51) where 4 does not, on the 70 questions and on the 40 held out; at 3,
before the comparison within scripts, weights 0.1 to 0.5 met the bar. 0.5 still does."""
FUSION = (
    f"score: {LEXICAL_WEIGHT} x word coverage^{COVERAGE_POWER} (BM25 / the BM25 of a "
    f"chunk holding every query word) + {1 - LEXICAL_WEIGHT} x cosine min-max over the "
    "candidates; query stop words dropped"
)
"""How ``hybrid_search`` fuses, in words (figure 14 records it)."""


@dataclass(frozen=True, slots=True)
class Fused(Generic[K]):
    """One item of a reciprocal rank fusion: its score and its rank in each ranking."""

    key: K
    score: float
    ranks: tuple[int | None, ...]
    """1-based, per ranking in order (None: absent from it)."""

    @property
    def best(self) -> int:
        return min(r for r in self.ranks if r is not None)


def reciprocal_ranks(rankings: Sequence[Sequence[K]], *, k: int = RRF_K) -> list[Fused[K]]:
    """Reciprocal rank fusion: each item scores the sum of 1 / (k + rank) over the
    rankings it is in (an item repeated within a ranking counts at its first place).
    Unordered: callers break ties their own way."""
    ranks: dict[K, list[int | None]] = {}
    for position, ranking in enumerate(rankings):
        rank = 0
        for key in ranking:
            slots = ranks.setdefault(key, [None] * len(rankings))
            if slots[position] is None:
                rank += 1
                slots[position] = rank
    return [
        Fused(key, math.fsum(1.0 / (k + r) for r in slots if r is not None), tuple(slots))
        for key, slots in ranks.items()
    ]


def fuse(lists: Sequence[Sequence[tuple[int, float]]], *, k: int = RRF_K, limit: int) -> list[Hit]:
    """``reciprocal_ranks`` of chunk rankings (chunk id, score). The first list's ranks
    are reported as ``lexical_rank``, the second's as ``vector_rank``. Ties: the better
    best rank first, then the lower chunk id."""
    fused = reciprocal_ranks([[chunk_id for chunk_id, _ in ranked] for ranked in lists], k=k)
    fused.sort(key=lambda item: (-item.score, item.best, item.key))
    return [
        Hit(
            chunk_id=item.key,
            score=item.score,
            lexical_rank=item.ranks[0] if item.ranks else None,
            vector_rank=item.ranks[1] if len(item.ranks) > 1 else None,
        )
        for item in fused[:limit]
    ]


def fuse_scores(
    words: Sequence[tuple[int, float]],
    meaning: Sequence[tuple[int, float]],
    *,
    ceiling: float | None,
    floor: float | None = None,
    lexical_weight: float = LEXICAL_WEIGHT,
    limit: int,
) -> list[Hit]:
    """Score fusion: each chunk scores ``lexical_weight`` times its word score plus the
    rest times its vector score (0 in a list it is not in), both in 0..1:

    - words: how much of the question the chunk holds, its coverage: BM25 over
      ``ceiling`` (``bm25_ceiling``: 1 is every word of the question, once, in a chunk
      of average length), at most 1; to the power ``COVERAGE_POWER``. An absolute
      scale, so that weak evidence counts little however it ranks among the others: a
      chunk sharing one rare word of five with the question scores about 0.2^4.
      Without a ceiling, relative to the best;
    - vectors: cosine rescaled between ``floor`` (the lowest cosine of the candidates
      searched, before any cut; by default the lowest here) and the best: 0..1 whatever
      the model's range of cosines (MiniLM's spread 0.1-0.6, others' 0.7-0.9).

    When only one list has anything, it alone decides (weight 1). ``words`` and
    ``meaning`` are (chunk id, score) best first; a chunk repeated within a list counts
    at its first place. Reported: the fused score, and each list's 1-based rank
    (``lexical_rank``, ``vector_rank``). Ties: the better best rank, then the lower id."""
    weight = lexical_weight if words and meaning else (1.0 if words else 0.0)
    found: dict[int, list[Any]] = {}  # chunk id: [score, lexical rank, vector rank]
    if words:
        best = words[0][1]
        rank = 0
        for chunk_id, score in words:
            slots = found.setdefault(chunk_id, [0.0, None, None])
            if slots[1] is None:
                rank += 1
                if ceiling:
                    share = min(1.0, max(0.0, score / ceiling))
                else:
                    share = score / best if best > 0 else 1.0
                slots[0] += weight * share**COVERAGE_POWER
                slots[1] = rank
    if meaning:
        top = meaning[0][1]
        low = min(score for _, score in meaning) if floor is None else min(floor, top)
        rank = 0
        for chunk_id, score in meaning:
            slots = found.setdefault(chunk_id, [0.0, None, None])
            if slots[2] is None:
                rank += 1
                share = (score - low) / (top - low) if top > low else 1.0
                slots[0] += (1.0 - weight) * share
                slots[2] = rank
    scored = sorted(
        found.items(),
        key=lambda item: (-item[1][0], min(r for r in item[1][1:] if r is not None), item[0]),
    )
    return [
        Hit(chunk_id=chunk_id, score=score, lexical_rank=lexical_rank, vector_rank=vector_rank)
        for chunk_id, (score, lexical_rank, vector_rank) in scored[:limit]
    ]
