"""The input pipelines a turn's outgoing request goes through: one per assistant
version (built from its transformer settings, kept), and the default one for turns
without an assistant (placeholders, documents, OCR).

What does not belong here: the transformers themselves (``transforms/``), when the
pipeline runs (``outgoing.py``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import replace

from parley.conversations.assistants import Assistant, TransformerSettings, transformer_settings
from parley.documents.types import DocumentLimits
from parley.messages import FilePart, ImagePart, Message, TextPart
from parley.transforms.input import (
    DocumentPromptConfig,
    DocumentReader,
    InjectionConfig,
    InjectionPosition,
    InputPipeline,
    KnowledgeConfig,
    KnowledgeRetriever,
    LorebookEntry,
    MemoryConfig,
    MemoryRetriever,
    OcrConfig,
    OcrEngine,
    PipelineConfig,
    PlaceholderConfig,
    PromptInjectionConfig,
    TemplateConfig,
    TimeReminderConfig,
    WorkspaceReminderConfig,
    build_pipeline,
)

log = logging.getLogger(__name__)

PIPELINE_CACHE = 64
"""Assistant versions whose pipelines are kept."""


class Pipelines:
    """``knowledge`` and ``memory`` are retrievers bound to their services: they read
    the owner, the bases and the memory scope from each request's context. ``documents``
    reads attached files (the server's reader processes) within ``document_limits``."""

    def __init__(
        self,
        ocr: OcrEngine | None,
        *,
        knowledge: KnowledgeRetriever | None = None,
        memory: MemoryRetriever | None = None,
        knowledge_config: KnowledgeConfig | None = None,
        memory_config: MemoryConfig | None = None,
        documents: DocumentReader | None = None,
        document_limits: DocumentLimits | None = None,
    ) -> None:
        self._ocr = ocr
        self._knowledge = knowledge
        self._memory = memory
        self._knowledge_config = knowledge_config or KnowledgeConfig()
        self._memory_config = memory_config or MemoryConfig()
        self._documents = documents
        self._document_limits = document_limits or DocumentLimits()
        self._default = self._build(pipeline_config(TransformerSettings()))
        self._kept: OrderedDict[tuple[str, float], InputPipeline] = OrderedDict()

    def for_assistant(self, assistant: Assistant | None) -> InputPipeline:
        """The assistant's input pipeline (kept per assistant version)."""
        if assistant is None:
            return self._default
        key = (assistant.id, assistant.updated_at)
        pipeline = self._kept.get(key)
        if pipeline is not None:
            self._kept.move_to_end(key)
            return pipeline
        try:
            config = pipeline_config(transformer_settings(assistant))
        except ValueError:  # a stored setting that no longer validates
            log.exception("assistant %s: invalid transformer settings; defaults used", assistant.id)
            config = pipeline_config(TransformerSettings())
        pipeline = self._build(config)
        self._kept[key] = pipeline
        while len(self._kept) > PIPELINE_CACHE:
            self._kept.popitem(last=False)
        return pipeline

    def _build(self, config: PipelineConfig) -> InputPipeline:
        config = replace(
            config,
            documents=replace(config.documents, limits=self._document_limits),
            knowledge=self._knowledge_config,
            memory=self._memory_config,
        )
        return build_pipeline(
            config,
            ocr=self._ocr,
            knowledge=self._knowledge,
            memory=self._memory,
            documents=self._documents,
        )


def default_pipeline_acts(messages: list[Message]) -> bool:
    """Whether the default pipeline (placeholders, documents, OCR) has anything to do."""
    for message in messages:
        for part in message.parts:
            if isinstance(part, FilePart | ImagePart):
                return True
            if isinstance(part, TextPart) and "{{" in part.text:
                return True
    return False


_POSITIONS: dict[str, InjectionPosition] = {
    "before_system": "before_system_prompt",
    "after_system": "after_system_prompt",
    "top": "top_of_chat",
    "bottom": "bottom_of_chat",
    "at_depth": "at_depth",
}


def pipeline_config(settings: TransformerSettings) -> PipelineConfig:
    """An assistant's transformer settings as the pipeline's configuration. The defaults
    (no assistant): placeholders, documents and OCR on (OCR acts only for a model that
    cannot read images), the rest off. Retrieval is set by ``Pipelines`` (on when its
    service exists; each request says whether it wants it)."""
    modes = tuple(
        InjectionConfig(
            name=item.name or f"injection {index + 1}",
            content=item.content,
            position=_POSITIONS[item.position],
            depth=item.depth,
            role=item.role,
            enabled=item.enabled,
        )
        for index, item in enumerate(settings.prompt_injections)
    )
    lorebook = tuple(
        LorebookEntry(
            name=entry.name or f"entry {index + 1}",
            content=entry.content,
            keywords=tuple(entry.keywords),
            use_regex=entry.use_regex,
            case_sensitive=entry.case_sensitive,
            scan_depth=entry.scan_depth,
            constant=entry.constant,
            position=_POSITIONS[entry.position],
            depth=entry.depth,
            role=entry.role,
            enabled=entry.enabled,
        )
        for index, entry in enumerate(settings.lorebook)
    )
    template = settings.template
    return PipelineConfig(
        time_reminder=TimeReminderConfig(enabled=settings.time_reminder),
        injection=PromptInjectionConfig(modes=modes, lorebook=lorebook),
        placeholders=PlaceholderConfig(enabled=settings.placeholders, single_braces=False),
        documents=DocumentPromptConfig(enabled=settings.documents),
        # images for a model that cannot read them: chat.ocr_model's reading, or a note
        ocr=OcrConfig(enabled=True),
        template=TemplateConfig(template=template)
        if template is not None
        else TemplateConfig(enabled=False),
        workspace=WorkspaceReminderConfig(enabled=settings.workspace_reminder),
        knowledge=KnowledgeConfig(enabled=False),
        memory=MemoryConfig(enabled=False),
    )
