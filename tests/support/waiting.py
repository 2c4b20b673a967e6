"""Waiting for something to happen, in place of sleeping and hoping it has: poll a
condition every ``interval`` until it holds, and fail the test with what was awaited
once ``timeout`` has passed (a busy machine costs the wait time, never the test).

``wait_until`` blocks (a test driving a server in another thread or process);
``until`` is awaited (a test on the event loop: the loop runs on while it waits), and
takes a condition that is a coroutine function too. Waiting for the *absence* of
something (no write comes, a task stays pending) is no condition to poll: such tests
keep their fixed pause."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

DEFAULT_TIMEOUT = 10.0
DEFAULT_INTERVAL = 0.01


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    what: str | None = None,
) -> None:
    """Return once ``condition()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(_failure(condition, timeout, what))
        time.sleep(interval)


async def until(
    condition: Callable[[], object] | Callable[[], Awaitable[object]],
    *,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - the deadline of the polling itself
    interval: float = DEFAULT_INTERVAL,
    what: str | None = None,
) -> None:
    """Return once ``condition()`` (awaited when it gives an awaitable) is true; fail
    the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(_failure(condition, timeout, what))
        await asyncio.sleep(interval)


def _failure(condition: Callable[[], object], timeout: float, what: str | None) -> str:
    return f"not so after {timeout:g} s: {what or _described(condition)}"


def _described(condition: Callable[[], object]) -> str:
    """The condition's source (a lambda's line), else its name."""
    try:
        return inspect.getsource(condition).strip()
    except (OSError, TypeError):
        return getattr(condition, "__qualname__", repr(condition))
