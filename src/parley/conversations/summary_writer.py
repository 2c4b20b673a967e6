"""Writing a rolling summary: which model writes it (``context.summary_model``, else
``chat.fast_model``, else the conversation's, with fallbacks), in segments sized to that
model's window, through the server's own completions (``purpose="summary"``).

What does not belong here: when a summary is needed and what it covers
(``rolling.plan_context``), how the text is folded segment by segment
(``rolling.summarise``), keeping it (``outgoing.py`` and ``store/summaries.py``).
"""

from __future__ import annotations

import logging
import math

from parley.agent.completion import Completer
from parley.conversations.rolling import (
    MAX_TOKENS_FACTOR,
    REJECT_FACTOR,
    ContextPlan,
    SummaryRecord,
    record_for,
    summarise,
)
from parley.errors import ParleyError
from parley.interceptors.protocol import TurnInfo
from parley.messages import Message
from parley.providers.registry import ProviderRegistry, ResolvedModel
from parley.settings import Settings

log = logging.getLogger(__name__)

PROMPT_RESERVE_TOKENS = 600
"""Room kept for the summariser's own instructions when sizing its segments."""
MIN_SEGMENT_TOKENS = 256


class SummaryWriter:
    def __init__(
        self, settings: Settings, registry: ProviderRegistry, completer: Completer
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._completer = completer

    async def write(
        self,
        plan: ContextPlan,
        model: ResolvedModel,
        turn: TurnInfo,
        instructions: str | None,
        writers: list[ResolvedModel] | None,
    ) -> tuple[SummaryRecord, str]:
        """(the new record for ``plan``, the public name of the model that wrote it)."""
        models = writers or self.models(model)
        answered: list[str] = []

        async def complete(prompt: list[Message], max_tokens: int) -> str:
            completion = await self._completer.complete(
                models, prompt, max_tokens=max_tokens, purpose="summary", turn=turn
            )
            answered.append(completion.model)
            return completion.text

        previous = plan.summary.text if plan.summary is not None else None
        text = await summarise(
            [m for _, m in plan.summarise if m.parts],
            previous,
            complete,
            target_tokens=plan.target_tokens,
            segment_tokens=self._segment_tokens(models[0], plan.target_tokens),
            instructions=instructions,
        )
        record = record_for(plan, text, instructions=instructions)
        return record, answered[-1] if answered else models[0].public_name

    def models(
        self, model: ResolvedModel, chosen: ResolvedModel | None = None
    ) -> list[ResolvedModel]:
        """The summariser and its fallbacks: ``chosen``, else ``context.summary_model``,
        else ``chat.fast_model``, else the conversation's model."""
        writer = chosen
        name = self._settings.context.summary_model or self._settings.chat.fast_model
        if writer is None and name:
            try:
                writer = self._registry.resolve(name)
            except ParleyError as exc:
                log.warning("summary model %r: %s; using %s", name, exc, model.public_name)
        return self._registry.with_fallbacks(writer or model)

    def _segment_tokens(self, writer: ResolvedModel, target: int) -> int:
        """``context.segment_tokens``, less when a segment, the running summary, the
        reply and the instructions would not fit the summariser's window."""
        configured = self._settings.context.segment_tokens
        window = writer.context_tokens
        if not window:
            return configured
        room = (
            window
            - MAX_TOKENS_FACTOR * target
            - math.ceil(REJECT_FACTOR * target)
            - PROMPT_RESERVE_TOKENS
        )
        return max(min(configured, room), MIN_SEGMENT_TOKENS)
