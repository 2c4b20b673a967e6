"""Cursor pages of a list route: ``{"object": "list", "data", "has_more", "first_id",
"last_id"}``, the shape OpenAI's list endpoints use. A route asks its store for one row
more than ``limit`` to know whether there is more."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar


class _Row(Protocol):
    @property
    def id(self) -> str: ...


R = TypeVar("R", bound=_Row)


def page(rows: Sequence[R], limit: int, to_json: Callable[[R], dict[str, Any]]) -> dict[str, Any]:
    """The first ``limit`` of ``rows`` (fetched as ``limit + 1``) as a list object."""
    shown = rows[:limit]
    return {
        "object": "list",
        "data": [to_json(row) for row in shown],
        "has_more": len(rows) > limit,
        "first_id": shown[0].id if shown else None,
        "last_id": shown[-1].id if shown else None,
    }
