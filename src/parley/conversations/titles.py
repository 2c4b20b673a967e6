"""Titles and follow-up suggestions, written after a successful turn.

behaviours.md section 4: a title (when the conversation has none, or only the
provisional one the server took from the first user line) from the last 4 messages, and
up to ``max_suggestions`` follow-ups the *user* might send next from the last 8, both
asked of a fast model (the caller chooses it) through the ``Completer``, so interceptors,
audit rows (``purpose="title"``), usage limits, retries and fallbacks apply.

Public API::

    TitleWriter(completer, meta, store, *, max_suggestions)
        .after_turn(owner=, conversation_id=, message_id=, models=, turn=,
                    titles=True, suggestions=True) -> None      never raises
    clean_title(text) -> str | None          the model's answer made a title, or None
    parse_suggestions(text, limit) -> list[str]

Decisions:

- The branch is re-read first; suggestions are asked for only while ``message_id`` is
  still its head, and both results are saved only if the conversation is still as it
  was (``store/meta.py`` re-reads in the writing transaction): a rename the user makes
  while the model answers wins; suggestions for a branch that has moved on are dropped.
- What the model sees: user and assistant messages that have text (system messages,
  reasoning, tool calls and their results, images and files are left out), each cut to
  ``MESSAGE_CHARS``, in a ``<conversation>`` block.
- The two calls run concurrently; each failure (provider error, an unusable answer, a
  database error, the conversation deleted meanwhile) is logged with the conversation
  id and swallowed. Cancellation is not a failure: it propagates.

What does not belong here: choosing the model and when to run (the conversation
service), the SQL (``store/meta.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Coroutine, Sequence
from typing import Any

from parley.agent.completion import Completer
from parley.errors import ParleyError
from parley.interceptors.protocol import TurnInfo
from parley.messages import TextPart, text_message
from parley.providers.registry import ResolvedModel
from parley.store.meta import ConversationMeta
from parley.store.repository import ConversationStore, StoredMessage

log = logging.getLogger(__name__)

TITLE_MESSAGES = 4
SUGGESTION_MESSAGES = 8
MESSAGE_CHARS = 1_000
TITLE_CHARS = 80
SUGGESTION_CHARS = 200
TITLE_MAX_TOKENS = 60
SUGGESTIONS_MAX_TOKENS = 400

TITLE_PROMPT = """\
Write a short title for the conversation below.

Rules:
1. Use the language the conversation is written in.
2. At most 8 words, naming its topic.
3. Reply with the title only: no quotes, no "Title:" label, no markdown, no final period.

<conversation>
{conversation}
</conversation>"""

SUGGESTIONS_PROMPT = """\
Suggest up to {limit} follow-up messages the user might send next in the conversation below.

Rules:
1. Write as the user, addressing the assistant: questions or requests, not answers.
2. Use the language the user writes in, and imitate the user's style.
3. Each one short (at most 15 words), distinct, relevant, and clear on its own.
4. Reply with a JSON array of strings only, for example ["First?", "Second?"].

<conversation>
{conversation}
</conversation>"""


class TitleWriter:
    def __init__(
        self,
        completer: Completer,
        meta: ConversationMeta,
        store: ConversationStore,
        *,
        max_suggestions: int,
    ) -> None:
        self._completer = completer
        self._meta = meta
        self._store = store
        self._max_suggestions = max_suggestions

    async def after_turn(
        self,
        *,
        owner: str,
        conversation_id: str,
        message_id: str,
        models: list[ResolvedModel],
        turn: TurnInfo,
        titles: bool = True,
        suggestions: bool = True,
    ) -> None:
        """Generate and save what is asked for and still wanted. Never raises (but for
        cancellation)."""
        suggestions = suggestions and self._max_suggestions > 0
        if not (titles or suggestions) or not models:
            return
        try:
            branch = await self._store.branch(owner, conversation_id)
            if titles:
                title, provisional = await self._meta.title_state(owner, conversation_id)
                titles = provisional or title is None or not title.strip()
        except Exception as exc:
            _failed(conversation_id, "reading the conversation", exc)
            return
        if suggestions and (not branch or branch[-1].id != message_id):
            log.info("conversation %s moved on: no suggestions", conversation_id)
            suggestions = False
        jobs: list[Coroutine[Any, Any, None]] = []
        if titles:
            jobs.append(self._title(owner, conversation_id, branch, models, turn))
        if suggestions:
            jobs.append(self._suggestions(owner, conversation_id, message_id, branch, models, turn))
        await asyncio.gather(*jobs)

    async def _title(
        self,
        owner: str,
        conversation_id: str,
        branch: list[StoredMessage],
        models: list[ResolvedModel],
        turn: TurnInfo,
    ) -> None:
        conversation = _transcript(branch, TITLE_MESSAGES)
        if not conversation:
            return
        prompt = TITLE_PROMPT.format(conversation=conversation)
        try:
            answer = await self._completer.complete(
                models,
                [text_message("user", prompt)],
                max_tokens=TITLE_MAX_TOKENS,
                purpose="title",
                turn=turn,
            )
            title = clean_title(answer.text)
            if title is None:
                log.info("conversation %s: the title answer was unusable", conversation_id)
                return
            if not await self._meta.set_generated_title(owner, conversation_id, title):
                log.info("conversation %s was titled meanwhile: kept", conversation_id)
        except Exception as exc:
            _failed(conversation_id, "generating a title", exc)

    async def _suggestions(
        self,
        owner: str,
        conversation_id: str,
        message_id: str,
        branch: list[StoredMessage],
        models: list[ResolvedModel],
        turn: TurnInfo,
    ) -> None:
        conversation = _transcript(branch, SUGGESTION_MESSAGES)
        if not conversation:
            return
        limit = self._max_suggestions
        prompt = SUGGESTIONS_PROMPT.format(limit=limit, conversation=conversation)
        try:
            answer = await self._completer.complete(
                models,
                [text_message("user", prompt)],
                max_tokens=SUGGESTIONS_MAX_TOKENS,
                purpose="title",
                turn=turn,
            )
            items = parse_suggestions(answer.text, limit)
            if not items:
                log.info("conversation %s: the suggestions answer was unusable", conversation_id)
                return
            saved = await self._meta.set_suggestions(owner, conversation_id, message_id, items)
            if not saved:
                log.info("conversation %s moved on: suggestions dropped", conversation_id)
        except Exception as exc:
            _failed(conversation_id, "generating suggestions", exc)


def _failed(conversation_id: str, doing: str, exc: Exception) -> None:
    if isinstance(exc, LookupError):
        log.info("conversation %s is gone (%s)", conversation_id, doing)
    elif isinstance(exc, ParleyError):
        log.warning("conversation %s: %s failed: %s", conversation_id, doing, exc.message)
    else:
        log.warning("conversation %s: %s failed", conversation_id, doing, exc_info=exc)


# --- the prompt -------------------------------------------------------------------------

_SPEAKERS = {"user": "User", "assistant": "Assistant"}


def _transcript(branch: Sequence[StoredMessage], count: int) -> str:
    """The last ``count`` user and assistant messages that have text, one block each."""
    lines: list[str] = []
    for message in branch:
        speaker = _SPEAKERS.get(message.role)
        if speaker is None or message.status in ("failed", "streaming"):
            continue
        text = "\n\n".join(p.text for p in message.parts if isinstance(p, TextPart) and p.text)
        text = text.strip()
        if not text:
            continue
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS].rstrip() + " […]"
        # the block's own closing tag inside a message would end it early
        text = text.replace("</conversation>", "</ conversation>")
        lines.append(f"{speaker}: {text}")
    return "\n\n".join(lines[-count:])


# --- reading the answers ----------------------------------------------------------------

_FENCE = re.compile(r"^\s*```")
_LABEL = re.compile(r"^[*_]*(?:title|标题|题目)[*_]*\s*[:：][*_]*\s*", re.IGNORECASE)
_HEADING = re.compile(r"^(?:#{1,6}\s+|>\s*)")
_BULLET = re.compile(r"^(?:[-*•·+]\s+|\(?\d{1,2}[.)]\s+|\d{1,2}、\s*)")
_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_QUOTES = "\"'`“”‘’«»„「」『』"
_STRAY = '"`“”«»„「」『』'
"""Quotes stripped even when their partner is missing (not apostrophes: "students'")."""
_EMPHASIS = ("**", "__", "~~", "*", "_")
_SPACES = re.compile(r"\s+")


def clean_title(text: str) -> str | None:
    """The model's answer as a title: its first line with text (an introduction ending
    in a colon skipped), without quotes, markdown, a "Title:" label or a final period,
    at most ``TITLE_CHARS`` long; None when nothing is left."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not _FENCE.match(ln)]
    for index, line in enumerate(lines):
        if line.rstrip().endswith((":", "：")) and index + 1 < len(lines):
            continue
        title = _SPACES.sub(" ", line).strip()
        while True:
            before = title
            title = _HEADING.sub("", title)
            title = _BULLET.sub("", title)
            title = _LABEL.sub("", title)
            title = _unwrap(title)
            title = title.rstrip(".。,，;；:：").strip()
            if title == before:
                break
        if title:
            return _shorten(title, TITLE_CHARS)
    return None


def parse_suggestions(text: str, limit: int) -> list[str]:
    """Up to ``limit`` distinct follow-ups (compared without case), each at most
    ``SUGGESTION_CHARS`` long: the strings of a JSON array (a cut-off array gives its
    complete strings), else one per line without bullets or numbers."""
    if limit <= 0:
        return []
    candidates = _json_items(text)
    if candidates is None:
        candidates = []
        for line in text.splitlines():
            line = line.strip()
            if not line or _FENCE.match(line) or line in ("[", "]", "[]"):
                continue
            if line.endswith((":", "：")):  # an introduction ("Here are some ideas:")
                continue
            candidates.append(_BULLET.sub("", line).rstrip(",").strip())
    found: list[str] = []
    seen: set[str] = set()
    for candidate in candidates:
        item = _unwrap(_SPACES.sub(" ", candidate).strip())
        if not item:
            continue
        item = _shorten(item, SUGGESTION_CHARS)
        key = item.casefold()
        if key in seen:
            continue
        seen.add(key)
        found.append(item)
        if len(found) == limit:
            break
    return found


def _json_items(text: str) -> list[str] | None:
    """The strings of the JSON array in ``text``; None when there is none."""
    start = text.find("[")
    if start < 0:
        return None
    end = text.rfind("]")
    if end > start:
        try:
            value = json.loads(text[start : end + 1])
        except ValueError:
            value = None
        if isinstance(value, list):
            strings = [item for item in value if isinstance(item, str)]
            if strings or not value:
                return strings
    if not re.match(r'\[\s*"', text[start:]):
        return None
    # cut off by max_tokens, or a little broken: its complete strings
    strings = []
    for quoted in _JSON_STRING.findall(text[start:]):
        try:
            strings.append(json.loads(quoted))
        except ValueError:
            continue
    return strings


def _unwrap(text: str) -> str:
    """``text`` without the quotes and emphasis marks that wrap all of it."""
    while True:
        before = text
        for mark in _EMPHASIS:
            if len(text) > 2 * len(mark) and text.startswith(mark) and text.endswith(mark):
                text = text[len(mark) : -len(mark)].strip()
        if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
            text = text[1:-1].strip()
        elif _stray_quote(text):
            text = text.strip(_STRAY).strip()
        if text == before:
            return text


def _stray_quote(text: str) -> bool:
    """One quote in all of ``text``, at an end (the other was lost)."""
    at_end = bool(text) and (text[0] in _STRAY or text[-1] in _STRAY)
    return at_end and sum(text.count(q) for q in _QUOTES) == 1


def _shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, at a word boundary when one is near."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-–—")
