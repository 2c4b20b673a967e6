"""The audit interceptor: one row per model call and per tool call in the audit log.

Who (owner, key id), when, what (model or tool, purpose, attempt, provider), tokens,
cost, the finish reason or outcome, latency, and a SHA-256 of the request as sent
upstream (of a tool's name and arguments): equal requests hash equal, and no content is
stored. Failed and abandoned calls get rows too (``error``, ``cancelled``). Rows are
queued and written in batches by ``store/audit.py``; they are read over
``GET /v1/audit``.

What does not belong here: storing and querying rows (``store/audit.py``).
"""

from __future__ import annotations

from typing import Any

from parley.errors import ParleyError
from parley.events import FINISH_REASONS
from parley.interceptors.protocol import (
    CallCancelled,
    CallInfo,
    Interceptor,
    ModelResponse,
    Services,
    ToolCall,
)
from parley.settings.interceptors import AuditSettings
from parley.store.audit import AuditLog, AuditRecord
from parley.tools.protocol import ToolOutput


class AuditInterceptor(Interceptor):
    name = "audit"

    def __init__(self, settings: AuditSettings) -> None:
        self.order = settings.order
        self._log: AuditLog | None = None

    async def startup(self, services: Services) -> None:
        self._log = services.audit

    async def after_response(self, response: ModelResponse, call: CallInfo) -> None:
        usage = response.usage
        self._add(
            call,
            outcome=FINISH_REASONS[response.stop_reason],
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            cost_usd=response.cost_usd,
        )

    async def on_error(self, error: ParleyError, call: CallInfo) -> None:
        cancelled = isinstance(error, CallCancelled)
        usage = call.usage  # what the upstream reported before the call failed, if any
        self._add(
            call,
            outcome="cancelled" if cancelled else "error",
            error_code=None if cancelled else (error.code or error.type),
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
        )

    async def after_tool_call(
        self, tool_call: ToolCall, output: ToolOutput, call: CallInfo
    ) -> None:
        self._add(
            call,
            outcome="error" if output.is_error else "ok",
            hash_of={"tool": tool_call.name, "arguments": tool_call.arguments},
        )

    def _add(self, call: CallInfo, *, outcome: str, hash_of: Any = None, **fields: Any) -> None:
        if self._log is None:
            return
        self._log.add(
            call_record(
                call,
                kind=call.kind,
                name=call.name,
                outcome=outcome,
                at=call.started_at,
                call_id=call.call_id,
                provider=call.provider,
                upstream_model=call.upstream_model,
                attempt=call.attempt if call.kind == "model" else None,
                latency_ms=round(call.elapsed * 1000, 3),
                hash_of=hash_of if hash_of is not None else call.request,
                **fields,
            )
        )


def call_record(
    call: CallInfo, *, kind: str, name: str, outcome: str, **fields: Any
) -> AuditRecord:
    """An audit row saying who asked, through which door and in which turn (the other
    built-ins record their findings with it too)."""
    turn = call.turn
    return AuditRecord(
        owner=turn.caller.owner,
        key_id=turn.caller.key_id,
        kind=kind,
        name=name,
        outcome=outcome,
        purpose=call.purpose,
        source=turn.source,
        conversation_id=turn.conversation_id,
        message_id=turn.message_id,
        **fields,
    )
