"""Langchain-Chatchat's ``status`` field on chat chunks, and which numbering a route uses.

Chatchat 0.3.1.3 numbers an agent's steps with ``AgentStatus`` (its
``callback_handler/agent_callback_handler.py``): llm_start 1, llm_new_token 2, llm_end 3,
agent_action 4, agent_finish 5, tool_start 6, tool_end 7, error 8. Its plain chat (no
tools) sends ``status: null`` on every chunk. Its WebUI (``dialogue.py``) shows text
with status null always, statuses 1-3 only when "show the agent's steps" is ticked, and
for 5 replaces what it shows with the chunk's content: the whole final answer.

A ``Dialect`` says how one response uses this:

- ``OPENAI`` (``/v1/chat/completions``): numbered, as Parley always sent them; the last
  chunk says 5 when tools ran, else 3. OpenAI clients ignore the field.
- ``CHATCHAT_PLAIN`` (Chatchat's route without tools, its knowledge and file chat): text,
  its start and its end are null; a server tool that still runs (an assistant's) reports
  6 and 7, which the page passes over.
- ``CHATCHAT_AGENT`` (Chatchat's route with ``tools``): numbered, the server tools'
  starts and ends also in ``delta.tool_calls`` as Chatchat sends them, and the reply ends
  with a status 5 chunk whose content is the final answer, which is all the page shows
  when the agent's steps are hidden (as Chatchat's own agent chat does: a client that
  adds up every delta of an agent reply gets its final text twice, on Chatchat's server
  too).

Chatchat has no number for a call waiting on a person's approval: such a reply ends
with its step's end (3, or null), and the waiting calls are in ``parley``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class AgentStatus(IntEnum):
    LLM_START = 1
    LLM_NEW_TOKEN = 2
    LLM_END = 3
    AGENT_ACTION = 4
    AGENT_FINISH = 5
    TOOL_START = 6
    TOOL_END = 7
    ERROR = 8


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    numbered: bool
    """Text chunks carry statuses 1-3 and the end 3 or 5 (else null)."""
    final_answer: bool = False
    """The reply ends with a status 5 chunk that repeats its final answer."""
    tool_calls_in_delta: bool = False
    """Server tools' starts and ends are also in ``delta.tool_calls`` (Chatchat's agent
    chat puts them there; an OpenAI client would try to run them)."""

    def text(self, status: AgentStatus) -> int | None:
        """The status of a chunk of the model's own output (its start, text, end)."""
        return int(status) if self.numbered else None

    def finish(self, *, tools_ran: bool, waiting: bool) -> int | None:
        """The status of the last chunk (with ``finish_reason``); ``waiting``: the reply
        pauses for approvals (Chatchat has no number for that: the step just ends)."""
        if not self.numbered:
            return None
        if not waiting and (self.final_answer or tools_ran):
            return int(AgentStatus.AGENT_FINISH)
        return int(AgentStatus.LLM_END)

    def repeats_answer(self, *, waiting: bool) -> bool:
        """The last chunk carries the final answer as its content."""
        return self.final_answer and not waiting


OPENAI = Dialect("openai", numbered=True)
CHATCHAT_PLAIN = Dialect("chatchat-plain", numbered=False)
CHATCHAT_AGENT = Dialect(
    "chatchat-agent", numbered=True, final_answer=True, tool_calls_in_delta=True
)
