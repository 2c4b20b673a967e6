"""The prompt templates Langchain-Chatchat's routes use and serve, by type and name.

Chatchat keeps them in its ``prompt_settings.yaml`` (``PromptSettings``): its knowledge
chat, file chat and direct tool calls put the retrieved text and the question into the
``rag`` templates (``default`` when something matched, ``empty`` when nothing did), and
``/server/get_prompt_template`` hands any of them to its WebUI. These are its 0.3.1.3
defaults, so that a Chatchat user gets the answers they are used to (the ``rag`` ones ask
for an answer in Chinese, as Chatchat's do). Parley's own routes do not use them: its
``<knowledge_context>`` block is built by ``transforms/retrieval.py``.

Templates are Jinja2 in Chatchat; the only syntax they use is ``{{ name }}``, which
``render`` fills (a value is put in once, never re-read as a template).
"""

from __future__ import annotations

import re

PROMPTS: dict[str, dict[str, str]] = {
    "preprocess_model": {
        "default": (
            "你只要回复0 和 1 ，代表不需要使用工具。以下几种问题不需要使用工具:\n"
            "1. 需要联网查询的内容\n"
            "2. 需要计算的内容\n"
            "3. 需要查询实时性的内容\n"
            "如果我的输入满足这几种情况，返回1。其他输入，请你回复0，你只要返回一个数字\n"
            "这是我的问题:"
        ),
    },
    "llm_model": {
        "default": "{{input}}",
        "with_history": (
            "The following is a friendly conversation between a human and an AI.\n"
            "The AI is talkative and provides lots of specific details from its context.\n"
            "If the AI does not know the answer to a question, it truthfully says it does "
            "not know.\n\n"
            "Current conversation:\n"
            "{{history}}\n"
            "Human: {{input}}\n"
            "AI:"
        ),
    },
    "rag": {
        "default": (
            "【指令】根据已知信息，简洁和专业的来回答问题。"
            "如果无法从中得到答案，请说 “根据已知信息无法回答该问题”，不允许在答案中添加编造成分，"
            "答案请使用中文。\n\n"
            "【已知信息】{{context}}\n\n"
            "【问题】{{question}}\n"
        ),
        "empty": "请你回答我的问题:\n{{question}}",
    },
}
"""Chatchat 0.3.1.3's templates by type, then name."""

NO_MATCH = "<span style='color:red'>未找到相关文档,该回答为大模型自身能力解答！</span>"
"""What Chatchat's knowledge chat lists as its references when no document matched."""

_FIELD = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def template(type_: str, name: str) -> str | None:
    """The template ``name`` of ``type_``; None when there is none."""
    return PROMPTS.get(type_, {}).get(name)


def render(text: str, **values: str) -> str:
    """``text`` with each ``{{ name }}`` replaced by its value (unknown names: empty)."""
    return _FIELD.sub(lambda match: values.get(match.group(1), ""), text)


def rag_prompt(question: str, context: str, *, matched: bool, name: str = "default") -> str:
    """The user message of a knowledge answer: the ``rag`` template ``name`` (``empty``
    when nothing matched, as Chatchat does; an unknown name is ``default``)."""
    chosen = "empty" if not matched else name
    text = template("rag", chosen) or PROMPTS["rag"]["default"]
    return render(text, context=context, question=question)
