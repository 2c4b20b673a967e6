"""What a turn's tools may ask of it while it runs (``tools.protocol.Session``): its
workspace, bringing hidden tools back, and what the request really has."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parley.settings import Settings
from parley.tools.lru import ActiveTools
from parley.tools.workspaces import conversation_workspace

if TYPE_CHECKING:
    from parley.agent.loop import AgentRequest


class TurnSession:
    """What tools may ask of the running turn (``tools.protocol.Session``)."""

    def __init__(self, request: AgentRequest, active: ActiveTools, settings: Settings) -> None:
        self._request = request
        self._active = active
        self._settings = settings
        self._workspace: Path | None = None
        self.offered: list[str] = []

    @property
    def workspace(self) -> Path:
        """The conversation's folder, worked out on first use."""
        if self._workspace is None:
            request = self._request
            self._workspace = conversation_workspace(
                self._settings.workspace_dir,
                request.owner,
                request.conversation_id or request.message_id,
            )
        return self._workspace

    def activate(self, names: Sequence[str]) -> list[str]:
        return self._active.activate(names)

    def capabilities(self) -> dict[str, Any]:
        request = self._request
        return {
            "model": request.models[0].public_name,
            "fallback_models": [m.public_name for m in request.models[1:]],
            "server_tools": {"active": self.offered, "hidden": self._active.hidden()},
            "client_tools": sorted(request.client_tools),
            "knowledge_retrieval": None,
            "memory_retrieval": None,
            "conversation_id": request.conversation_id,
        }
