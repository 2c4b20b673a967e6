"""The turn's budget, checked at the top of every iteration of the agent loop.

In this order (behaviours.md section 2, plus a cost cap): the server is shutting down;
the iteration cap (50); no progress for too long (300 s: no step produced text or a
successful tool result, e.g. a model retrying failing tools); the wall clock (1,200 s); the
token cap (input + output, every model call of the turn); the cost cap (USD). The first
that is spent ends the turn with a readable message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from parley.agent.turn import Stop, TurnState
from parley.settings import AgentSettings


@dataclass(slots=True)
class Budget:
    settings: AgentSettings
    shutting_down: Callable[[], bool]
    iterations: int = 0

    def check(self, turn: TurnState) -> Stop | None:
        """The reason to stop now, or None to go on."""
        settings = self.settings
        now = time.monotonic()
        if self.shutting_down():
            return Stop("shutdown", "Server is shutting down")
        if self.iterations >= settings.max_iterations:
            return Stop("max_iterations", f"Reached max iterations ({settings.max_iterations})")
        idle = now - turn.last_progress
        if idle >= settings.no_progress_seconds:
            return Stop("no_progress", f"No progress for {idle:.0f} s")
        elapsed = now - turn.started
        if elapsed >= settings.wall_clock_seconds:
            return Stop(
                "time_budget",
                f"Time budget exceeded ({elapsed:.0f} of {settings.wall_clock_seconds:.0f} s)",
            )
        token_cap = settings.max_turn_tokens
        used = turn.usage.total_tokens
        if token_cap is not None and used >= token_cap:
            return Stop("token_budget", f"Token budget exceeded ({used} of {token_cap})")
        cost_cap = settings.max_turn_cost_usd
        if cost_cap is not None and turn.cost_usd >= cost_cap:
            return Stop(
                "cost_budget",
                f"Cost budget exceeded (${turn.cost_usd:.4f} of ${cost_cap:.4f})",
            )
        return None
