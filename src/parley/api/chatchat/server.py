"""Chatchat's /server/configs, /server/get_prompt_template and /other/embed_texts.

Langchain-Chatchat 0.3.x (``chatchat/server/api_server/server_routes.py``,
``chatchat/server/utils.py``), called as its client calls them (``ApiRequest.
get_server_configs``, ``get_prompt_template``, ``embed_texts``):

- ``POST /server/configs``: ``{"api_address": ...}``, the server's base URL as the
  request reached it (scheme, host, port and any mount prefix, no trailing slash). It is
  all Chatchat's own answer holds, and a bare object, not ``{code, msg, data}``.
- ``POST /server/get_prompt_template`` JSON ``{type="llm_model", name="default"}``:
  ``{code: 200, msg: "success", data: <the template>}`` from Chatchat's templates
  (``api/chatchat/prompts.py``); an unknown one is Chatchat's ``{code: 500, msg,
  data: "Prompt template not found"}``. Chatchat's client reads the whole answer as text.
- ``POST /other/embed_texts`` JSON ``{texts, embed_model, to_query=false}``:
  ``{code: 200, msg: "success", data: [[float, ...], ...]}``, one vector per text, in
  order, made by the server's knowledge embedder (``knowledge.embedder``); ``code`` 500
  when there is none (knowledge bases off, or ``knowledge.embedder: none``) or it fails. At most
  ``MAX_TEXTS`` texts of ``MAX_TEXT_CHARS`` characters each: more is HTTP 400 with
  ``code`` and ``msg`` (``api/errors.py``).

Deviations: ``embed_model`` names no model here (there is one, the server's): another
name is used anyway and ``msg`` says which model made the vectors. ``to_query`` is
ignored: texts are embedded as the knowledge bases' queries are (multilingual-e5-small's
``query:`` prefix; MiniLM has none). Chatchat 0.3.x itself no
longer serves ``/other/embed_texts`` (0.2.x did); its client still calls it, and this
answers as 0.2.x did.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from parley.api.chatchat.common import reply
from parley.api.chatchat.prompts import template
from parley.api.openapi import answers
from parley.api.shapes import Shape
from parley.api.state import AppState
from parley.knowledge.types import EmbeddingError

router = APIRouter(tags=["langchain-chatchat"])

MAX_TEXTS = 256
"""The most texts one ``embed_texts`` call embeds."""
MAX_TEXT_CHARS = 8_192
"""The longest text ``embed_texts`` takes (an embedder reads far less of it)."""
MAX_FIELD = 200
NOT_FOUND = "Prompt template not found"
"""Chatchat's ``data`` for a template it does not have."""


class PromptBody(BaseModel):
    type: str = Field(default="llm_model", max_length=MAX_FIELD, examples=["rag"])
    name: str = Field(default="default", max_length=MAX_FIELD, examples=["default"])


class EmbedBody(BaseModel):
    texts: list[Annotated[str, Field(max_length=MAX_TEXT_CHARS)]] = Field(max_length=MAX_TEXTS)
    embed_model: str = Field(default="", max_length=MAX_FIELD)
    to_query: bool = False


class ServerConfigs(Shape):
    api_address: str


class TemplateReply(Shape):
    code: int
    msg: str
    data: str | None


class EmbedReply(Shape):
    code: int
    msg: str
    data: list[list[float]] | None


@router.post("/server/configs", **answers(ServerConfigs))
async def server_configs(request: Request) -> dict[str, Any]:
    """Chatchat's ``get_server_configs``: the address the WebUI should call."""
    return {"api_address": str(request.base_url).rstrip("/")}


@router.post("/server/get_prompt_template", **answers(TemplateReply))
async def get_prompt_template(body: PromptBody | None = None) -> dict[str, Any]:
    chosen = body or PromptBody()
    text = template(chosen.type, chosen.name)
    if text is None:
        return reply(
            500,
            f"no prompt template named {chosen.name!r} of type {chosen.type!r}",
            NOT_FOUND,
        )
    return reply(data=text)


@router.post("/other/embed_texts", **answers(EmbedReply))
async def embed_texts(request: Request, body: EmbedBody) -> dict[str, Any]:
    """The texts' vectors by the server's knowledge embedder."""
    state: AppState = request.app.state.parley
    embedder = state.knowledge.embedder if state.knowledge is not None else None
    if embedder is None:
        why = "knowledge bases are off" if state.knowledge is None else "knowledge.embedder: none"
        return reply(500, f"this server has no embedding model ({why})")
    if not body.texts:
        return reply(data=[])
    try:
        vectors = await embedder.embed(body.texts)
    except (EmbeddingError, httpx.HTTPError) as exc:
        return reply(500, f"the texts could not be embedded: {exc}")
    msg = "success"
    if body.embed_model and body.embed_model != embedder.model:
        msg = f"embedded with {embedder.model}, the server's model (not {body.embed_model})"
    rows: list[list[float]] = vectors.tolist()
    return reply(msg=msg, data=rows)
