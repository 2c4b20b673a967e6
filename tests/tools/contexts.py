"""A ToolContext for tool tests: Settings in ``tmp_path``, a workspace below it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parley.settings import Settings
from parley.store.repository import ConversationStore
from parley.tools.protocol import Session, ToolContext


def tool_context(
    tmp_path: Path,
    *,
    tools: dict[str, Any] | None = None,
    owner: str = "alice",
    conversation_id: str = "conv_1",
    workspace: Path | None = None,
    store: ConversationStore | None = None,
    session: Session | None = None,
) -> ToolContext:
    settings = Settings(data_dir=tmp_path, tools=tools or {})  # type: ignore[arg-type]
    return ToolContext(
        owner=owner,
        conversation_id=conversation_id,
        call_id="call_1",
        workspace=workspace or tmp_path / "ws" / conversation_id,
        settings=settings.tools,
        messages=store,
        session=session,
    )
