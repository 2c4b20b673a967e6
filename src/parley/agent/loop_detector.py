"""Loop detection: notice a model repeating the same tool calls (behaviours.md section 2).

Each tool call becomes a 64-bit signature: a BLAKE2b hash of the tool name and its
arguments, canonicalised (JSON that parses is re-dumped with sorted keys and no
whitespace, so key order and spacing do not matter; blank arguments count as ``{}``;
anything else is hashed as written). The detector keeps the last ``window`` signatures.
It fires when the newest signatures are one cycle of length 1..``max_cycle`` repeated
``repeats`` times in a row: ``A A A``, ``A B A B A B``, ``A B C A B C A B C``.

The agent loop calls :meth:`LoopDetector.observe` with each step's calls *before* they
run. The calls are recorded one by one, in order, and the pattern is checked after each,
so a loop that completes in the middle of a step is seen too.

Rule after firing: the window is cleared (the rest of that step's calls are not
recorded). The same loop therefore fires again only after it has been repeated in full
once more, ``repeats`` times, from scratch. The agent loop warns the model on the first
firing of a turn and ends the turn on the second (:attr:`LoopDetector.fired` counts
them); a new turn starts with :meth:`LoopDetector.reset` or a new detector.

What does not belong here: the warning text and what to do about a loop (the agent
loop), and fuzzy matching of nearly-equal arguments (only exact repeats are detected).
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Sequence

import orjson

from parley.settings import AgentSettings

ToolCallKey = tuple[str, str]
"""A tool call as the detector sees it: (tool name, arguments as a JSON string)."""


class LoopDetector:
    """Detects a repeated cycle among the most recent tool calls of a turn.

    A cycle longer than ``window // repeats`` cannot fit in the window and is never seen.
    """

    def __init__(self, window: int = 12, max_cycle: int = 3, repeats: int = 3) -> None:
        if window < 1 or max_cycle < 1 or repeats < 2:
            raise ValueError("need window >= 1, max_cycle >= 1 and repeats >= 2")
        self.window = window
        self.max_cycle = max_cycle
        self.repeats = repeats
        self._recent: deque[int] = deque(maxlen=window)
        self._fired = 0

    @classmethod
    def from_settings(cls, agent: AgentSettings) -> LoopDetector:
        return cls(agent.loop_window, agent.loop_max_cycle, agent.loop_repeats)

    @property
    def fired(self) -> int:
        """How many times the detector has fired since it was made or reset."""
        return self._fired

    def observe(self, calls: Sequence[ToolCallKey]) -> bool:
        """Record one step's calls, in order; True when they complete a loop."""
        for name, arguments in calls:
            self._recent.append(call_signature(name, arguments))
            if self._is_looping():
                self._recent.clear()
                self._fired += 1
                return True
        return False

    def reset(self) -> None:
        """Forget every call and firing (a new turn)."""
        self._recent.clear()
        self._fired = 0

    def _is_looping(self) -> bool:
        recent = self._recent
        size = len(recent)
        for cycle in range(1, self.max_cycle + 1):
            span = cycle * self.repeats
            if span > size:
                break
            start = size - span
            if all(recent[i] == recent[i - cycle] for i in range(start + cycle, size)):
                return True
        return False


def call_signature(name: str, arguments: str) -> int:
    """A stable 64-bit hash of a tool call: its name and canonical arguments."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(name.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(canonical_arguments(arguments).encode("utf-8", "surrogatepass"))
    return int.from_bytes(digest.digest(), "big")


def canonical_arguments(arguments: str) -> str:
    """Parsed JSON re-dumped with sorted keys and no whitespace; else the raw string."""
    if not arguments.strip():
        return "{}"
    try:  # the fast way; what orjson refuses (NaN, huge integers) takes the slow one
        return orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, TypeError):
        pass
    try:
        value = json.loads(arguments)
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return arguments
