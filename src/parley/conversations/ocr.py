"""OCR by a model: ``chat.ocr_model`` reads the images sent to a chat model that cannot.

The input pipeline's OCR step (``transforms/attachments.py``) asks this engine for each
image and puts the text in its place, for the outgoing request only. The call goes
through the ``Completer`` (so interceptors, audit rows with ``purpose="ocr"``, usage
limits, retries and fallbacks apply); readings are cached by the step.
"""

from __future__ import annotations

from contextvars import ContextVar

from parley.agent.completion import Completer
from parley.interceptors.protocol import TurnInfo
from parley.messages import ImagePart, Message, TextPart
from parley.providers.registry import ProviderRegistry

OCR_PROMPT = (
    "Transcribe all text in this image exactly, keeping its layout where it matters "
    "(tables, lists, code). Then describe briefly what the image shows. Output only the "
    "transcription and the description."
)
OCR_MAX_TOKENS = 2000

current_turn: ContextVar[TurnInfo | None] = ContextVar("parley_ocr_turn", default=None)
"""The turn whose images are read (set by the outgoing builder): the reading is that
caller's, for usage limits and the audit log."""


class ModelOcr:
    def __init__(self, completer: Completer, registry: ProviderRegistry, model: str) -> None:
        self._completer = completer
        self._registry = registry
        self._model = model

    async def read(self, image_url: str) -> str:
        models = self._registry.with_fallbacks(self._registry.resolve(self._model))
        message = Message("user", (TextPart(OCR_PROMPT), ImagePart(image_url)))
        reply = await self._completer.complete(
            models,
            [message],
            max_tokens=OCR_MAX_TOKENS,
            purpose="ocr",
            turn=current_turn.get() or TurnInfo(source="internal"),
        )
        return reply.text
