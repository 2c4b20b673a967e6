"""A scripted local-model backend for the worker: misbehaviour on request, no native code.

Named in a provider's settings as ``backend: tests.support.local_backends:load``. The
model file's name chooses how loading goes (``crash-on-load``, ``crash-on-check``,
``hang-on-load``, ``refuse``: a ValueError; ``hang-after-check``: loads and passes the
one-token check, then every generation hangs; anything else loads). The last user
message chooses how a generation goes:

- ``abort``: one piece, then ``os.abort()`` (SIGABRT, as a failed native assertion);
- ``segv``: one piece, then SIGSEGV sent to itself (as a crash in native code);
- ``hang``: one piece, then a sleep that ignores cancellation;
- ``raise``: a Python error (the worker lives on);
- ``stdout``: junk written to file descriptor 1 (as native code may), then ``ok``;
- ``echo``: the messages and options it was given, as JSON;
- anything else: ``word0 word1 ...`` up to ``max_tokens`` (default 20), a piece every
  ``PIECE_SECONDS``, stopping at the next piece once cancelled.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parley.providers.local.backend import Outcome
from parley.providers.local.protocol import Load

PIECE_SECONDS = 0.01


def load(request: Load) -> ScriptedModel:
    name = Path(request.path).name
    if "crash-on-load" in name:
        os.abort()
    if "hang-on-load" in name:
        time.sleep(3600)
    if "refuse" in name:
        raise ValueError(f"not a model file: {name}")
    return ScriptedModel(
        request, crash_on_check="crash-on-check" in name, mute="hang-after-check" in name
    )


class ScriptedModel:
    name = "scripted-local"
    system_info = "scripted: no native code"

    def __init__(self, request: Load, *, crash_on_check: bool, mute: bool) -> None:
        self.context_tokens = request.context_tokens
        self._crash_on_check = crash_on_check
        self._mute = mute
        self._checked = False

    def generate(
        self,
        messages: list[dict[str, str]],
        options: dict[str, Any],
        max_tokens: int | None,
        cancelled: threading.Event,
        emit: Callable[[str], None],
    ) -> Outcome:
        if self._crash_on_check:
            os.abort()
        if self._mute and self._checked:
            time.sleep(3600)
        self._checked = True
        last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        if last in ("abort", "segv", "hang"):
            emit("partial ")
            if last == "abort":
                os.abort()
            if last == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(3600)
        if last == "raise":
            raise RuntimeError("scripted failure")
        if last == "stdout":
            os.write(1, b"junk that is not a frame\n")
            print("more junk from print()")
            emit("ok")
            return Outcome("stop", prompt_tokens, 1, len(messages))
        if last == "echo":
            emit(json.dumps({"messages": messages, "options": options, "max_tokens": max_tokens}))
            return Outcome("stop", prompt_tokens, 1, len(messages))
        return self._words(max_tokens or 20, prompt_tokens, len(messages), cancelled, emit)

    def _words(
        self,
        count: int,
        prompt_tokens: int,
        kept: int,
        cancelled: threading.Event,
        emit: Callable[[str], None],
    ) -> Outcome:
        for index in range(count):
            if cancelled.is_set():
                return Outcome(None, prompt_tokens, index, kept)
            emit(f"word{index} ")
            time.sleep(PIECE_SECONDS)
        return Outcome("length", prompt_tokens, count, kept)
