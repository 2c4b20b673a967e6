"""Replies left ``streaming`` by an instance that died, found and marked interrupted.

Alone, an instance marks every such message at start-up (nothing else can be writing
them). With other instances (``parley.cluster``), a message is left alone while its
conversation's lease is held or it was written in the last ``lease_seconds``: the
instance running it renews the lease, and a dead one's lease lapses. Every instance
sweeps at start-up and then every ``lease_seconds``, so a reply cut off by ``kill -9``
is marked interrupted within about two lease periods, and a client that comes back
reads its true final state (its partial text, ``interrupted``) and can regenerate.

What does not belong here: the leases (``parley.cluster``, ``sessions.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from parley.cluster import Cluster
from parley.store.repository import ConversationStore

log = logging.getLogger(__name__)


async def sweep(store: ConversationStore, cluster: Cluster) -> int:
    """Mark the dead replies interrupted; how many."""
    if not cluster.shared:
        return await store.interrupt_streaming()
    before = time.time() - cluster.lease_seconds
    found = await store.streaming_conversations(before)
    if not found:
        return 0
    live = await cluster.leased(found)
    dead = [key for key in found if key not in live]
    return await store.interrupt_streaming(dead, updated_before=before)


async def keep_sweeping(store: ConversationStore, cluster: Cluster) -> None:
    """``sweep`` every ``lease_seconds``, for as long as the server runs."""
    while True:
        await asyncio.sleep(cluster.lease_seconds)
        try:
            swept = await sweep(store, cluster)
        except Exception:
            log.exception("looking for replies cut off on another instance failed")
            continue
        if swept:
            log.warning("marked %d reply(ies) of a dead instance as interrupted", swept)
