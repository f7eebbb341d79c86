"""What the deciding leader publishes, acknowledged behind its loop (:class:`Outbox`).

The rule: what the loop publishes is sent in the order it was made, and nothing is sent
while an ack of an earlier publish is still to come (a failed one is sent again first, as
``SentEvents.settle`` does): made meanwhile, it waits and goes out when they are in. So the
stream stores admission's events in the order they were decided, and a publish that fails
for good stops the service before anything made after it is sent. The loop does not wait for
the acks: it goes on folding events; only its next scheduling pass waits for them
(:meth:`AdmissionService._decide`), so that a pass decides on what the one before published.

Why: under load a round trip to JetStream takes tens to hundreds of milliseconds. Awaited in
line, each pass stopped the fold for that long, and in a burst of submissions admission's
view of the quota fell a second behind the stream: quota freed by finishes sat unused in its
books while thousands of workloads waited.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from shared.bus import Bus, SentEvents
from shared.events import Event
from shared.service import Runtime

__all__ = ["Outbox"]


class Outbox:
    """The leader's publishes whose acks are still to come, those made meanwhile, and the
    task that awaits the acks and then sends those (owned by the runtime: awaited at
    shutdown; its failure stops the service). ``on_settled`` is called when every ack is in
    and nothing waits (the loop looks again: a pass may be due)."""

    def __init__(self, bus: Bus, runtime: Runtime) -> None:
        self.bus = bus
        self.runtime = runtime
        self.on_settled: Callable[[], None] = lambda: None
        self._unsettled: deque[SentEvents] = deque()  # sent, in order, acks to come
        self._unsent: deque[Sequence[Event]] = deque()  # made while acks were to come
        self._settler: asyncio.Task[None] | None = None

    def busy(self) -> bool:
        """Whether acks are still to come (or events wait behind them)."""
        return self._settler is not None and not self._settler.done()

    async def send(self, pieces: Iterable[Sequence[Event]]) -> None:
        """Publish ``pieces`` in order, behind everything before. With no ack to come, each
        piece is sent as soon as it is made (the client writes it before the next is made:
        a large pass's first decisions are on their way while the rest are made); else they
        are made now and sent once those acks are in. Raises if a piece cannot be sent now
        (what was sent before it is still settled), or if an earlier publish failed for
        good."""
        self._raise_failure()
        if self.busy():
            self._unsent.extend(pieces)
            return
        try:
            await self._send_now(pieces)
        finally:
            if self._unsettled and not self.busy():
                self._settler = self.runtime.spawn(self._settle(), name="admission.outbox")

    async def settled(self) -> None:
        """Wait until everything is sent and acknowledged; raises if a publish failed for
        good."""
        if self._settler is not None:
            await self._settler

    async def _send_now(self, pieces: Iterable[Sequence[Event]]) -> None:
        for piece in pieces:
            self._unsettled.append(await self.bus.send_many(piece))
            await asyncio.sleep(0)  # a publish only buffers: the client's writer runs now

    def _raise_failure(self) -> None:
        settler = self._settler
        if settler is not None and settler.done() and not settler.cancelled():
            error = settler.exception()
            if error is not None:
                raise error

    async def _settle(self) -> None:
        """Await the acks in order, then send what was made meanwhile, until none is left."""
        while True:
            while self._unsettled:
                await self._unsettled[0].settle()
                self._unsettled.popleft()
            if not self._unsent:
                break
            unsent, self._unsent = self._unsent, deque()
            await self._send_now(unsent)
        self.on_settled()
