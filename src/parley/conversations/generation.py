"""A running generation: one task that saves the turn, runs the agent loop, feeds a sink.

The task outlives the HTTP request that started it: when the client goes away the turn
finishes and is saved, or is cancelled (its upstream request closed) and saved as
interrupted with its text so far, as ``start`` was told (``server.on_disconnect``: by
default, a reply in a conversation the client named finishes, a stateless one is
cancelled; see ``Origin``).

Persistence rules:
- the turn's new messages are written while the upstream call starts, and nothing is
  handed to the client until that write has committed, so every id a client sees is
  stored;
- partial output is checkpointed at most every ``checkpoint_seconds``, never per token,
  and each finished agent step (its tool results included) is written before the next
  step starts, so a crash never loses a tool that ran;
- the final state is written once, *before* the last item (``Done`` or ``StreamError``)
  is handed to the client, so whatever a client saw finish is in the database.

The sink is the HTTP edge's: an async callable that receives each ``Event`` in order and
applies backpressure (a slow client slows the upstream read, nothing piles up). A sink
that raises means the client is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from enum import Enum

from sqlalchemy.exc import SQLAlchemyError

from parley import fairness
from parley.agent.loop import AgentLoop, AgentRequest
from parley.agent.turn import Stop, TurnState
from parley.conversations.citations import Citations
from parley.conversations.finishing import Finisher
from parley.conversations.outgoing import Outgoing
from parley.errors import Conflict, NotFound, Overloaded, ParleyError, ProviderError
from parley.events import FINISH_REASONS, Done, Event, Restart, Status, StepDone, StreamError
from parley.messages import MessageStatus, Part, ToolCallPart, ToolResult
from parley.patterns import Budget
from parley.providers.registry import ResolvedModel
from parley.store.citations import CitationStore
from parley.store.repository import ConversationStore, NewTurn
from parley.transforms.output import RegexRule

log = logging.getLogger(__name__)

Sink = Callable[[Event], Awaitable[None]]

FINISH_RETRY_PAUSES = (0.1, 0.5, 2.0, 0.0)
"""Pauses between attempts at the final write (a busy database); the last is unused."""


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What to write when the generation starts (``None`` when the request is not stored):
    the turn's new rows, or the paused reply it carries on."""

    owner: str
    rows: NewTurn | None = None
    """The turn's new messages (None: it resumes a paused reply)."""
    resume: tuple[Part, ...] | None = None
    """Carrying on the paused reply ``message_id``: its parts with the decisions applied
    (nothing new is inserted)."""
    claim: bool = False
    """The conversation is created under an id the client made: written (and so the id
    claimed) before the model is called, not while it is."""


class Origin(Enum):
    """Where a turn's conversation came from: whether a user will see it again, and so
    whether the server spends on it unasked (titles, suggestions, finishing a reply
    whose client left)."""

    NAMED = "named"
    """The client named the conversation (``conversation_id``): a continued one, Parley's
    conversation routes (regenerate, edit, approvals), Chatchat's route with its own id,
    a UI. A user comes back to it."""
    STATELESS = "stateless"
    """The client named none and sent the whole history (the OpenAI way; Open WebUI's
    own title and tag prompts, tasks): Parley made the id and stores the turn (history,
    usage, audit), but the client keeps its own history and comes back by no id."""


@dataclass(frozen=True, slots=True)
class GenerationSpec:
    """Everything a generation is made from, fixed before it starts."""

    request: AgentRequest
    record: TurnRecord | None
    """What to write when it starts (None: the request is not stored)."""
    origin: Origin = Origin.NAMED
    prior_cost_usd: float = 0.0
    """What the conversation's earlier replies on this branch cost."""
    shape: Callable[[], Awaitable[Outgoing]] | None = None
    """Shapes the history the model is sent, when the task runs (None: as it is)."""
    citations: Citations = field(default_factory=Citations)
    """The knowledge the reply was given to cite (context first, then tools)."""
    finisher: Finisher | None = None
    """The finish transforms (storage rules, inline images), when any apply."""
    rules: tuple[RegexRule, ...] = ()
    """The assistant's regex rules: the stream shows the reply as storage and display
    rules make it (display-only ones are never stored)."""
    rule_budget: Budget | None = None
    """The time the rules may take over the turn (shared with its user messages')."""
    ignored_params: tuple[str, ...] = ()
    """Advisory request fields its model's provider has no use for (the response names
    them)."""
    titles: bool = True
    """Whether a title may be written after it (the assistant's choice)."""
    suggestions: bool = True


class _ClientGone(Exception):
    pass


CLIENT_LEFT = ParleyError(
    "the client went away before the reply ended; it was cancelled", code="client_disconnected"
)
"""Saved as the error of a reply cancelled because its client left."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn came to, as the HTTP edge answers it: read when the reply ends (or
    fails), never the agent's live state."""

    parts: tuple[Part, ...]
    client_calls: tuple[ToolCallPart, ...]
    """Calls left for the client to run."""
    server_calls: tuple[ToolCallPart, ...]
    """Calls the server ran, with their results."""
    pending: tuple[ToolCallPart, ...]
    """Server calls waiting for a person's approval."""
    stop: Stop | None
    """Why the loop ended the turn on its own (a budget, a loop, a safety stop)."""
    answered_by: str | None
    """The public name of the model that gave the last reply (a fallback, maybe)."""
    steps_done: bool
    """A step finished (its tools ran): a retry would run them again."""


class Generation:
    def __init__(
        self,
        spec: GenerationSpec,
        *,
        store: ConversationStore,
        agent: AgentLoop,
        checkpoint_seconds: float,
        citation_store: CitationStore | None = None,
    ) -> None:
        request = spec.request
        self.conversation_id = request.conversation_id
        self.origin = spec.origin
        """Whether the client named the conversation (``Origin``)."""
        self.message_id = request.message_id
        self.key_id = request.caller.key_id if request.caller is not None else None
        """The API key the reply is for: its revocation ends the reply."""
        self.model: ResolvedModel = request.models[0]
        self.created = int(time.time())
        self.turn = TurnState()
        self.prior_cost_usd = spec.prior_cost_usd
        self.status: MessageStatus = "streaming"
        self.finisher = spec.finisher
        self.rules = spec.rules
        self.rule_budget = spec.rule_budget
        self.notes: tuple[str, ...] = ()
        """What shaping the request could not do (no OCR for images, a failed summary):
        told to the client in ``parley.notes``."""
        self.citations = spec.citations
        self._citation_store = citation_store
        self.titles = spec.titles
        self.suggestions = spec.suggestions
        self.ignored_params = spec.ignored_params
        record, shape = spec.record, spec.shape
        self._store = store
        self._agent = agent
        self._request = request
        self._shape = shape
        self._record = record
        self._checkpoint_seconds = checkpoint_seconds
        self._sink: Sink | None = None
        self._cancel_when_gone = False
        self._left = False
        """Cancelled because its client left (``detach``)."""
        self._checkpoint: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._final: asyncio.Future[None] | None = None
        self._abort_error: ParleyError | None = None
        self.done = False
        """The generation has ended (or was ended before it started)."""
        self._began = False
        self._abort_early = False
        self._closing = False
        """The final state is decided and being written: too late to abort."""
        self._when_done: list[Callable[[Generation], None]] = []

    @property
    def returned_to(self) -> bool:
        """Whether a user will come back to this reply: it is saved, in a conversation
        the client named. Only such a reply gets a title and suggestions, and finishes
        by default when its client leaves."""
        return self.origin is Origin.NAMED and self.stored

    def start(self, sink: Sink, *, cancel_when_gone: bool) -> None:
        """Run, feeding ``sink``. ``cancel_when_gone``: the client leaving (``detach``,
        or the sink failing) cancels the reply, else it finishes without a client."""
        self._sink = sink
        self._cancel_when_gone = cancel_when_gone
        self._task = asyncio.create_task(self._run(), name=f"generation {self.message_id}")
        self._task.add_done_callback(lambda _: self._ended())
        self._task.add_done_callback(fairness.working())  # its key's until it ends

    def when_done(self, callback: Callable[[Generation], None]) -> None:
        """Call ``callback`` once the generation has ended (at once if it has)."""
        if self.done:
            callback(self)
        else:
            self._when_done.append(callback)

    def _ended(self) -> None:
        if self.done:
            return
        self.done = True
        callbacks, self._when_done = self._when_done, []
        for callback in callbacks:
            callback(self)

    def on_finished(self, callback: Callable[[Generation], None]) -> None:
        assert self._task is not None
        self._task.add_done_callback(lambda _: callback(self))

    def client_left(self) -> None:
        """The streaming client went away: cancel as ``start`` was told
        (``cancel_when_gone``); otherwise the sink is fed on, to keep every event for a
        client that resumes with ``Last-Event-ID`` (writes to the closed stream do
        nothing)."""
        if self._cancel_when_gone:
            self.detach(cancel=True)

    def detach(self, *, cancel: bool = False) -> None:
        """The client went away: stop feeding the sink, and cancel the reply when
        ``start`` was told to (``cancel_when_gone``) or ``cancel`` says so. Cancelling
        closes the upstream request; the text so far is saved as interrupted. A reply
        whose final state is being written is left to finish (too late to cancel)."""
        self._sink = None
        cancel = cancel or self._cancel_when_gone
        if cancel and not self._closing and self._task is not None and not self._task.done():
            self._left = True
            self._task.cancel()

    def abort(self, error: ParleyError) -> None:
        """End the generation now (shutdown, a newer message, a cancel request): saved
        as interrupted, and the client (if still there) gets ``error`` as the stream's
        last event. Before it starts, it never will: nothing is saved, and its client
        gets ``error`` once it attaches."""
        if self.done or self._closing or self._abort_error is not None:
            # ending already (aborted once, or finishing on its own): a cancel now could
            # land in the final write and leave its client without the last event
            return
        self._abort_error = error
        if not self._began:
            # Not running yet (not started, or its task has not taken its first step:
            # cancelling it now would skip ``_run`` entirely and leave its client
            # waiting). ``_run`` sees this on entry and tells the client.
            self._abort_early = True
            if self._task is None:
                self._ended()
        elif self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait(self) -> None:
        """Wait for the task and its final write (which outlives a cancelled task)."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)
        if self._final is not None:
            await asyncio.shield(self._final)

    async def _emit(self, event: Event) -> None:
        sink = self._sink
        if sink is None:
            return
        try:
            await sink(event)
        except Exception as exc:
            self._sink = None
            if self._cancel_when_gone:
                raise _ClientGone() from exc

    async def _run(self) -> None:
        self._began = True
        if self._abort_early:  # ended before it ran: nothing was saved, nothing will be
            self.status = "interrupted"
            with contextlib.suppress(Exception):
                await self._emit(StreamError(self._abort_error or Overloaded("stopped")))
            return
        saved = asyncio.ensure_future(self._save_turn())
        done: Done | None = None
        error: ParleyError | None = None
        try:
            done = await self._pump(saved)
        except ParleyError as exc:
            error = exc
        except (asyncio.CancelledError, _ClientGone) as exc:
            await self._interrupted(saved, left=self._left or isinstance(exc, _ClientGone))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        except Exception as exc:  # a bug must not leave the row streaming
            log.exception("generation %s crashed", self.message_id)
            error = ParleyError(f"internal error during generation: {type(exc).__name__}")
        self._closing = True
        await self._conclude(saved, done, error)

    async def _pump(self, saved: asyncio.Future[None]) -> Done:
        """Shape the history, run the agent loop and hand its events to the sink, writing
        each finished step and checkpointing the text between. Nothing reaches the
        client before the turn's rows are saved (``saved``), but status lines."""
        saved_ok = False
        if self._record is not None and self._record.claim:
            await asyncio.shield(saved)
            saved_ok = True
        if self._shape is not None:
            await self._emit(Status("preparing", "the request"))
            outgoing = await self._shape()
            self.notes = outgoing.notes
            self.citations.from_context(outgoing.used_snippets)
            self._request = replace(self._request, history=outgoing.messages)
        last_checkpoint = time.monotonic()
        events = self._agent.run(self._request, self.turn)
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, Done):
                    return event
                if not saved_ok:
                    if isinstance(event, Status | Restart):
                        await self._emit(event)  # shown to nobody yet: no need to wait
                        continue
                    await asyncio.shield(saved)  # raises if the turn could not be saved
                    saved_ok = True
                if isinstance(event, StepDone):
                    await self._commit_step()
                    last_checkpoint = time.monotonic()
                    continue
                await self._emit(event)
                now = time.monotonic()
                if now - last_checkpoint >= self._checkpoint_seconds and self._checkpoint is None:
                    last_checkpoint = now
                    self._checkpoint = asyncio.create_task(self._save_checkpoint())
        raise ProviderError(
            "the agent loop ended without finishing",
            provider=self.model.provider.name,
            code="upstream_incomplete",
        )

    async def _interrupted(self, saved: asyncio.Future[None], *, left: bool) -> None:
        """Cancelled (an abort, or its client left): saved as interrupted with its text so
        far, and an aborting reason told to the client if it is still there."""
        self._closing = True
        reason = self._abort_error or (CLIENT_LEFT if left else None)
        self._final = asyncio.ensure_future(self._finish_after(saved, "interrupted", reason))
        await _unless_failed(self._final)
        if self._abort_error is not None:
            with contextlib.suppress(Exception):
                await self._emit(StreamError(self._abort_error))

    async def _conclude(
        self, saved: asyncio.Future[None], done: Done | None, error: ParleyError | None
    ) -> None:
        """Write the final state of a turn that ended on its own, then tell the client."""
        stop = self.turn.stop
        if error is None and stop is not None and stop.code == "shutdown":
            # stopped between steps by a shutdown: unfinished work, and the client is told
            error = Overloaded("the server is shutting down; try again shortly", retry_after=5)
            await self._close(saved, "interrupted", error, StreamError(error))
        elif error is not None:
            status: MessageStatus = "incomplete" if self.turn.has_output else "failed"
            await self._close(saved, status, error, StreamError(error))
        else:
            assert done is not None
            paused = done.stop_reason == "pending_approval"
            await self._close(saved, "awaiting_approval" if paused else "complete", None, done)

    @property
    def request(self) -> AgentRequest:
        return self._request

    def result(self) -> TurnResult:
        """The turn as it stands (once ended: as it ended)."""
        turn = self.turn
        return TurnResult(
            parts=turn.parts(),
            client_calls=tuple(turn.unanswered_calls()),
            server_calls=tuple(turn.server_calls()),
            pending=tuple(turn.pending_calls()),
            stop=turn.stop,
            answered_by=turn.answered_by,
            steps_done=bool(turn.committed),
        )

    @property
    def stored(self) -> bool:
        """Whether the turn is recorded (not ``store: false``)."""
        return self._record is not None

    @property
    def cost(self) -> dict[str, float | bool]:
        """The reply's cost and the conversation's so far (USD); ``complete`` is False
        when a model without a price was used (the figures are then lower bounds)."""
        turn = self.turn
        return {
            "response_usd": round(turn.cost_usd, 8),
            "conversation_usd": round(self.prior_cost_usd + turn.cost_usd, 8),
            "complete": turn.unpriced_calls == 0,
        }

    async def _close(
        self,
        saved: asyncio.Future[None],
        status: MessageStatus,
        error: ParleyError | None,
        last: Done | StreamError,
    ) -> None:
        """Write the final state, then hand the last item to the client."""
        self._final = asyncio.ensure_future(self._finish_after(saved, status, error))
        try:
            await asyncio.shield(self._final)
        except Exception as exc:
            log.exception("saving %s failed", self.message_id)
            failure = exc if isinstance(exc, ParleyError) else None
            last = StreamError(
                failure or Overloaded("the reply could not be saved; try again", retry_after=1)
            )
        with contextlib.suppress(_ClientGone):
            await self._emit(last)

    async def _save_turn(self) -> None:
        record = self._record
        if record is None or self.conversation_id is None:
            return
        try:
            if record.resume is not None:
                await self._resume_turn(record.owner, self.conversation_id, record.resume)
                return
            assert record.rows is not None
            await self._store.start_turn(record.rows)
        except LookupError:
            # deleted meanwhile, or (creating) the id is someone else's
            raise NotFound(
                f"conversation {self.conversation_id!r} not found",
                param="conversation_id",
                code="conversation_not_found",
            ) from None
        except SQLAlchemyError as exc:
            log.warning("could not save turn %s: %s", self.message_id, exc)
            raise Overloaded("the database is busy; try again", retry_after=1) from None

    async def _resume_turn(self, owner: str, conversation_id: str, parts: tuple[Part, ...]) -> None:
        try:
            await self._store.resume_turn(owner, conversation_id, self.message_id, parts)
        except LookupError:
            raise Conflict(
                "these calls are no longer waiting for approval (decided by another "
                "request, or the conversation moved on)",
                param="approvals",
                code="approval_already_decided",
            ) from None

    async def _commit_step(self) -> None:
        """A finished step is written before the next starts (tool results are safe).

        A failed write does not end the turn: the next write (a checkpoint or the final
        one, which is retried) carries the same parts."""
        if self._checkpoint is not None:
            await self._checkpoint
        if self._record is not None:
            try:
                await self._store.checkpoint(self.message_id, self.turn.parts())
            except SQLAlchemyError as exc:
                log.warning("step commit of %s failed: %s", self.message_id, exc)

    async def _save_checkpoint(self) -> None:
        try:
            if self._record is not None:
                await self._store.checkpoint(self.message_id, self.turn.parts())
        except Exception:
            log.exception("checkpoint of %s failed", self.message_id)
        finally:
            self._checkpoint = None

    async def _finish_after(
        self, saved: asyncio.Future[None], status: MessageStatus, error: ParleyError | None
    ) -> None:
        await asyncio.shield(saved)  # the row must exist before its final state is written
        if self._checkpoint is not None:
            await self._checkpoint
        self.status = status
        if self._record is None:
            return
        turn = self.turn
        usage = {**turn.usage.to_dict(), **self.cost} if turn.model_calls or turn.resumed else None
        reason = turn.stop_reason
        parts = turn.parts()
        if status == "interrupted":
            parts = _close_pending(parts)
        finisher = self.finisher
        # a paused reply is finished when it ends (its parts come back when it resumes:
        # finishing them twice would apply the storage rules twice)
        if finisher is not None and status != "awaiting_approval" and finisher.needed(parts):
            try:
                parts = await asyncio.to_thread(finisher.finish, parts)
            except Exception:
                log.exception("finishing %s failed; it is saved as it came", self.message_id)
            else:
                turn.replace_parts(parts)  # what a non-streaming client gets, too
        if error is None and turn.stop is not None:
            error_row: dict[str, str | None] | None = {
                "message": turn.stop.message,
                "code": turn.stop.code,
            }
        else:
            error_row = None if error is None else {"message": error.message, "code": error.code}
        for attempt, pause in enumerate(FINISH_RETRY_PAUSES):
            try:
                await self._store.finish(
                    self.message_id,
                    parts=parts,
                    status=status,
                    model=turn.answered_by or self.model.public_name,
                    usage=usage,
                    finish_reason=FINISH_REASONS[reason]
                    if reason and status == "complete"
                    else None,
                    error=error_row,
                )
                break
            except SQLAlchemyError:
                if attempt == len(FINISH_RETRY_PAUSES) - 1:
                    raise
                log.warning("saving %s failed; retrying in %.1f s", self.message_id, pause)
                await asyncio.sleep(pause)
        if self.citations and self._citation_store is not None and self.conversation_id:
            try:
                await self._citation_store.save(
                    self._record.owner, self.conversation_id, self.message_id, self.citations.items
                )
            except SQLAlchemyError:
                log.exception("saving the citations of %s failed", self.message_id)


async def _unless_failed(final: asyncio.Future[None]) -> None:
    """Wait for the final write of a cancelled generation, even through a second
    cancellation (the client still gets its last event); a failed write is logged."""
    while not final.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(final)
    if not final.cancelled() and final.exception() is not None:
        log.error("saving an interrupted reply failed: %s", final.exception())


INTERRUPTED_CALL = "[Interrupted: the reply stopped before this call was answered]"


def _close_pending(parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """An interrupted turn's calls left without a result get an "interrupted" one, so no
    call stays pending in the stored history."""
    return tuple(
        part.answered(ToolResult(INTERRUPTED_CALL, is_error=True))
        if isinstance(part, ToolCallPart) and part.result is None
        else part
        for part in parts
    )
