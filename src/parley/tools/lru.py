"""Which server tools the model is offered, iteration by iteration (octos's tool LRU).

A turn may have many server tools; offering all of them on every model call costs
tokens and confuses models. ``ActiveTools`` keeps the set small:

- **Pinned** tools (that are available) are always offered and never count.
- Every other tool has a *last touch*: the iteration it was last used (called by the
  model) or activated. At the start of the turn every tool counts as touched at
  iteration 0, so a tool is offered from the first iteration.
- **Idle rule**: at iteration ``n`` a tool is hidden when ``n - last_touch >
  idle_iterations``, that is after ``idle_iterations`` iterations in a row without
  being used (with the default 5: never used, offered in iterations 1-5, hidden from 6;
  used in iteration 3, offered up to 8, hidden from 9).
- **Cap rule**: of the tools the idle rule leaves, at most ``max_active`` are offered:
  the most recently touched. Ties are broken by the order of touching (later touch wins;
  within one ``used`` or ``activate`` call, earlier names win), and at the start by the
  order of ``available`` (earlier wins). The least recently used are hidden first.
- ``used(names)`` touches tools at the current iteration, so a tool used in iteration
  ``n`` is offered in ``n + 1`` (unless more than ``max_active`` tools were touched in
  iteration ``n``). A hidden tool the model calls anyway comes back the same way.
- ``activate(names)`` touches tools too, which brings hidden ones back; names that are
  not available are ignored and left out of the result. At most ``max_active`` names of
  one call are activated (the first ones).
- The **activator** (``activate_tools``) is not a tool like the others: it is offered,
  last, exactly when something is hidden (whether or not it is in ``available`` or
  ``pinned``), and never counts toward ``max_active``.

So ``offered()`` never holds more than ``max_active`` + the pinned tools + 1 names, and
keeps the order of ``available`` (stable prompts cache better).

What does not belong here: which tools exist (``registry.py``), running them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

ACTIVATOR = "activate_tools"


class ActiveTools:
    """The per-turn LRU of server tools. Iterations are numbered from 1."""

    def __init__(
        self,
        available: Sequence[str],
        *,
        pinned: Iterable[str] = (),
        max_active: int = 15,
        idle_iterations: int = 5,
        activator: str = ACTIVATOR,
    ) -> None:
        if max_active < 1:
            raise ValueError("max_active must be at least 1")
        if idle_iterations < 1:
            raise ValueError("idle_iterations must be at least 1")
        self.max_active = max_active
        self.idle_iterations = idle_iterations
        self.activator = activator
        names = list(dict.fromkeys(n for n in available if n != activator))
        wanted = set(pinned)
        self._order = names
        self._pinned = frozenset(n for n in names if n in wanted)
        self._iteration = 0
        # last touch: (iteration, sequence); a larger tuple is more recent
        self._touched: dict[str, tuple[int, int]] = {
            name: (0, -index) for index, name in enumerate(names) if name not in self._pinned
        }
        self._sequence = 0

    @property
    def iteration(self) -> int:
        return self._iteration

    def begin_iteration(self, n: int) -> None:
        """Start iteration ``n`` (1 for the first model call; never going back)."""
        if n < self._iteration:
            raise ValueError(f"iteration {n} is before iteration {self._iteration}")
        self._iteration = n

    def offered(self) -> list[str]:
        """The tool names the model is offered now, in the order of ``available``."""
        active = self._active()
        names = [n for n in self._order if n in self._pinned or n in active]
        if len(active) < len(self._touched):
            names.append(self.activator)
        return names

    def hidden(self) -> list[str]:
        """Available tools not offered now, in the order of ``available``."""
        active = self._active()
        return [n for n in self._order if n in self._touched and n not in active]

    def used(self, names: Iterable[str]) -> None:
        """The model called these tools in the current iteration."""
        self._touch(list(names))

    def activate(self, names: Iterable[str]) -> list[str]:
        """Bring tools back; returns the requested names that are now offered.

        Unknown names (not available in this turn) are ignored: they are the ones
        missing from the result. Pinned names are always active.
        """
        requested = list(dict.fromkeys(names))
        known = [n for n in requested if n in self._touched]
        self._touch(known[: self.max_active])
        active = self._active()
        return [n for n in requested if n in self._pinned or n in active]

    def _touch(self, names: list[str]) -> None:
        fresh = [n for n in dict.fromkeys(names) if n in self._touched]
        # earlier names get the later sequence numbers, so they win ties
        for name in reversed(fresh):
            self._sequence += 1
            self._touched[name] = (self._iteration, self._sequence)

    def _active(self) -> set[str]:
        awake = [
            (touch, name)
            for name, touch in self._touched.items()
            if self._iteration - touch[0] <= self.idle_iterations
        ]
        awake.sort(reverse=True)
        return {name for _, name in awake[: self.max_active]}
