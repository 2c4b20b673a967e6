"""Passages judged by a model: ``knowledge.judge_model`` reads what a knowledge search
found and keeps the passages that answer the question.

A search by words and vectors finds what is near a question, not what answers it: a
question on a near topic that no document answers ("how many days of sabbatical leave?"
against a leave policy without one) gets the policy's nearest passages, and the chat cites
them. No cross-encoder with its weights on a package registry was found to judge this
offline; a chat model can. One call per search, after the search: the question and the
numbered passages (each cut at ``PASSAGE_CHARS``), answered with the numbers of those
that hold the answer. Through the ``Completer`` (interceptors, audit rows with
``purpose="relevance"``, usage limits, retries, fallbacks), as the caller's turn when the
search is part of one (``ocr.current_turn``), else as the owner's own call.

It fails open: a judge that errs, answers late (``knowledge.judge_timeout_seconds``) or
answers nonsense leaves the passages as they were, with a warning in the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from parley.agent.completion import Completer
from parley.conversations.ocr import current_turn
from parley.errors import ParleyError
from parley.identity import Caller
from parley.interceptors.protocol import TurnInfo
from parley.messages import Message, TextPart
from parley.providers.registry import ProviderRegistry

log = logging.getLogger(__name__)

PASSAGE_CHARS = 1_200
"""Each passage shown to the judge at most this long (a chunk is 1,400 characters)."""
MAX_TOKENS = 1_024
"""Room for the answer and for a thinking model's reasoning before it."""
JUDGE_PROMPT = (
    "You check the results of a document search. Below are a question and numbered "
    "passages found for it. A passage is relevant only if it states information that "
    "answers the question, fully or in part; a passage on the same subject that does not "
    'hold the answer is not relevant. Reply with JSON only: {"relevant": [numbers]}, '
    "the numbers of the relevant passages, or [] when none is."
)
_DECODER = json.JSONDecoder()


class ModelJudge:
    def __init__(
        self, completer: Completer, registry: ProviderRegistry, model: str, *, timeout: float
    ) -> None:
        self._completer = completer
        self._registry = registry
        self._model = model
        self._timeout = timeout

    async def answering(
        self, owner: str, question: str, passages: Sequence[str]
    ) -> list[int] | None:
        """The 0-based indexes of the ``passages`` that answer ``question``, in their
        order; None when the judge could not say (the passages then stand)."""
        if not passages:
            return []
        numbered = "\n\n".join(
            f"[{n}] {' '.join(text.split())[:PASSAGE_CHARS]}" for n, text in enumerate(passages, 1)
        )
        prompt = f"{JUDGE_PROMPT}\n\nQuestion: {question}\n\n{numbered}"
        message = Message("user", (TextPart(prompt),))
        turn = current_turn.get() or TurnInfo(caller=Caller(owner), source="internal")
        try:
            models = self._registry.with_fallbacks(self._registry.resolve(self._model))
            reply = await asyncio.wait_for(
                self._completer.complete(
                    models,
                    [message],
                    max_tokens=MAX_TOKENS,
                    purpose="relevance",
                    turn=turn,
                    temperature=0.0,
                ),
                self._timeout,
            )
        except (ParleyError, TimeoutError) as exc:
            log.warning("knowledge.judge_model %s gave no judgement: %s", self._model, exc)
            return None
        chosen = parse(reply.text, len(passages))
        if chosen is None:
            shown = reply.text[:200]
            log.warning("knowledge.judge_model %s answered %r: passages kept", self._model, shown)
        return chosen


def parse(text: str, count: int) -> list[int] | None:
    """The 0-based indexes named by a reply like ``{"relevant": [2, 1]}`` (1-based, within
    ``count``, each once, in passage order); None when the reply says nothing usable."""
    data = _first_object(text)
    named = data.get("relevant") if data is not None else None
    if not isinstance(named, list):
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in named):
        return None
    return sorted({n - 1 for n in named if 1 <= n <= count})


def _first_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` that has ``relevant`` (prose around it, and
    other braces, allowed)."""
    start = text.find("{")
    while start != -1:
        try:
            value, _end = _DECODER.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and "relevant" in value:
            return value
        start = text.find("{", start + 1)
    return None
