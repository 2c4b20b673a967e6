"""The knowledge package's shared vocabulary: what chunking produces, the embedder
protocol, and what a search returns.

Everything here is a frozen dataclass or a Protocol; the modules that do the work
(``chunking.py``, ``embeddings.py``, ``lexical.py``, ``vectors.py``, ``search.py``)
import from here and not from each other where they can avoid it.

What does not belong here: what extraction produces (``Block``, ``ExtractedDocument``,
``UnreadableDocument``: ``documents/types.py``, whose readers make them), SQL
(``store.py``), the ingestion queue (``ingest.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from parley.errors import ParleyError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document as it is indexed and cited. ``ordinal`` is 0-based within
    the document; ``page`` the page the chunk starts on; ``section`` the heading path
    joined with `` > ``."""

    ordinal: int
    text: str
    page: int | None = None
    section: str | None = None


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors, one row per text, in order.

    ``model`` names the model and is recorded per knowledge base and per cached vector,
    so vectors of different models are never compared. Implementations batch on their
    own and never block the event loop."""

    @property
    def model(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> Vectors: ...


class Judge(Protocol):
    """Reads the passages a search found and says which answer the question
    (``knowledge.judge_model``: ``conversations/judge.py``)."""

    async def answering(
        self, owner: str, question: str, passages: Sequence[str]
    ) -> list[int] | None:
        """The 0-based indexes of the passages that answer, in order; None: no judgement
        (the passages stand)."""
        ...


class EmbeddingError(ParleyError):
    """The embedder could not embed (endpoint down, bad answer, model missing)."""

    status = 502
    type = "upstream_error"
    code = "embedding_failed"


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked search result. ``score`` is the fused score (higher is better);
    ``lexical_rank``/``vector_rank`` are 1-based ranks in each list (None: absent)."""

    chunk_id: int
    score: float
    lexical_rank: int | None = None
    vector_rank: int | None = None


@dataclass(frozen=True, slots=True)
class KbRef:
    """A knowledge base to search, as the caller read it: its recorded embedding model
    ("" before the first vector) and its ``version``."""

    id: str
    embedding_model: str
    version: int
