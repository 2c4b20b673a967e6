"""The outgoing history of a turn: what the model is sent, built from the stored branch.

``OutgoingBuilder.build`` takes the stored branch and the turn's new (unsaved) messages
and returns the messages to send, in three steps (behaviours.md section 4):

1. **Rolling context** (with a conversation id and ``context.enabled``): over the
   threshold (``context_threshold`` of the configured value and the model's window and
   output), the older part of the branch is replaced by a summary of it (see
   ``rolling.py``). A saved summary is reused while it still covers an exact prefix of
   the branch followed by a user message; otherwise a new one is written by the summary
   model (``context.summary_model``, else ``chat.fast_model``, else the conversation's
   model; through the ``Completer``, so interceptors and fallbacks apply) and saved,
   unless the branch changed meanwhile (then it is used for this turn only). If
   summarising fails, only the previous usable summary (maybe none) and the recent
   window are sent, never the full history, and a note says so.
2. **System prompt** (``transforms/prompt.py`` order): the assistant's prompt and the
   conversation's own leading system message (the assistant's first), a capability note
   for a model without tools when tools are in play, the rolling summary, and the
   newest memories when the assistant keeps memories without retrieving them.
3. **Input transformers** (``transforms/input.py``), configured from the assistant's
   transformer settings (``pipelines.py``).

``compact`` is the manual compaction: everything before the newest user message is
summarised now, with the user's instructions.

Decisions:

- The new messages get ids (``unsaved:N``) that no saved summary can cover, and the
  plan never lets a new summary cover them: when the window would start inside them,
  it starts at the last user message the store has (or the first new one) instead.
- Stored messages without parts (a reply that failed before any output) are never
  sent, but they stay in the planned branch, so ``covers`` is an exact prefix of the
  stored branch.
- The summary used is the newest not reverted one that applies to this branch (a
  branch switched back to gets its own summary again), not only the newest of all.
- Placeholders are resolved in ``{{name}}`` form only: ``{user}`` is too common in code
  that users paste.
- Stored messages are never changed: everything here works on copies.

What does not belong here: the summariser itself (``rolling.py``), SQL
(``store/summaries.py``), the HTTP routes (``api/summaries.py``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from parley.agent.completion import Completer
from parley.conversations.assistants import Assistant
from parley.conversations.ocr import ModelOcr, current_turn
from parley.conversations.pipelines import Pipelines, default_pipeline_acts
from parley.conversations.reach import MemoryRetrieval
from parley.conversations.rolling import (
    Entry,
    Estimate,
    SummaryRecord,
    SummaryRejected,
    context_threshold,
    estimate_message,
    plan_context,
    summary_applies,
)
from parley.conversations.summary_writer import SummaryWriter
from parley.documents.types import DocumentLimits
from parley.errors import Conflict, InvalidRequest, NotFound, ParleyError, ProviderError
from parley.interceptors.protocol import TurnInfo
from parley.messages import Message, TextPart
from parley.providers.registry import ProviderRegistry, ResolvedModel
from parley.settings import Settings
from parley.store.repository import ConversationStore, StoredMessage
from parley.store.summaries import StoredSummary, SummaryStore
from parley.tools.protocol import NO_REACH, Reach
from parley.tools.registry import ToolRegistry
from parley.transforms.input import (
    CAPABILITY_TOOLS,
    CAPABILITY_VISION,
    DocumentReader,
    KnowledgeConfig,
    KnowledgeRetriever,
    MemoryConfig,
    TransformContext,
    UsedSnippet,
)
from parley.transforms.prompt import (
    TOOLS_UNAVAILABLE_NOTE,
    assemble_system_prompt,
    with_system_prompt,
)

if TYPE_CHECKING:
    from parley.memory.service import MemoryService

log = logging.getLogger(__name__)

UNSAVED = "unsaved:"
"""The id prefix of the turn's new messages while planning (stored ids never have it)."""
"""Input pipelines kept, one per assistant version (their document caches live on)."""

SUMMARY_FAILED_NOTE = (
    "The earlier part of this conversation could not be summarised ({reason}); only the "
    "most recent messages were sent."
)
SUMMARY_DROPPED_NOTE = (
    "The conversation changed while it was being summarised: the summary was used for "
    "this reply but not saved."
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """The history to send for one turn, and what building it did."""

    messages: tuple[Message, ...]
    """Stored branch + new messages, shaped: the system prompt first."""
    notes: tuple[str, ...] = ()
    """What could not be done (a failed summary, an unreadable file ...)."""
    used_snippets: tuple[UsedSnippet, ...] = ()
    """Knowledge sent, in source-number order: the reply's citations."""
    summary: SummaryRecord | None = None
    """The rolling summary sent in the system prompt (None: none). Normally saved; not
    when the conversation changed while it was written."""


class OutgoingBuilder:
    def __init__(
        self,
        settings: Settings,
        registry: ProviderRegistry,
        completer: Completer,
        summaries: SummaryStore,
        store: ConversationStore,
        tools: ToolRegistry,
        *,
        knowledge: KnowledgeRetriever | None = None,
        memory: MemoryService | None = None,
        documents: DocumentReader | None = None,
    ) -> None:
        self._settings = settings
        self._memory = memory
        self._registry = registry
        self._completer = completer
        self._writer = SummaryWriter(settings, registry, completer)
        self._summaries = summaries
        self._store = store
        self._tools = tools
        ocr_model = settings.chat.ocr_model
        self._pipelines = Pipelines(
            None if ocr_model is None else ModelOcr(completer, registry, ocr_model),
            knowledge=knowledge,
            memory=None if memory is None else MemoryRetrieval(memory, settings.memory.top_k),
            knowledge_config=KnowledgeConfig(
                top_k=settings.knowledge.top_k,
                max_chars=settings.knowledge.max_context_chars,
                placement=settings.knowledge.placement,
            ),
            memory_config=MemoryConfig(
                top_k=settings.memory.top_k, max_chars=settings.memory.max_context_chars
            ),
            documents=documents,
            document_limits=DocumentLimits(
                max_page_content_bytes=settings.documents.max_page_content_bytes,
                max_content_bytes=settings.documents.max_pdf_content_bytes,
            ),
        )
        self._estimates: OrderedDict[tuple[str, float], int] = OrderedDict()

    # --- a turn -----------------------------------------------------------------------

    async def build(
        self,
        *,
        owner: str,
        conversation_id: str | None,
        stored: Sequence[StoredMessage],
        new: Sequence[Message],
        model: ResolvedModel,
        assistant: Assistant | None,
        turn: TurnInfo,
        now: datetime | None = None,
        max_output: int | None = None,
        tools: Sequence[str] | None = None,
        reach: Reach = NO_REACH,
        notes: Sequence[str] = (),
    ) -> Outgoing:
        """The messages to send for a turn: ``stored`` (the branch, oldest first) then
        ``new`` (not saved yet), shaped. ``max_output``: the turn's output cap (default:
        the model's, else ``chat.default_max_tokens``). ``tools``: the names of the tools
        the turn offers (default: the assistant's and the configured default tools).
        ``reach``: the knowledge and memory the turn retrieves from; ``notes``: notes
        made before (they lead the result's)."""
        moment = _aware(now or datetime.now(UTC))
        entries: list[Entry] = [(m.id, Message(m.role, m.parts)) for m in stored]
        entries += [(f"{UNSAVED}{i}", m) for i, m in enumerate(new)]
        times = {m.id: _time(m.created_at) for m in stored}
        notes = list(notes)
        summary: SummaryRecord | None = None
        chosen = entries
        # (a new conversation has no summary to read, nothing to summarise)
        if conversation_id is not None and self._settings.context.enabled and stored:
            estimate = self._estimator(entries, [(m.id, m.updated_at) for m in stored])
            chosen, summary = await self._rolling(
                owner,
                conversation_id,
                entries,
                len(stored),
                model,
                turn,
                max_output,
                notes,
                estimate,
            )
        kept = [(i, m) for i, m in chosen if m.parts]
        messages = [m for _, m in kept]
        message_times: list[datetime | None] = [times.get(i, moment) for i, _ in kept]
        memories = await self._memories(owner, reach, notes)
        messages, message_times = self._with_prompt(
            messages, message_times, model, assistant, summary, tools, memories
        )
        context = TransformContext(
            now=moment,
            model=model.public_name,
            assistant_name=assistant.name if assistant else None,
            conversation_id=conversation_id,
            message_times=tuple(message_times),
            workspace=None,
            capabilities=_capabilities(model),
            owner=owner,
            knowledge_bases=reach.knowledge_bases,
            memory_scope=reach.memory_scope,
            wants_knowledge=bool(reach.knowledge_bases),
            wants_memory=reach.memory_retrieval and reach.memory_scope is not None,
        )
        retrieves = context.wants_knowledge or context.wants_memory
        if assistant is None and not retrieves and not default_pipeline_acts(messages):
            # the common case, on every turn's path: nothing for placeholders, documents
            # or OCR to do
            return Outgoing(messages=tuple(messages), notes=tuple(notes), summary=summary)
        reading = current_turn.set(turn)  # OCR calls are this caller's
        try:
            result = await self._pipelines.for_assistant(assistant).apply(messages, context)
        finally:
            current_turn.reset(reading)
        return Outgoing(
            messages=tuple(result.messages),
            notes=tuple(dict.fromkeys([*notes, *result.notes])),
            used_snippets=tuple(result.used_snippets),
            summary=summary,
        )

    async def _memories(self, owner: str, reach: Reach, notes: list[str]) -> list[str]:
        """The memories the system prompt lists (when the turn's memory is not retrieved
        by a transformer instead); a failure to read them is a note, not the turn's end."""
        if reach.memory_scope is None or reach.memory_retrieval or not self._memory:
            return []
        try:
            return await self._memory.for_prompt(
                owner, reach.memory_scope, limit=self._settings.memory.prompt_limit
            )
        except Exception as exc:  # memory is best effort, like retrieval
            log.warning("reading memories for the prompt failed: %s", exc)
            notes.append("memories could not be read (see the server log)")
            return []

    def _estimator(self, entries: list[Entry], stamps: list[tuple[str, float]]) -> Estimate:
        """The planner's token estimate, with a stored message's estimate kept by its id
        and last change (``stamps``, one per stored entry, in order): a long
        conversation is not estimated whole again every turn."""
        cache = self._estimates
        keys = {id(message): stamp for (_, message), stamp in zip(entries, stamps, strict=False)}

        def estimate(message: Message) -> int:
            key = keys.get(id(message))
            if key is None:
                return estimate_message(message)  # not stored yet
            tokens = cache.get(key)
            if tokens is None:
                tokens = cache[key] = estimate_message(message)
                if len(cache) > ESTIMATE_CACHE:
                    cache.popitem(last=False)
            return tokens

        return estimate

    async def _rolling(
        self,
        owner: str,
        conversation_id: str,
        entries: list[Entry],
        saved: int,
        model: ResolvedModel,
        turn: TurnInfo,
        max_output: int | None,
        notes: list[str],
        estimate: Estimate = estimate_message,
    ) -> tuple[list[Entry], SummaryRecord | None]:
        """(the entries to send, the summary to put in the system prompt)."""
        threshold = self.threshold(model, max_output)
        previous = await self._previous(owner, conversation_id, entries)
        plan = plan_context(
            entries,
            previous,
            threshold,
            estimate,
            recent_fraction=self._settings.context.recent_fraction,
        )
        if plan.window_start > saved:
            # the window would start inside the unsaved messages: start it at the last
            # user message the store has (or the first new one) instead
            head = plan_context(
                entries[: saved + 1],
                previous,
                threshold,
                recent_fraction=self._settings.context.recent_fraction,
                force=True,
            )
            plan = replace(
                head,
                window=(*head.window, *entries[saved + 1 :]),
                estimated_tokens=plan.estimated_tokens,
            )
        if not plan.needs_summary:
            return list(plan.system + plan.window), plan.summary
        settings = self._settings
        if model.kind == "local" and not (
            settings.context.summary_model or settings.chat.fast_model
        ):
            # the embedded model would take a minute over the summary, the user waiting:
            # it sends the recent window (and any summary it has) unless a summary model
            # is named on purpose
            notes.append(LOCAL_NO_SUMMARY_NOTE)
            return list(plan.system + plan.window), plan.summary
        try:
            record, written_by = await self._writer.write(plan, model, turn, None, None)
        except Exception as exc:  # a failed summary never fails the turn
            log.warning(
                "conversation %s: summarising %d messages failed (%s); sending the recent "
                "window only",
                conversation_id,
                len(plan.summarise),
                _reason(exc),
            )
            notes.append(SUMMARY_FAILED_NOTE.format(reason=_reason(exc)))
            return list(plan.system + plan.window), plan.summary
        try:
            saved_row = await self._summaries.save(owner, conversation_id, record, written_by)
        except LookupError:
            saved_row = None
        if saved_row is None:
            log.info("conversation %s changed while summarising: summary dropped", conversation_id)
            notes.append(SUMMARY_DROPPED_NOTE)
        return list(plan.system + plan.window), record

    # --- manual compaction ----------------------------------------------------------------

    async def compact(
        self,
        *,
        owner: str,
        conversation_id: str,
        model: ResolvedModel,
        turn: TurnInfo,
        instructions: str | None,
        summary_model: ResolvedModel | None = None,
    ) -> SummaryRecord:
        """Summarise everything before the newest user message now and save it as the
        current summary. ``model`` is the conversation's (it sizes the summary);
        ``summary_model`` writes it (default: as for a turn).

        Raises NotFound (no such conversation), InvalidRequest (nothing to summarise),
        Conflict (the branch changed meanwhile), ProviderError (the model failed, or
        wrote an empty or over-long summary)."""
        try:
            stored = await self._store.branch(owner, conversation_id)
        except LookupError:
            raise _not_found(conversation_id) from None
        entries: list[Entry] = [(m.id, Message(m.role, m.parts)) for m in stored]
        wanted = instructions.strip() if instructions and instructions.strip() else None
        threshold = self.threshold(model)
        fraction = self._settings.context.recent_fraction
        previous = await self._previous(owner, conversation_id, entries)
        plan = plan_context(entries, previous, threshold, recent_fraction=fraction, force=True)
        if not plan.needs_summary and previous is not None and wanted is not None:
            # nothing new since the last summary: write it again, from the messages
            plan = plan_context(entries, None, threshold, recent_fraction=fraction, force=True)
        if not plan.needs_summary:
            raise InvalidRequest(
                "nothing to summarise: only the newest user message and what follows it "
                "are left" + (" after the current summary" if previous is not None else ""),
                code="nothing_to_summarise",
            )
        writers = self._writer.models(model, summary_model)
        try:
            record, written_by = await self._writer.write(plan, model, turn, wanted, writers)
        except SummaryRejected as exc:
            raise ProviderError(
                f"the model's summary was rejected: {exc.message}",
                provider=writers[0].provider.name,
                code="summary_rejected",
            ) from exc
        try:
            saved = await self._summaries.save(owner, conversation_id, record, written_by)
        except LookupError:
            raise _not_found(conversation_id) from None
        if saved is None:
            raise Conflict(
                "the conversation changed while it was being summarised; try again",
                code="conversation_changed",
            )
        return record

    # --- parts ----------------------------------------------------------------------------

    def threshold(self, model: ResolvedModel, max_output: int | None = None) -> int:
        """The rolling-context threshold for ``model`` (estimated tokens)."""
        context = self._settings.context
        output = max_output or model.max_tokens or self._settings.chat.default_max_tokens
        return context_threshold(
            context.threshold_tokens,
            model.context_tokens,
            output,
            minimum=context.minimum_threshold_tokens,
        )

    async def _previous(
        self, owner: str, conversation_id: str, entries: Sequence[Entry]
    ) -> SummaryRecord | None:
        """The newest saved summary (not reverted) this branch can use: it covers an exact
        prefix, followed by a user message."""
        ids = [i for i, _ in entries]
        for row in await self._summaries.active(owner, conversation_id):
            record = summary_record(row)
            count = len(record.covers)
            if (
                summary_applies(record, ids)
                and count < len(entries)
                and entries[count][1].role == "user"
            ):
                return record
        return None

    def _with_prompt(
        self,
        messages: list[Message],
        times: list[datetime | None],
        model: ResolvedModel,
        assistant: Assistant | None,
        summary: SummaryRecord | None,
        tools: Sequence[str] | None,
        memories: Sequence[str] = (),
    ) -> tuple[list[Message], list[datetime | None]]:
        """The system prompt put in front: the assistant's prompt, then the conversation's
        own leading system message, the capability note, the rolling summary and the
        memories (when they are not retrieved per request)."""
        lead = messages[0] if messages and messages[0].role == "system" else None
        own = lead.text.strip() if lead is not None else ""
        mine = assistant.system_prompt.strip() if assistant is not None else ""
        note = None
        if not model.provider.supports_tools and self._tools_in_play(assistant, tools):
            note = TOOLS_UNAVAILABLE_NOTE
        prompt = assemble_system_prompt(
            assistant_prompt="\n\n".join(p for p in (mine, own) if p) or None,
            capability_note=note,
            rolling_summary=summary.text if summary is not None else None,
            memories=memories,
            max_memory_chars=self._settings.memory.max_context_chars,
        )
        if prompt is None:
            return messages, times
        if lead is not None:  # its text is in the prompt now; other parts stay
            others = tuple(p for p in lead.parts if not isinstance(p, TextPart))
            messages = [Message("system", others, lead.name), *messages[1:]]
        shaped = with_system_prompt(messages, prompt)
        if len(shaped) > len(messages):
            times = [None, *times]
        return shaped, times

    def _tools_in_play(self, assistant: Assistant | None, tools: Sequence[str] | None) -> bool:
        if tools is not None:
            return bool(tools)
        if assistant is not None and assistant.tools:
            return True
        return any(name in self._tools for name in self._settings.tools.default_tools)


# --- helpers --------------------------------------------------------------------------------

LOCAL_NO_SUMMARY_NOTE = (
    "older messages were left out (the embedded model does not write rolling summaries "
    "unless context.summary_model or chat.fast_model names a model for them)"
)

ESTIMATE_CACHE = 100_000
"""Stored messages whose token estimates are kept (by id)."""


def summary_record(row: StoredSummary) -> SummaryRecord:
    """A stored summary as the planner's record."""
    return SummaryRecord(
        covers=row.covers,
        text=row.text,
        tokens=row.tokens,
        created_at=row.created_at,
        id=row.id,
        instructions=row.instructions,
    )


def _time(created_at: float) -> datetime:
    return datetime.fromtimestamp(created_at, UTC)


def _capabilities(model: ResolvedModel) -> frozenset[str]:
    """What the model can take, for the input transformers (tools; images)."""
    return frozenset({CAPABILITY_TOOLS} if model.provider.supports_tools else ()) | frozenset(
        {CAPABILITY_VISION} if model.vision else ()
    )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _reason(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, ParleyError) else str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _not_found(conversation_id: str) -> NotFound:
    return NotFound(
        f"conversation {conversation_id!r} not found",
        param="conversation_id",
        code="conversation_not_found",
    )
