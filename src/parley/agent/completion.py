"""One-shot model calls the server makes for itself: summaries, titles, suggestions.

They go through the same ``ModelCall`` as an agent step, so the interceptor chain (audit
rows with their ``purpose``, usage limits), retries, fallback models and deadlines all
apply. No tools are offered and nothing streams to a client: the reply is collected to
text (reasoning is left out).

What does not belong here: what to ask (``conversations/rolling.py``, ``titles.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass

from parley.agent.model_call import CallPlan, ModelCall, StepEnd
from parley.agent.repair import estimate_tokens
from parley.agent.turn import TurnState
from parley.interceptors.protocol import Purpose, TurnInfo
from parley.messages import Message, Usage, reply_text
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ResolvedModel


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    usage: Usage
    cost_usd: float
    model: str
    """The public name of the model that answered (a fallback, maybe)."""


class Completer:
    def __init__(self, model_call: ModelCall) -> None:
        self._model_call = model_call

    async def complete(
        self,
        models: list[ResolvedModel],
        messages: Sequence[Message],
        *,
        max_tokens: int,
        purpose: Purpose,
        turn: TurnInfo,
        temperature: float | None = None,
    ) -> Completion:
        """The models' answer to ``messages`` (the first model, then its fallbacks).
        Raises what the call raises (``ProviderError``, an interceptor's decision)."""
        state = TurnState()

        def request_for(model: ResolvedModel) -> ModelRequest:
            return ModelRequest(
                model=model.model,
                messages=tuple(messages),
                max_tokens=max_tokens,
                temperature=temperature,
                incremental=False,
            )

        plan = CallPlan(
            models=models,
            request_for=request_for,
            input_tokens=estimate_tokens(tuple(messages)),
            incremental=False,
            turn=turn,
            purpose=purpose,
        )
        answered_by = models[0].public_name
        async with aclosing(self._model_call.run(plan, state)) as events:
            async for event in events:
                if isinstance(event, StepEnd):
                    answered_by = event.model
        state.commit_step()
        return Completion(
            text=reply_text(state.parts()).strip(),
            usage=state.usage,
            cost_usd=state.cost_usd,
            model=answered_by,
        )
