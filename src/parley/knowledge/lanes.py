"""Lanes of embedding: indexing embeds on a lane of its own, so that a query (a search,
a memory recall or write) never waits behind an indexing batch.

- ``lane_thread`` gives the one thread a lane's local inferences run on (the local
  model, ``embeddings.LocalEmbedder``): one for queries, one for indexing. Each runs a
  batch at a time and onnxruntime lets go of the GIL, so a query is served at once while
  indexing, however much of it is queued, takes one core at most.
- ``indexing_lane`` gives the embedder the ingestion queue uses: its indexing lane when
  it has one (``HasIndexingLane``), else the embedder itself (an OpenAI-compatible
  endpoint serves requests side by side).

What does not belong here: embedding itself (``embeddings.py``), the order in which
documents are indexed (``fair_queue.py``).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Protocol, runtime_checkable

from parley.knowledge.types import Embedder

Lane = Literal["queries", "indexing"]

_threads: dict[Lane, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def lane_thread(lane: Lane) -> ThreadPoolExecutor:
    """The one thread the lane's local inferences of the process run on."""
    with _lock:
        executor = _threads.get(lane)
        if executor is None:
            executor = _threads[lane] = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"parley-embed-{lane}"
            )
        return executor


@runtime_checkable
class HasIndexingLane(Protocol):
    """An embedder with a lane of its own for indexing."""

    def for_indexing(self) -> Embedder: ...


def indexing_lane(embedder: Embedder | None) -> Embedder | None:
    """The embedder the ingestion queue should use: its indexing lane when it has one."""
    if isinstance(embedder, HasIndexingLane):
        return embedder.for_indexing()
    return embedder
