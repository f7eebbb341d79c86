"""What the deciding leader publishes, acknowledged behind its loop (:class:`Outbox`).

The rule: nothing is sent while an ack of an earlier publish is still to come (a failed one
is sent again first, as ``SentEvents.settle`` does). So the stream stores admission's events
in the order they were decided, as when each publish awaited its acks, and a publish that
fails for good stops the service before anything decided after it is sent. But the loop does
not wait for the acks: it goes on folding events, and what falls due meanwhile (its next
pass, a pending report whose throttle ended...) is decided and sent in one turn once they are
in (``AdmissionService._live``). Within one publish, as within a pass's pieces before, a
message sent again after a timeout can land after those sent behind it.

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
    """The leader's publishes whose acks are still to come, and the task that awaits them
    (owned by the runtime: awaited at shutdown; its failure stops the service).
    ``on_settled`` is called when every ack is in (the loop, waiting for events, looks
    again: a pass may be due)."""

    def __init__(self, bus: Bus, runtime: Runtime) -> None:
        self.bus = bus
        self.runtime = runtime
        self.on_settled: Callable[[], None] = lambda: None
        self._unsettled: deque[SentEvents] = deque()  # sent, in order, acks to come
        self._settler: asyncio.Task[None] | None = None

    def busy(self) -> bool:
        """Whether acks are still to come."""
        return self._settler is not None and not self._settler.done()

    async def send(self, pieces: Iterable[Sequence[Event]]) -> None:
        """Publish ``pieces`` in order, behind everything sent before: once its acks are in
        (the loop sends only then; it folds meanwhile), each piece as soon as it is made
        (the client writes it before the next is made: a large pass's first decisions are
        on their way while the rest are made). Raises if a piece cannot be sent (what was
        sent before it is still settled), or if an earlier publish failed for good."""
        await self.settled()
        try:
            for piece in pieces:
                if piece:
                    self._unsettled.append(await self.bus.send_many(piece))
                    await asyncio.sleep(0)  # a publish only buffers: the client writes now
        finally:
            if self._unsettled:
                self._settler = self.runtime.spawn(self._settle(), name="admission.outbox")

    async def settled(self) -> None:
        """Wait until everything is sent and acknowledged; raises if a publish failed for
        good."""
        if self._settler is not None:
            await self._settler

    async def _settle(self) -> None:
        while self._unsettled:
            await self._unsettled[0].settle()
            self._unsettled.popleft()
        self.on_settled()
