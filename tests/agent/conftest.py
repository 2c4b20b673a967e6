"""The agent tests share ``make_world`` (defined with the loop tests)."""

from tests.agent.test_loop import make_world

__all__ = ["make_world"]
