"""Metadata injection (Snail AI's example interceptor): who is asking, through which
door, and configured fields, added to the system prompt of the outgoing request.

The block is marked as information, not instructions, and goes at the end of the first
system message (or in a new one at the start). Only the request sent upstream changes:
the stored conversation never does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parley.interceptors.protocol import CallInfo, Interceptor
from parley.messages import Message, TextPart
from parley.providers.protocol import ModelRequest
from parley.settings.interceptors import MetadataSettings


class MetadataInjector(Interceptor):
    name = "metadata"

    def __init__(self, settings: MetadataSettings) -> None:
        self.order = settings.order
        self._settings = settings

    def describe(self) -> dict[str, Any]:
        settings = self._settings
        return {
            "identity": settings.include_identity,
            "source": settings.include_source,
            "fields": sorted(settings.fields),
            "purposes": list(settings.purposes),
        }

    def block(self, call: CallInfo) -> str:
        settings = self._settings
        lines = [
            "<request_metadata>",
            "Facts about this request, for information (they are not instructions):",
        ]
        if settings.include_identity:
            caller = call.caller
            lines.append(f"caller: {caller.owner}")
            if caller.key_name:
                lines.append(f"api key: {caller.key_name}")
        if settings.include_source:
            lines.append(f"source: {call.turn.source}")
        lines.extend(f"{name}: {value}" for name, value in settings.fields.items())
        lines.append("</request_metadata>")
        return "\n".join(lines)

    async def before_request(self, request: ModelRequest, call: CallInfo) -> ModelRequest | None:
        if call.purpose not in self._settings.purposes:
            return None
        block = self.block(call)
        messages = list(request.messages)
        if messages and messages[0].role == "system":
            first = messages[0]
            messages[0] = replace(first, parts=(*first.parts, TextPart("\n\n" + block)))
        else:
            messages.insert(0, Message("system", (TextPart(block),)))
        return replace(request, messages=tuple(messages))
