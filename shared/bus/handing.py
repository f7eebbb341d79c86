"""What a consumer's loop hands over, and the waits around it (shared/bus/consuming.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.aio.msg import Msg

from shared.events import AnyEvent
from shared.logging import get_logger

__all__ = [
    "ACK_EVERY_S",
    "Acks",
    "Handed",
    "Handler",
    "Settling",
    "ack_in_order",
    "acting_again",
    "cancelled",
    "hand_over",
    "settled",
    "stopped_within",
]

log = get_logger("bus")

# What a handler may leave in flight when it returns (see Consuming.consume).
Settling = Awaitable[None]
Handler = Callable[[list[AnyEvent]], Awaitable[Settling | None]]
# A piece of a take handed to the acker: the message that acks the take (on its last piece
# only), the piece's events and what the handler left settling.
Handed = tuple[Msg | None, list[AnyEvent], Settling | None]

T = TypeVar("T")

# A durable consumer acks its latest settled take at most this often (Acks).
ACK_EVERY_S = 0.1
# A due ack that found the acker's queue full tries again this soon (not a whole interval late).
QUEUE_FULL_RETRY_S = 0.01


class Acks:
    """The acks of one consumer's loop (AckPolicy.ALL: an ack covers every earlier message):
    a settled take's message is acked at once if no ack went out in the last ``every``
    seconds (``ACK_EVERY_S``), else kept, and the latest one kept is acked once ``every``
    has passed since the last ack sent, whether the acker is idle (``due`` is put on its
    queue: :meth:`on_due`) or awaiting a later take's settling or handling (:meth:`awaiting`),
    or sooner with the next take acked or when the loop ends (``flush``). So no two acks go
    out less than ``every`` apart, but for the loop's end, and a settled take is acked at
    most ``every`` after it settled (plus the event loop's own delay), unless the loop is
    cancelled first.

    Why: an ack per take was a write to the socket and a message to nats-server per take,
    and a busy consumer takes a few messages at a time (recovery's flusher writing its acks
    was a large part of its CPU). Nothing is acked before it settled; what a crash leaves
    unacked is delivered again, as before, only up to ``every`` more of it (handlers are
    idempotent for redeliveries).
    """

    # Put on the acker's queue when the kept ack is due: a piece with nothing in it.
    due: Handed = (None, [], None)

    def __init__(
        self,
        send: Callable[[Msg], Awaitable[None]],
        queue: asyncio.Queue[Handed | None],
        every: float = ACK_EVERY_S,
    ) -> None:
        self.send = send
        self.queue = queue
        self.every = every
        self.kept: Msg | None = None  # the latest settled take's message, not acked yet
        self.sent_at = float("-inf")  # loop time of the last ack sent
        self.timer: asyncio.TimerHandle | None = None
        self.failed: Exception | None = None  # an ack that failed in :meth:`awaiting`

    async def settled(self, last: Msg) -> None:
        """The take ``last`` acks has settled (and every one before it)."""
        now = asyncio.get_running_loop().time()
        if now - self.sent_at >= self.every:
            await self._send(last, now)
            return
        self.kept = last
        self._arm(now)

    async def on_due(self) -> None:
        """The ``due`` marker reached the acker: the kept ack is sent if ``every`` has passed
        since the last ack sent, else kept for the rest of it (an ack went out after the
        marker was queued)."""
        if self.kept is None:
            return
        now = asyncio.get_running_loop().time()
        if now - self.sent_at >= self.every:
            await self._send(self.kept, now)
        else:
            self._arm(now)

    async def awaiting(self, work: Awaitable[T]) -> T:
        """Await ``work`` for a later take (its settling, or handling it again); the kept
        ack goes out when it falls due meanwhile, not held until that work ends. A
        cancelled acker cancels the work, as awaiting it directly would; an ack that fails
        meanwhile does not (the work ends, then the error is raised)."""
        if self.kept is None:
            return await work
        pending = asyncio.ensure_future(work)
        try:
            left = self.every - (asyncio.get_running_loop().time() - self.sent_at)
            if left > 0:
                await asyncio.wait({pending}, timeout=left)
            if not pending.done():
                try:
                    await self.flush()
                except Exception as error:
                    self.failed = error
                    await asyncio.wait({pending})
                    raise
            return await pending
        except asyncio.CancelledError:
            pending.cancel()
            raise

    async def flush(self) -> None:
        """Ack what is kept now (its time is up, or the loop ends)."""
        if self.kept is not None:
            await self._send(self.kept, asyncio.get_running_loop().time())

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _arm(self, now: float) -> None:
        if self.timer is None:
            wait = self.every - (now - self.sent_at)
            self.timer = asyncio.get_running_loop().call_later(wait, self._ring)

    async def _send(self, last: Msg, now: float) -> None:
        self.kept = None
        self.sent_at = now
        self.close()  # nothing kept: no marker needed
        await self.send(last)

    def _ring(self) -> None:
        try:
            self.queue.put_nowait(self.due)
            self.timer = None
        except asyncio.QueueFull:  # the acker has pieces to go through: look again soon
            self.timer = asyncio.get_running_loop().call_later(QUEUE_FULL_RETRY_S, self._ring)


async def ack_in_order(
    queue: asyncio.Queue[Handed | None],
    send: Callable[[Msg], Awaitable[None]],
    again: Callable[[list[AnyEvent]], Awaitable[bool]],
    every: float = ACK_EVERY_S,
) -> None:
    """The acker of a consumer's loop (Consuming.consume): acks each handed-over piece's
    take once it has settled, in order (through :class:`Acks`). A piece whose settling
    failed is handled ``again`` (False: the service stopped first) before its ack."""
    acks = Acks(send, queue, every)
    try:
        while (item := await queue.get()) is not None:
            if item is acks.due:
                await acks.on_due()
                continue
            last, events, settling = item
            if settling is not None:
                try:
                    await acks.awaiting(settling)
                except Exception:
                    if acks.failed is not None:
                        raise  # acking failed, not the settling: the loop ends, as on any ack
                    log.exception("settling_failed", count=len(events))
                    if not await acks.awaiting(again(events)):
                        await acks.flush()  # what settled before it
                        return  # stopped: unacked, so delivered again after a restart
            if last is not None:  # else not the take's last piece: its last one acks it
                await acks.settled(last)
        await acks.flush()
    finally:
        acks.close()


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def hand_over(queue: asyncio.Queue[Any], item: Any, acker: asyncio.Task[None]) -> bool:
    """Put ``item`` on the acker's queue, waiting for room; False if the acker ended."""
    if acker.done():
        return False
    try:
        queue.put_nowait(item)
        return True
    except asyncio.QueueFull:
        pass
    put = asyncio.create_task(queue.put(item))
    await asyncio.wait({put, acker}, return_when=asyncio.FIRST_COMPLETED)
    if put.done():
        return True
    await cancelled(put)
    return False


async def settled(handled: Awaitable[Settling | None]) -> None:
    settling = await handled
    if settling is not None:
        await settling


async def acting_again(acting: asyncio.Event, stopping: asyncio.Event) -> bool:
    """Whether this replica may act on the batch in hand: at once while its lease is renewed,
    else once a renewal ends the suspension; False if it stops first."""
    if acting.is_set():
        return True
    waits = [asyncio.create_task(acting.wait()), asyncio.create_task(stopping.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        await cancelled(wait)
    return acting.is_set() and not stopping.is_set()


async def stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
        return True
    except TimeoutError:
        return False
