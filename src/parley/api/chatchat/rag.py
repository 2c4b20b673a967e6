"""Langchain-Chatchat 0.3.1.3's answers from retrieved text: its knowledge chat, its file
chat and its direct tool call, each answered by Parley's chat pipeline (the agent,
interceptors, usage and cost all apply).

- ``POST /knowledge_base/{mode}/{param}/chat/completions`` (Chatchat's ``kb_chat``, what
  its WebUI's RAG page calls with the OpenAI client): an OpenAI chat body plus
  Chatchat's ``top_k`` (3), ``score_threshold`` (2.0), ``prompt_name`` ("default") and
  ``return_direct``. ``mode`` is ``local_kb`` (``param``: the caller's base, by name or
  id) or ``temp_kb`` (``param``: a temporary base's id, from ``upload_temp_docs``);
  ``search_engine`` is refused, as Parley has no search backend. The base is searched
  for the last user message, whose text becomes the ``rag`` prompt ``prompt_name``
  around the passages found (``empty`` when none matched). The answer is a chat
  completion with ``docs`` (Chatchat's ``format_reference`` strings, with download
  links built from the request's own base URL; ``NO_MATCH`` alone when none matched):
  streamed, the first chunk holds ``docs`` and an empty delta, the text follows;
  whole, ``docs`` is a top-level field. ``return_direct``: only ``docs``, in one
  chunk (stream) or one ``chat.completion``, and no model is called. Statuses are
  null, as in Chatchat's plain chat.
- ``POST /chat/file_chat`` (Chatchat's ``file_chat``, called by ``ApiRequest``) JSON
  ``{query, knowledge_id, top_k, score_threshold, history, stream, model_name,
  temperature, max_tokens, prompt_name}``: the same over a temporary base; streamed
  as ``data: {"answer": token}`` events and a last ``data: {"docs": [...]}``, or one
  ``{"answer", "docs"}`` object. Its references have no links (as Chatchat's).
- ``direct_tool_answer`` (called by ``/chat/chat/completions``): a ``tool_choice``
  naming a tool and a non-empty ``tool_input`` make the server call the tool itself
  with that input; its result becomes the ``rag`` prompt's context, and the answer
  (no tools offered) begins with a chunk ``{content, tool_call, tool_output, is_ref:
  true}``, which Chatchat's WebUI shows in its "参考资料" expander.

A missing base (or temporary base) is HTTP 404, its body carrying Chatchat's ``code``
and ``msg`` (``未找到知识库 <name>``) beside OpenAI's ``error`` (``api/errors.py``).

Deviations: Chatchat's ``file_chat`` answers Server-Sent Events even without
``stream``, here one JSON object (``ApiRequest`` reads either); it ignores
``prompt_name``, here it is used. A streamed answer restarted by a retry cannot take
back the text file chat already sent: an event ``{"answer": "", "restart": {...}}``
says so (the whole answer is right). Scores and thresholds are those of
``/knowledge_base/search_docs`` (see ``api/chatchat/kb.py``).

What does not belong here: the chat pipeline and its stream (``api/chat.py``,
``api/replies.py``), the prompt templates (``api/chatchat/prompts.py``), temporary
bases (``knowledge/temporary.py``, ``api/chatchat/temp.py``), the tools
(``api/chatchat/tools.py``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import JSONResponse, Response

from parley.api.chat import CHAT_ERRORS, answer, chat_request, read_json_object
from parley.api.chatchat.common import find_base, valid_name
from parley.api.chatchat.kb import (
    MAX_SCORE,
    SCORE_THRESHOLD,
    VECTOR_SEARCH_TOP_K,
    search_documents,
)
from parley.api.chatchat.prompts import NO_MATCH, rag_prompt
from parley.api.chatchat.tool_names import resolve
from parley.api.chatchat.tools import NoSuchTool, ToolCallResult, call_tool
from parley.api.completion_shapes import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    CompletionUsage,
    StreamErrorEvent,
)
from parley.api.errors import validation_error
from parley.api.openapi import answers, event_stream, json_body, model_schema
from parley.api.replies import completion_body, failure_response, finished
from parley.api.shapes import Shape
from parley.api.sse import DONE, EventStream
from parley.api.state import AppState
from parley.api.statuses import CHATCHAT_PLAIN
from parley.api.wire import check_counts, to_turn
from parley.api.wire_models import options_model
from parley.conversations.generation import Generation
from parley.errors import InvalidRequest, NotFound, ParleyError
from parley.events import Done, Event, Restart, StreamError, TextDelta
from parley.identity import Caller
from parley.ids import new_id
from parley.knowledge.service import KnowledgeService
from parley.knowledge.temporary import find_temp_base
from parley.store.knowledge import KnowledgeBase

router = APIRouter(tags=["langchain-chatchat"])

MODES = ("local_kb", "temp_kb", "search_engine")
MAX_QUERY = 20_000


# --- documented shapes -------------------------------------------------------------------


class KbChatCompletion(ChatCompletion):
    """The whole knowledge-chat answer: a chat completion and its references."""

    docs: list[str] = Field(description="Chatchat's format_reference strings.")


class KbChatChunk(ChatCompletionChunk):
    docs: list[str] | None = Field(
        default=None, description="The first chunk only (its delta is empty): the references."
    )


class DocsOnly(Shape):
    """``return_direct``: the references, no answer (no model was called)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str | None
    choices: list[Choice]
    usage: CompletionUsage
    status: None
    message_type: Literal[1]
    message_id: None
    docs: list[str]


class DocsOnlyChunk(Shape):
    """``return_direct`` streamed: this one chunk, then ``[DONE]``."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str | None
    choices: list[ChunkChoice]
    status: None
    message_type: Literal[1]
    message_id: None
    docs: list[str]


class FileChatReply(Shape):
    answer: str
    docs: list[str]


class FileChatToken(Shape):
    answer: str
    restart: dict[str, Any] | None = Field(
        default=None, description="A retry restarted the answer: the text sent is void."
    )


class FileChatDocs(Shape):
    """The stream's last event."""

    docs: list[str]


class FileChatFailure(Shape):
    """A failure after the stream began; the stream then ends."""

    code: int
    msg: str


_KB_ANSWERS = answers(
    content={
        "application/json": {
            "schema": {"anyOf": [model_schema(KbChatCompletion), model_schema(DocsOnly)]}
        },
        **event_stream(
            KbChatChunk,
            DocsOnlyChunk,
            StreamErrorEvent,
            description="With `stream: true`: the references chunk, then the answer's "
            "`chat.completion.chunk` objects, then `data: [DONE]`.",
        ),
    },
    errors=(*CHAT_ERRORS, 408),
)
_FILE_ANSWERS = answers(
    content={
        "application/json": {"schema": model_schema(FileChatReply)},
        **event_stream(
            FileChatToken,
            FileChatDocs,
            FileChatFailure,
            description="With `stream: true`: `{answer}` events, then one `{docs}`.",
        ),
    },
    errors=(*CHAT_ERRORS, 408),
)


# --- search and references ---------------------------------------------------------------


def references(kb_name: str, docs: list[dict[str, Any]], base_url: str) -> list[str]:
    """Chatchat's ``format_reference``: each passage under its file name, linked to
    ``download_doc`` on this server; ``NO_MATCH`` alone when there is none."""
    root = base_url.strip(" /")
    found = []
    for number, doc in enumerate(docs, 1):
        filename = doc["metadata"]["source"]
        query = urlencode({"knowledge_base_name": kb_name, "file_name": filename})
        link = f"{root}/knowledge_base/download_doc?{query}"
        found.append(f"出处 [{number}] [{filename}]({link}) \n\n{doc['page_content']}\n\n")
    return found or [NO_MATCH]


def file_references(docs: list[dict[str, Any]]) -> list[str]:
    """File chat's references: as ``references``, without links (as Chatchat's file
    chat lists them)."""
    found = [
        f"出处 [{number}] [{doc['metadata']['source']}] \n\n{doc['page_content']}\n\n"
        for number, doc in enumerate(docs, 1)
    ]
    return found or [NO_MATCH]


def context_of(docs: list[dict[str, Any]], separator: str = "\n\n") -> str:
    return separator.join(doc["page_content"] for doc in docs)


# --- messages ----------------------------------------------------------------------------


def text_of(content: Any) -> str:
    """A message's text: its string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def last_question(data: dict[str, Any]) -> tuple[int, str]:
    """The index and text of the body's last user message (400 when there is none)."""
    messages = data.get("messages")
    if isinstance(messages, list):
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, dict) and message.get("role") == "user":
                return index, text_of(message.get("content"))
    raise InvalidRequest("the messages need a user message to answer", param="messages")


def with_prompt(data: dict[str, Any], index: int, prompt: str) -> dict[str, Any]:
    """``data`` with the message at ``index`` saying ``prompt`` (the body is not changed)."""
    messages = list(data["messages"])
    messages[index] = {**messages[index], "content": prompt}
    return {**data, "messages": messages}


# --- the knowledge chat ------------------------------------------------------------------


class KbChatOptions(BaseModel):
    """The knowledge chat's own fields (Chatchat's defaults)."""

    top_k: int = Field(default=VECTOR_SEARCH_TOP_K, ge=0, le=1_000)
    score_threshold: float = Field(default=SCORE_THRESHOLD, ge=0.0, le=MAX_SCORE)
    prompt_name: str = Field(default="default", max_length=100)
    return_direct: bool = Field(default=False, description="Only the references; no model.")


KbChatRequest = options_model(
    "KbChatRequest",
    "A chat-completions body and Chatchat's knowledge-chat options.",
    drop=(),
    **{name: (f.annotation, copy.copy(f)) for name, f in KbChatOptions.model_fields.items()},
)


def kb_options(data: dict[str, Any]) -> KbChatOptions:
    """Take the knowledge chat's fields out of ``data`` (the rest is a chat body)."""
    given = {name: data.pop(name) for name in KbChatOptions.model_fields if name in data}
    given = {name: value for name, value in given.items() if value is not None}
    try:
        return KbChatOptions.model_validate(given)
    except ValidationError as exc:
        raise validation_error(exc) from None


async def open_knowledge(
    state: AppState, owner: str, mode: str, param: str
) -> tuple[KnowledgeService, KnowledgeBase]:
    """The base a knowledge chat searches; NotFound (Chatchat's message) when it is
    missing, InvalidRequest for a mode Parley cannot serve."""
    if mode not in MODES:
        raise NotFound(f"unknown knowledge chat mode {mode!r}: use local_kb or temp_kb")
    if mode == "search_engine":
        raise InvalidRequest(
            f"搜索引擎对话不可用: this server has no search engine ({param!r} not available); "
            "use local_kb or temp_kb",
            code="unsupported_mode",
        )
    service = state.knowledge
    if service is None:
        raise NotFound("knowledge bases are turned off on this server (knowledge.enabled)")
    if mode == "temp_kb":
        base = await find_temp_base(service, owner, param)
        missing = f"未找到临时知识库 {param}，请先上传文件"
    else:
        base = await find_base(service, owner, param) if valid_name(param) else None
        missing = f"未找到知识库 {param}"
    if base is None:
        raise NotFound(missing)
    return service, base


@router.post(
    "/knowledge_base/{mode}/{param}/chat/completions",
    openapi_extra=json_body(KbChatRequest),
    **_KB_ANSWERS,
)
async def kb_chat(request: Request, mode: str, param: str) -> Response:
    """Chatchat's knowledge chat, as its WebUI's OpenAI client calls it."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    data = await read_json_object(request, state)
    options = kb_options(data)
    if not data.get("max_tokens"):
        data.pop("max_tokens", None)  # Chatchat: 0 or null means the default
    chat_request(data)  # a body that cannot be answered searches nothing
    service, base = await open_knowledge(state, caller.owner, mode, param)
    index, question = last_question(data)
    docs = await search_documents(
        service,
        caller.owner,
        base,
        question[:MAX_QUERY],
        top_k=options.top_k,
        score_threshold=options.score_threshold,
    )
    shown = references(param, docs, str(request.base_url))
    if options.return_direct:
        return docs_only(shown, data)
    prompt = rag_prompt(question, context_of(docs), matched=bool(docs), name=options.prompt_name)
    return await answer(
        state,
        request,
        caller,
        with_prompt(data, index, prompt),
        source="chatchat",
        create_missing=True,
        dialect=CHATCHAT_PLAIN,
        header=({"docs": shown},),
    )


def docs_only(docs: list[str], data: dict[str, Any]) -> Response:
    """``return_direct``: the references and no answer. Streamed, one chunk and
    ``[DONE]`` (Chatchat's WebUI takes the first chunk's ``docs``); else one
    ``chat.completion``."""
    head = {
        "id": f"chatcmpl-{new_id('msg')}",
        "created": int(time.time()),
        "model": data.get("model"),
        "status": None,
        "message_type": 1,
        "message_id": None,
        "docs": docs,
    }
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "stop"}
    if data.get("stream") is True:
        delta = {"role": "assistant", "content": ""}
        chunk = {**head, "object": "chat.completion.chunk", "choices": [{**choice, "delta": delta}]}
        return Response(
            b"data: " + orjson.dumps(chunk) + b"\n\n" + DONE, media_type="text/event-stream"
        )
    message = {"role": "assistant", "content": "", "refusal": None}
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    completion = {
        **head,
        "object": "chat.completion",
        "choices": [{**choice, "message": message}],
        "usage": usage,
    }
    return JSONResponse(completion)


# --- the file chat -----------------------------------------------------------------------


class HistoryMessage(BaseModel):
    role: str = Field(max_length=20)
    content: str


class FileChatBody(BaseModel):
    """Chatchat's ``file_chat`` body (its defaults)."""

    query: str = Field(min_length=1, max_length=MAX_QUERY)
    knowledge_id: str = Field(min_length=1, max_length=200)
    top_k: int = Field(default=VECTOR_SEARCH_TOP_K, ge=0, le=1_000)
    score_threshold: float = Field(default=SCORE_THRESHOLD, ge=0.0, le=MAX_SCORE)
    history: list[HistoryMessage] = Field(default_factory=list)
    stream: bool = False
    model_name: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int | None = None
    prompt_name: str = Field(default="default", max_length=100)


@router.post("/chat/file_chat", openapi_extra=json_body(FileChatBody), **_FILE_ANSWERS)
async def file_chat(request: Request) -> Response:
    """Chatchat's file chat over a temporary base, as ``ApiRequest.file_chat`` calls it."""
    state: AppState = request.app.state.parley
    caller = await state.auth.caller(request)
    try:
        body = FileChatBody.model_validate(await read_json_object(request, state))
    except ValidationError as exc:
        raise validation_error(exc) from None
    service, base = await open_knowledge(state, caller.owner, "temp_kb", body.knowledge_id)
    docs = await search_documents(
        service,
        caller.owner,
        base,
        body.query,
        top_k=body.top_k,
        score_threshold=body.score_threshold,
    )
    prompt = rag_prompt(
        body.query, context_of(docs, "\n"), matched=bool(docs), name=body.prompt_name
    )
    chat = {
        "messages": [*(m.model_dump() for m in body.history), {"role": "user", "content": prompt}],
        "model": body.model_name or None,
        "temperature": body.temperature,
        "max_tokens": body.max_tokens or None,
        "stream": body.stream,
    }
    generation = await prepare(state, caller, chat)
    if body.stream:
        return file_stream(state, generation, file_references(docs))
    try:
        done = await finished(state, generation, request)
    except ParleyError as exc:
        return failure_response(exc, generation)
    text = completion_body(generation, done)["choices"][0]["message"]["content"] or ""
    return JSONResponse({"answer": text, "docs": file_references(docs)})


async def prepare(state: AppState, caller: Caller, data: dict[str, Any]) -> Generation:
    """A Chatchat turn for the chat body ``data``, prepared as ``answer`` prepares one."""
    data = {name: value for name, value in data.items() if value is not None}
    check_counts(data, state.settings.chat)
    turn = to_turn(
        chat_request(data),
        caller=caller,
        source="chatchat",
        limits=state.settings.chat,
        tools=state.tools,
        create_missing=True,
    )
    return await state.service.prepare(turn)


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def file_stream(state: AppState, generation: Generation, docs: list[str]) -> Response:
    """The generation's text as ``{"answer": token}`` events, then ``{"docs"}``. A
    failure before the first token is an HTTP error; after it, a ``{code, msg}`` event
    (what ``ApiRequest``'s ``check_error_msg`` reads) ends the stream."""
    failed: list[ParleyError] = []

    def run(write: Callable[[bytes | None], Awaitable[None]]) -> None:
        started = False

        async def deliver(item: Event) -> None:
            nonlocal started
            match item:
                case TextDelta(text=text) if text:
                    started = True
                    await write(event({"answer": text}))
                case Restart(clear=True, keep_content_chars=kept) if started:
                    await write(event({"answer": "", "restart": {"keep_content_chars": kept}}))
                case Done():
                    await write(event({"docs": docs}))
                    await write(None)
                case StreamError(error=error):
                    if not started:
                        failed.append(error)
                    else:
                        await write(event({"code": error.status, "msg": error.message}))
                    await write(None)

        async def sink(item: Event) -> None:
            try:
                await deliver(item)
            except BaseException:
                await write(None)  # whatever failed, the response ends
                raise

        state.service.start(generation, sink)

    return EventStream(
        run,
        lambda: failure_response(failed[0], generation) if failed else None,
        on_disconnect=generation.detach,
        keepalive_seconds=state.settings.server.keepalive_seconds,
    )


# --- the direct tool call ----------------------------------------------------------------


def direct_call(data: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The tool and input of Chatchat's direct call: ``tool_choice`` a name and
    ``tool_input`` (top level, or in ``extra_body``) a non-empty object; else None."""
    name = data.get("tool_choice")
    extra = data.get("extra_body")
    tool_input = data.get("tool_input")
    if tool_input is None and isinstance(extra, dict):
        tool_input = extra.get("tool_input")
    if not isinstance(name, str) or name in ("none", "auto", "required"):
        return None
    if not isinstance(tool_input, dict) or not tool_input:
        return None
    return name, tool_input


NO_PASSAGE = "没有找到相关文档,请更换关键词重试"
"""Chatchat's knowledge tool's context when it found nothing (its ``format_context``)."""


def tool_context(result: ToolCallResult) -> str:
    """What the ``rag`` prompt gets of a tool's result: a knowledge search's passages,
    one after another (as Chatchat's ``format_context``), else the tool's text."""
    data = result.data
    if not result.is_error and isinstance(data, dict) and isinstance(data.get("docs"), list):
        docs = [doc for doc in data["docs"] if isinstance(doc, dict) and "page_content" in doc]
        return context_of(docs) if docs else NO_PASSAGE
    return result.text


async def direct_tool_answer(
    state: AppState, request: Request, caller: Caller, data: dict[str, Any]
) -> Response | None:
    """Chatchat's direct tool call on ``/chat/chat/completions`` (None: the body is not
    one). The tool runs with the given input; the model answers the last user message
    with its result as the ``rag`` context, and no tools; the answer's first chunk (or
    the whole answer's top level) carries the result for the WebUI's references."""
    chosen = direct_call(data)
    if chosen is None:
        return None
    name, tool_input = chosen
    chat_request(data)  # a body that cannot be answered runs no tool
    index, question = last_question(data)
    try:
        result = await call_tool(
            state, caller.owner, resolve(name, state.tools) or name, tool_input, caller=caller
        )
    except NoSuchTool:
        raise NotFound(f"未找到工具 {name}: this server has no tool named {name!r}") from None
    prompt = rag_prompt(question, tool_context(result), matched=True)
    rest = {
        key: value
        for key, value in with_prompt(data, index, prompt).items()
        if key not in ("tools", "tool_choice", "tool_input")
    }
    if isinstance(rest.get("extra_body"), dict):
        rest["extra_body"] = {k: v for k, v in rest["extra_body"].items() if k != "tool_input"}
    header = {
        "content": result.text,
        "tool_call": name,
        "tool_output": result.data,
        "is_ref": True,
        "is_error": result.is_error,
    }
    return await answer(
        state,
        request,
        caller,
        rest,
        source="chatchat",
        create_missing=True,
        dialect=CHATCHAT_PLAIN,
        header=(header,),
    )
