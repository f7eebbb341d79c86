"""Deliveries lost on the way: messages a pull consumer sent that never reached the service.

A JetStream consumer counts a message delivered when it sends it. One still in flight when
the NATS node the service is connected through dies (in a route or a socket buffer) never
arrives, and nothing sends it again: an ack-none consumer (admission's and preemption's
replay) forgets it, and an ack-all one (the watcher's, recovery's) acks it with the next
message the service handles. Either way the service would never see it (a submitted Job
never admitted). The consumer numbers each delivery, so a jump in that number is a lost
delivery: the messages on the consumer's subjects between the last one taken and the one
after the jump are read again from the stream, in order, and handed over before it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from shared.bus.errors import translated

__all__ = ["Delivered", "Deliveries", "Refetch", "delivered_of", "refetch", "refetcher"]

# Reads again the messages stored between two stream sequences (after, before).
Refetch = Callable[[int, int], Awaitable[list[Msg]]]
# The consumer's last delivery as the server counts it: consumer and stream sequences.
Delivered = Callable[[], Awaitable[tuple[int, int]]]

# A refetch reads this many messages per request (the gap is a few in-flight messages).
REFETCH_BATCH = 256
REFETCH_WAIT_S = 5.0
# After a refetch failed (NATS still electing, say), the take waits this long before the
# next try: what follows the gap is held back until it is read.
REFETCH_RETRY_S = 1.0
# A check of the tail (how far the server delivered) gives up after this long, to try again
# at an idle take at least REFETCH_RETRY_S later: a take is not held for an outage.
TAIL_CHECK_S = 1.0


@dataclass
class Deliveries:
    """The last delivery a consumer's messages were taken up to: its consumer and stream
    sequences (from the consumer's info when the service starts reading it), and whether a
    jump was seen on a redelivery, with no new message yet to place it before."""

    consumer_seq: int
    stream_seq: int
    jumped: bool = False

    @classmethod
    def taken_by(cls, info: api.ConsumerInfo) -> Deliveries:
        """Where a service starts counting a consumer it starts reading: from what the
        consumer delivered, or an ack-all consumer from its ack floor, so that what a
        previous reader was sent and never acked is read again, not acked with the next."""
        acks_all = info.config.ack_policy == api.AckPolicy.ALL
        start = info.ack_floor if acks_all else info.delivered
        if start is None:
            return cls(0, 0)
        return cls(start.consumer_seq or 0, start.stream_seq or 0)

    def lost_before(self, msg: Msg) -> tuple[int, int] | None:
        """The stream sequences ``(after, before)`` between which deliveries were lost before
        ``msg``, if any (nothing is taken: :meth:`take`).

        The rule: a delivery of a message stored after the last taken follows lost
        deliveries if it is numbered more than one past the last taken (or a redelivery
        since was), and something was stored between. A redelivery (an ack-all consumer's,
        of a message stored before the last taken) is numbered anew, one past the last."""
        sequence = msg.metadata.sequence
        delivered, stored = sequence.consumer, sequence.stream
        if stored <= self.stream_seq + 1:
            return None
        if delivered > self.consumer_seq + 1 or self.jumped:
            return (self.stream_seq, stored)
        return None

    def straggler(self, msg: Msg) -> bool:
        """Whether ``msg`` was read already: a delivery numbered at or below the last taken,
        of a message stored at or below it, which :meth:`cover` counted before it came (a
        redelivery is numbered anew)."""
        sequence = msg.metadata.sequence
        return sequence.consumer <= self.consumer_seq and sequence.stream <= self.stream_seq

    def cover(self, consumer_seq: int, stream_seq: int) -> None:
        """Everything up to these sequences read (the tail after a reconnect, read again)."""
        self.consumer_seq = max(self.consumer_seq, consumer_seq)
        self.stream_seq = max(self.stream_seq, stream_seq)
        self.jumped = False

    def take(self, msg: Msg) -> None:
        """``msg`` handed over: the sequences move on (a jump on a redelivery is kept for the
        next new message)."""
        sequence = msg.metadata.sequence
        delivered, stored = sequence.consumer, sequence.stream
        if stored <= self.stream_seq:
            self.jumped = self.jumped or delivered > self.consumer_seq + 1
        else:
            self.jumped = False
        self.consumer_seq = max(self.consumer_seq, delivered)
        self.stream_seq = max(self.stream_seq, stored)


async def refetch(
    js: JetStreamContext, stream: str, filters: Sequence[str], after: int, before: int
) -> list[Msg]:
    """The messages stored on ``filters`` with ``after < sequence < before``, in order: read
    by an ephemeral consumer of their own (acking nothing, deleted after, else gone once
    idle)."""
    config = api.ConsumerConfig(
        filter_subjects=list(filters),
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=after + 1,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=30.0,
        mem_storage=True,
    )
    subscription = await js.pull_subscribe("", stream=stream, config=config)
    found: list[Msg] = []
    name = ""
    try:
        info = await subscription.consumer_info()
        name, remaining = info.name, info.num_pending or 0
        while remaining > 0:
            messages = await subscription.fetch(
                min(remaining, REFETCH_BATCH), timeout=REFETCH_WAIT_S
            )
            remaining -= len(messages)
            for msg in messages:
                if msg.metadata.sequence.stream >= before:
                    return found
                found.append(msg)
    finally:
        with contextlib.suppress(nats.errors.Error, ValueError):
            await subscription.unsubscribe()
        if name:
            with contextlib.suppress(nats.errors.Error):  # else it goes once idle
                await js.delete_consumer(stream, name)
    return found


def refetcher(
    js: JetStreamContext, subscription: JetStreamContext.PullSubscription, stream: str
) -> Refetch:
    """How ``subscription``'s pump reads again what was lost on the way: :func:`refetch` on
    its ``stream``, on the consumer's subjects as they are then (a consumer's subjects may
    have changed since it was made: ``Consuming.refilter``)."""

    async def read_again(after: int, before: int) -> list[Msg]:
        with translated():
            config = (await subscription.consumer_info()).config
            filters = config.filter_subjects or [config.filter_subject or ">"]
            return await refetch(js, stream, filters, after, before)

    return read_again


def delivered_of(subscription: JetStreamContext.PullSubscription) -> Delivered:
    """The consumer's last delivery as the server counts it, asked when called."""

    async def delivered() -> tuple[int, int]:
        with translated():
            sequences = (await subscription.consumer_info()).delivered
        if sequences is None:
            return 0, 0
        return sequences.consumer_seq or 0, sequences.stream_seq or 0

    return delivered
