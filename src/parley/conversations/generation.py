"""A running generation: one task that calls the model, persists, and feeds a channel.

The task outlives the HTTP request that started it: when the client goes away the turn
finishes and is saved (or, when configured, is cancelled and saved as interrupted).
Persistence rules: partial output is checkpointed at most every ``checkpoint_seconds``;
the final state is written once, *before* the end of the stream is handed to the
client, so whatever a client saw as complete is in the database.

Channel items are ``events.Event`` values (and ``KeepAlive``), ending with ``Done`` or
``StreamError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from parley.agent.stream import StreamAccumulator
from parley.errors import Overloaded, ParleyError, ProviderError
from parley.events import FINISH_REASONS, Done, Event, Status, StreamError
from parley.messages import MessageStatus, Part
from parley.providers.protocol import ModelRequest
from parley.providers.registry import ResolvedModel
from parley.store.repository import ConversationStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Nothing was emitted for a while: the edge may send a keep-alive comment."""


Item = Event | KeepAlive


class Generation:
    def __init__(
        self,
        *,
        store: ConversationStore,
        model: ResolvedModel,
        request: ModelRequest,
        conversation_id: str,
        message_id: str,
        checkpoint_seconds: float,
        keepalive_seconds: float,
    ) -> None:
        self.conversation_id = conversation_id
        self.message_id = message_id
        self.model = model
        self.created = int(time.time())
        self.accumulator = StreamAccumulator()
        self.status: MessageStatus = "streaming"
        self._store = store
        self._request = request
        self._checkpoint_seconds = checkpoint_seconds
        self._keepalive_seconds = keepalive_seconds
        self._last_emit = time.monotonic()
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._attached = True
        self._checkpoint: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"generation {self.message_id}")
        if self._keepalive_seconds > 0:
            pinger = asyncio.create_task(self._keepalive())
            self._task.add_done_callback(lambda _: pinger.cancel())

    async def _keepalive(self) -> None:
        interval = self._keepalive_seconds
        while True:
            await asyncio.sleep(max(0.01, self._last_emit + interval - time.monotonic()))
            if time.monotonic() - self._last_emit >= interval:
                self._emit(KeepAlive())

    async def items(self) -> AsyncIterator[Item]:
        """What the client is told, in order; ends after ``Done`` or ``Failure``."""
        while True:
            item = await self._queue.get()
            yield item
            if isinstance(item, Done | StreamError):
                return

    def on_finished(self, callback: Callable[[Generation], None]) -> None:
        assert self._task is not None
        self._task.add_done_callback(lambda _: callback(self))

    def detach(self, *, cancel: bool) -> None:
        """The client went away: stop feeding the channel, and cancel if asked to."""
        self._attached = False
        if cancel and self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait(self) -> None:
        """Wait for the task (and its final write) to finish."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def _emit(self, item: Item) -> None:
        self._last_emit = time.monotonic()
        if self._attached:
            self._queue.put_nowait(item)

    async def _run(self) -> None:
        accumulator = self.accumulator
        last_checkpoint = time.monotonic()
        done: Done | None = None
        error: ParleyError | None = None
        try:
            async for event in self.model.provider.stream(self._request):
                accumulator.apply(event)
                if isinstance(event, Done):
                    done = event
                    break
                if not isinstance(event, Status):
                    self._emit(event)
                now = time.monotonic()
                if now - last_checkpoint >= self._checkpoint_seconds and self._checkpoint is None:
                    last_checkpoint = now
                    self._checkpoint = asyncio.create_task(self._save_checkpoint())
            if done is None:
                raise ProviderError(
                    "upstream stream ended without finishing",
                    provider=self.model.provider.name,
                    code="upstream_incomplete",
                )
        except ParleyError as exc:
            error = exc
        except asyncio.CancelledError:
            await asyncio.shield(self._finish("interrupted", None))
            self._emit(StreamError(ParleyError("the generation was cancelled", code="cancelled")))
            raise
        except Exception as exc:  # a bug in an adapter must not leave the row streaming
            log.exception("generation %s crashed", self.message_id)
            error = ParleyError(f"internal error during generation: {type(exc).__name__}")
        if error is not None:
            status: MessageStatus = "incomplete" if accumulator.has_output else "failed"
            await self._close(status, error, StreamError(error))
        else:
            assert done is not None
            await self._close("complete", None, done)

    async def _close(self, status: MessageStatus, error: ParleyError | None, last: Item) -> None:
        """Write the final state, then hand the last item to the client."""
        try:
            await asyncio.shield(self._finish(status, error))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("saving the final state of %s failed", self.message_id)
            failure = Overloaded("the reply could not be saved; try again", retry_after=1)
            self._emit(StreamError(failure))
            return
        self._emit(last)

    async def _save_checkpoint(self) -> None:
        try:
            await self._store.checkpoint(self.message_id, self.accumulator.parts())
        except Exception:
            log.exception("checkpoint of %s failed", self.message_id)
        finally:
            self._checkpoint = None

    async def _finish(self, status: MessageStatus, error: ParleyError | None) -> None:
        if self._checkpoint is not None:
            await self._checkpoint
        self.status = status
        accumulator = self.accumulator
        parts: tuple[Part, ...] = accumulator.parts()
        usage = accumulator.usage
        reason = accumulator.stop_reason
        await self._store.finish(
            self.message_id,
            self.conversation_id,
            parts=parts,
            status=status,
            model=self.model.public_name,
            usage=usage.to_dict() if usage else None,
            finish_reason=FINISH_REASONS[reason] if reason and status == "complete" else None,
            error=None if error is None else {"message": error.message, "code": error.code},
        )
