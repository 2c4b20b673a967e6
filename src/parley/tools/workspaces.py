"""Where a conversation's workspace lives on disk, and removing it.

``<workspace_dir>/<owner digest>/<conversation digest>``: neither the owner nor the
conversation id (which a Langchain-Chatchat client may choose) ever becomes a path
segment, and two owners can never share a folder, even for the same conversation id.
"""

from __future__ import annotations

import asyncio
import shutil
from hashlib import sha256
from pathlib import Path


def _digest(value: str) -> str:
    return sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def conversation_workspace(root: Path, owner: str, conversation_id: str) -> Path:
    return root / _digest(owner) / _digest(conversation_id)


async def remove_workspace(root: Path, owner: str, conversation_id: str) -> None:
    """Delete a conversation's workspace and everything in it (nothing if none)."""
    folder = conversation_workspace(root, owner, conversation_id)
    await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
