"""The input transformer pipeline: the outgoing request, shaped step by step.

Rikkahub's order, each step taking the output of the one before::

    1 time reminder        reminders.py    notes of the time before user messages
    2 prompt injection    injection.py    mode injections and lorebook entries
    3 placeholders        templates.py    {{cur_date}}, {{model_name}}, {{user}} ...
    4 document as prompt  attachments.py  attached files as text
    5 OCR                 attachments.py  images as text for models that cannot see
    6 template            templates.py    the message template (sandboxed Jinja2)
    7 workspace reminder  reminders.py    the conversation's workspace
    8 knowledge retrieval retrieval.py    <knowledge_context>, recorded for citations
    9 memory retrieval    retrieval.py    <memory_context>, information, not instructions

It works on a copy: the list the caller passes, its messages, and so the stored
conversation, are never changed. Every step can be turned off in ``PipelineConfig``
(``enabled=False``). A step that raises is logged, noted in the result and skipped: a
transformer never fails the request, unless it raises ``Overloaded`` (the server has no
room to do the step now, as when every document reader is busy): then the request fails
with it, and the client may send it again. The result carries the messages to send, notes on
what could not be done, the knowledge snippets and memories sent (for citations), the
lorebook entries injected, and which steps changed something.

Put the system prompt in first (``prompt.with_system_prompt``), as Rikkahub does: the
system-prompt injections, the workspace reminder and system-placed retrieval edit the
leading system message.

Before each step the pipeline realigns ``TransformContext.message_times`` with the list
that step receives (see ``context.carry_times``), so the template renders each message
with its own time even after earlier steps inserted messages.

What does not belong here: the system prompt (``prompt.py``), output transformers
(``output.py``), deciding the configuration of a conversation (``conversations/``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from parley.errors import Overloaded
from parley.messages import Message
from parley.transforms.attachments import (
    DocumentAsPromptTransformer,
    DocumentPromptConfig,
    DocumentReader,
    InlineDocumentReader,
    OcrConfig,
    OcrEngine,
    OcrTransformer,
)
from parley.transforms.injection import (
    InjectionConfig,
    InjectionPosition,
    LorebookEntry,
    PromptInjectionConfig,
    PromptInjectionTransformer,
)
from parley.transforms.protocol import (
    CAPABILITY_TOOLS,
    CAPABILITY_VISION,
    InputTransformer,
    Snippet,
    TransformContext,
    TransformReport,
    UsedSnippet,
    carry_times,
)
from parley.transforms.reminders import (
    TimeReminderConfig,
    TimeReminderTransformer,
    WorkspaceReminderConfig,
    WorkspaceReminderTransformer,
)
from parley.transforms.retrieval import (
    KnowledgeConfig,
    KnowledgeRetrievalTransformer,
    KnowledgeRetriever,
    MemoryConfig,
    MemoryRetrievalTransformer,
    MemoryRetriever,
)
from parley.transforms.templates import (
    PlaceholderConfig,
    PlaceholderTransformer,
    TemplateConfig,
    TemplateTransformer,
)

__all__ = [
    "CAPABILITY_TOOLS",
    "CAPABILITY_VISION",
    "DocumentPromptConfig",
    "DocumentReader",
    "InjectionConfig",
    "InjectionPosition",
    "InputPipeline",
    "InputTransformer",
    "KnowledgeConfig",
    "KnowledgeRetriever",
    "LorebookEntry",
    "MemoryConfig",
    "MemoryRetriever",
    "OcrConfig",
    "OcrEngine",
    "PipelineConfig",
    "PlaceholderConfig",
    "PromptInjectionConfig",
    "Snippet",
    "TemplateConfig",
    "TimeReminderConfig",
    "TransformContext",
    "TransformReport",
    "TransformResult",
    "UsedSnippet",
    "WorkspaceReminderConfig",
    "build_pipeline",
]

log = logging.getLogger(__name__)

STEP_NAMES = (
    "time_reminder",
    "prompt_injection",
    "placeholders",
    "document_as_prompt",
    "ocr",
    "template",
    "workspace_reminder",
    "knowledge_retrieval",
    "memory_retrieval",
)
"""The steps of ``build_pipeline``, in the order they run."""


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """One configuration per step; a step whose config has ``enabled=False`` is left out.

    Defaults: placeholders, documents, OCR (a note when no engine), the workspace
    reminder and both retrieval slots are on; the time reminder is off (Rikkahub's
    default); prompt injection is left out until it has modes or lorebook entries, and
    the template step while the template is ``{{ message }}``.
    """

    time_reminder: TimeReminderConfig = field(default_factory=TimeReminderConfig)
    injection: PromptInjectionConfig = field(default_factory=PromptInjectionConfig)
    placeholders: PlaceholderConfig = field(default_factory=PlaceholderConfig)
    documents: DocumentPromptConfig = field(default_factory=DocumentPromptConfig)
    ocr: OcrConfig = field(default_factory=OcrConfig)
    template: TemplateConfig = field(default_factory=TemplateConfig)
    workspace: WorkspaceReminderConfig = field(default_factory=WorkspaceReminderConfig)
    knowledge: KnowledgeConfig = field(default_factory=KnowledgeConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)


@dataclass(frozen=True, slots=True)
class TransformResult:
    """The request to send, and what the pipeline did to build it."""

    messages: list[Message]
    notes: list[str] = field(default_factory=list)
    used_snippets: list[UsedSnippet] = field(default_factory=list)
    """Knowledge sent, in source-number order: save as the reply's citations."""
    used_memories: list[UsedSnippet] = field(default_factory=list)
    lorebook_entries: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    """Names of the steps that changed the messages, in order."""


class InputPipeline:
    """Input transformers run in order over a copy of the outgoing messages. One
    pipeline serves any number of requests at once: per-request state lives in the
    context and its report."""

    def __init__(self, transformers: Sequence[InputTransformer]) -> None:
        self.transformers = tuple(transformers)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.transformers]

    async def apply(
        self, messages: Sequence[Message], context: TransformContext
    ) -> TransformResult:
        original = tuple(messages)
        times = _initial_times(context.message_times, len(original))
        report = TransformReport()
        current = list(original)
        applied: list[str] = []
        for transformer in self.transformers:
            step = replace(context, message_times=tuple(times), original=original, report=report)
            try:
                output = await transformer.transform(list(current), step)
            except Overloaded:
                raise
            except Exception as exc:  # a transformer never fails the request
                log.exception("input transformer %s failed; skipped", transformer.name)
                report.note(f"{transformer.name} failed and was skipped: {exc}")
                continue
            if _changed(current, output):
                times = carry_times(current, times, output)
                current = list(output)
                applied.append(transformer.name)
        return TransformResult(
            messages=current,
            notes=report.notes,
            used_snippets=report.used_snippets,
            used_memories=report.used_memories,
            lorebook_entries=report.lorebook_entries,
            applied=applied,
        )


def build_pipeline(
    config: PipelineConfig | None = None,
    *,
    ocr: OcrEngine | None = None,
    knowledge: KnowledgeRetriever | None = None,
    memory: MemoryRetriever | None = None,
    documents: DocumentReader | None = None,
) -> InputPipeline:
    """The nine steps in Rikkahub's order, without those turned off. ``ocr``,
    ``knowledge`` and ``memory`` fill the slots that need a service; a retrieval slot
    without a retriever is left out, the OCR step stays (to note unread images).
    ``documents`` reads attached files (default: ``InlineDocumentReader``, in the
    caller's thread; the server passes its reader processes)."""
    config = config or PipelineConfig()
    steps: list[InputTransformer] = []
    if config.time_reminder.enabled:
        steps.append(TimeReminderTransformer(config.time_reminder))
    if config.injection.enabled and (config.injection.modes or config.injection.lorebook):
        steps.append(PromptInjectionTransformer(config.injection))
    if config.placeholders.enabled:
        steps.append(PlaceholderTransformer(config.placeholders))
    if config.documents.enabled:
        reader = documents if documents is not None else InlineDocumentReader()
        steps.append(DocumentAsPromptTransformer(config.documents, reader))
    if config.ocr.enabled:
        steps.append(OcrTransformer(config.ocr, ocr))
    if config.template.enabled and not _is_identity(config.template.template):
        steps.append(TemplateTransformer(config.template))
    if config.workspace.enabled:
        steps.append(WorkspaceReminderTransformer(config.workspace))
    if config.knowledge.enabled and knowledge is not None:
        steps.append(KnowledgeRetrievalTransformer(config.knowledge, knowledge))
    if config.memory.enabled and memory is not None:
        steps.append(MemoryRetrievalTransformer(config.memory, memory))
    return InputPipeline(steps)


def _is_identity(template: str) -> bool:
    return template.replace(" ", "") == "{{message}}"


def _initial_times(times: Sequence[datetime | None], count: int) -> list[datetime | None]:
    if times and len(times) != count:
        log.warning(
            "message_times has %d entries for %d messages; the missing ones count as unsaved",
            len(times),
            count,
        )
    return [times[i] if i < len(times) else None for i in range(count)]


def _changed(before: Sequence[Message], after: Sequence[Message]) -> bool:
    return len(before) != len(after) or any(a is not b for a, b in zip(before, after, strict=True))
