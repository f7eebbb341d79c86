"""Pull consumers kept fed (:class:`PullPump`) and the decoding of what they deliver."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats.errors
import prometheus_client
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.bus.batches import BatchView, expand, is_batch, is_copy
from shared.bus.errors import ConsumerGone
from shared.bus.gaps import REFETCH_RETRY_S, TAIL_CHECK_S, Delivered, Deliveries, Refetch
from shared.events import AnyEvent, decode_event
from shared.logging import get_logger
from shared.subjects import BATCH_SUBJECTS, subject_family

__all__ = [
    "EVENTS_PER_HANDLING",
    "MESSAGES_READ",
    "PULL_EXPIRES_S",
    "PullPump",
    "ReadCounts",
    "decode_batch",
    "handling_chunks",
    "read_counter",
]

log = get_logger("bus")

PULL_EXPIRES_S = 5.0  # an outstanding pull request lives this long, then is renewed
# While a pull request waits, the consumer's leader sends a heartbeat this often; silence
# for PULL_SILENCE_BEATS beats means nobody holds our request (the leader died, and a new
# one was elected that never had it), so it is sent again. Without heartbeats the pump
# only noticed after two whole request lifetimes.
PULL_HEARTBEAT_S = 0.5
PULL_SILENCE_BEATS = 2
# A replay consumer unread this long is removed by the server (its inactive threshold).
CONSUMER_INACTIVE_S = 60.0
# Pulls answered "no consumer" (:func:`consumer_may_be_gone`) are asked again this often:
# most such answers pass within seconds (a consumer's leader elected, its node restarted).
# Answered so for CONSUMER_CHECK_S, the server is asked, that often, whether it still has the
# consumer; answered so for CONSUMER_INACTIVE_S on end, the consumer is taken for gone even
# if the server cannot say (its node is down, and an R1 consumer has no other).
UNANSWERED_RETRY_S = 0.25
CONSUMER_CHECK_S = 5.0
CONSUMER_INFO_TIMEOUT_S = 1.0
CONSUMER_NOT_FOUND = 10014  # JetStream's error code for a consumer it does not have
# At most this many events are handed to a handler (or returned by next_batch) at once.
EVENTS_PER_HANDLING = 512


def handling_chunks(
    events: list[AnyEvent], size: int = EVENTS_PER_HANDLING
) -> list[list[AnyEvent]]:
    """The events of one take, in the pieces a consumer hands over one after the other: in
    stream order, at most ``size`` events each, and always at least one piece (an empty take
    is still handed over, so that it is acked).

    Why: a take is bounded in messages, and a batch message holds hundreds of events, so one
    take can be tens of thousands of events. Handed over at once, they made one long round
    (admission folds them all before it decides; the watcher starts them all before it
    reports), and the first event's reaction waited for the last one's: what a service
    decides came in fewer, bigger lumps, each later. A piece the size of an unbatched take
    keeps the rounds as short as they were without batches; the messages stay batched.
    """
    if size < 1:
        raise ValueError(f"a handling chunk holds at least one event, not {size}")
    if not events:
        return [[]]
    return [events[start : start + size] for start in range(0, len(events), size)]


class PullPump:
    """A pull consumer kept fed: pull requests stay outstanding, so the server pushes each
    message the moment it is stored, and :meth:`take` hands over whatever has arrived.

    Why not nats-py's ``fetch(n, timeout)``: once its first message has come it keeps waiting
    for ``n`` messages or the whole timeout, so with the services' 0.2-0.5 s timeouts a lone
    event waited up to that long; and it reads each message through its own task +
    wait_for. Here messages land in a list from a subscription callback, and one wake-up
    takes them all.

    Accounting, as nats.go's ``Consume`` does it: ``requested`` is what outstanding requests
    may still deliver; a delivered message takes one off, a 408/409 status takes off what its
    request had left (``Nats-Pending-Messages``). Below half a batch, a new request tops it up.
    """

    BATCH = 512

    def __init__(
        self,
        nc: Client,
        next_subject: str,
        deliveries: Deliveries | None = None,
        refetch: Refetch | None = None,
        delivered: Delivered | None = None,
    ) -> None:
        self.nc = nc
        self.next_subject = next_subject
        # What was taken so far, to notice deliveries lost on the way, and how to read them
        # again (shared/bus/gaps.py).
        self.deliveries = deliveries
        self.refetch = refetch
        self.delivered = delivered
        # Asked again (a reconnect, a silence): the deliveries the server counts past the
        # last taken are checked at the next idle take (:meth:`_tail`).
        self.tail_unchecked = False
        self.tail_retry_at = 0.0  # after a failed check, not before (monotonic time)
        self.inbox = nc.new_inbox()
        self.buffer: list[Msg] = []
        # Events taken and decoded but not yet handed over (Consuming.next_batch), in order.
        self.held: deque[list[AnyEvent]] = deque()
        self.arrived = asyncio.Event()
        self.requested = 0
        self.last_request = 0.0
        self.last_heard = 0.0
        self.closed = False
        self.interrupted = False
        # Since when requests are answered "no consumer" (:func:`consumer_may_be_gone`), until
        # a message or a heartbeat shows one holds them; and when to ask the server next
        # whether it still has the consumer (:meth:`_watchdog`).
        self.unanswered_since: float | None = None
        self.next_check = 0.0
        self.subscription: Any = None

    @classmethod
    async def open(
        cls,
        nc: Client,
        next_subject: str,
        deliveries: Deliveries | None = None,
        refetch: Refetch | None = None,
        delivered: Delivered | None = None,
    ) -> PullPump:
        pump = cls(nc, next_subject, deliveries, refetch, delivered)
        pump.subscription = await nc.subscribe(pump.inbox, cb=pump._on_message)
        await pump.top_up()
        return pump

    async def top_up(self) -> None:
        """Ask for more if what is outstanding fell below half a batch."""
        if self.closed or self.requested > self.BATCH // 2:
            return
        want = self.BATCH - self.requested
        self.requested += want
        self.last_request = time.monotonic()
        request = {
            "batch": want,
            "expires": int(PULL_EXPIRES_S * 1e9),
            "idle_heartbeat": int(PULL_HEARTBEAT_S * 1e9),
        }
        try:
            await self.nc.publish(self.next_subject, json.dumps(request).encode(), reply=self.inbox)
        except nats.errors.Error:
            self.requested -= want  # closed or reconnecting: the watchdog asks again

    async def ask_again(self) -> None:
        """Forget what we count as outstanding and ask anew: after a reconnect, a restarted
        server (or another node) knows nothing of our requests."""
        self.requested = 0
        self.tail_unchecked = self.delivered is not None
        await self.top_up()

    async def resubscribe(self) -> None:
        """The connection signed in anew (a new nats-py client, shared/bus/connection.py):
        listen on a new inbox, and ask again."""
        self.inbox = self.nc.new_inbox()
        self.subscription = await self.nc.subscribe(self.inbox, cb=self._on_message)
        await self.ask_again()

    async def _on_message(self, msg: Msg) -> None:
        self.last_heard = time.monotonic()
        status = JetStreamContext.is_status_msg(msg)
        if status is None:
            self.unanswered_since = None  # a consumer holds our requests
            self.requested -= 1
            self.buffer.append(msg)
            self.arrived.set()
        elif status == "100":  # a heartbeat: as a message, a consumer holds our requests
            self.unanswered_since = None
        else:  # the request ended (expired, or refused)
            left = (msg.headers or {}).get("Nats-Pending-Messages")
            self.requested = self.requested - int(left) if left is not None else 0
            if consumer_may_be_gone(status, msg):
                self.requested = 0
                if self.unanswered_since is None:
                    self.unanswered_since = self.last_heard
                return  # asked again by the watchdog, a moment later (not in a loop)
        self.requested = max(self.requested, 0)
        await self.top_up()

    def wake(self) -> None:
        """A :meth:`take` waiting now returns at once, with what has arrived."""
        self.arrived.set()

    def interrupt(self) -> None:
        """The service is stopping: :meth:`take` stops waiting, now and from now on."""
        self.interrupted = True
        self.arrived.set()

    async def take(
        self, limit: int | None, *, wait: float, interruptible: bool = True
    ) -> list[Msg]:
        """What has arrived (at most ``limit``), waiting up to ``wait`` s for the first
        (not at all once interrupted, if ``interruptible``)."""
        if not self.buffer and not (interruptible and self.interrupted):
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                # Not wait_for: it runs the wait in a task of its own, on every take.
                async with asyncio.timeout(wait):
                    await self.arrived.wait()
            if not self.buffer and not (interruptible and self.interrupted):
                await self._watchdog()  # timed out, or woken with nothing (Bus.wake)
                return await self._tail() if self.tail_unchecked else []
        if limit is None or len(self.buffer) <= limit:
            batch, self.buffer = self.buffer, []
        else:
            batch, self.buffer = self.buffer[:limit], self.buffer[limit:]
        if not self.buffer:
            self.arrived.clear()
        return batch if self.deliveries is None else await self._mended(batch)

    async def _mended(self, batch: list[Msg]) -> list[Msg]:
        """``batch`` with the messages whose deliveries were lost before any of its own read
        again and put in their place (shared/bus/gaps.py). If they cannot be read now, what
        follows the gap goes back to the buffer, for the next take to try again after
        :data:`REFETCH_RETRY_S`: nothing after a gap is handed over before it."""
        assert self.deliveries is not None
        mended: list[Msg] = []
        taken_before = dataclasses.replace(self.deliveries)
        for index, msg in enumerate(batch):
            if self.deliveries.straggler(msg):
                continue  # read again already (:meth:`_tail`)
            lost = self.deliveries.lost_before(msg)
            if lost is not None and self.refetch is not None:
                try:
                    found = await self.refetch(*lost)
                except BaseException as error:
                    if not isinstance(error, Exception):  # cancelled: as if never taken
                        self.deliveries = taken_before
                        self.buffer[:0] = batch
                        raise
                    self.buffer[:0] = batch[index:]
                    self.arrived.set()
                    log.warning(
                        "deliveries_lost_unread", after=lost[0], before=lost[1], error=repr(error)
                    )
                    if not mended:  # (with some to hand over, the next take tries again)
                        await asyncio.sleep(REFETCH_RETRY_S)
                    return mended
                log.warning("deliveries_lost", after=lost[0], before=lost[1], read_again=len(found))
                mended += found
            self.deliveries.take(msg)
            mended.append(msg)
        return mended

    async def _tail(self) -> list[Msg]:
        """Nothing came since the pump asked again: deliveries the server counts past the
        last taken were lost on the way with the connection (none came after them to show
        the gap), or are still coming; either way they are read again here, and any that
        still comes is dropped as read (:meth:`Deliveries.straggler`). Tried again at the
        next idle take if the server does not answer."""
        assert self.deliveries is not None and self.delivered is not None
        assert self.refetch is not None
        now = time.monotonic()
        if not self.nc.is_connected or now < self.tail_retry_at:
            return []
        try:
            async with asyncio.timeout(TAIL_CHECK_S):
                consumer_seq, stream_seq = await self.delivered()
                found = []
                if consumer_seq > self.deliveries.consumer_seq:
                    found = await self.refetch(self.deliveries.stream_seq, stream_seq + 1)
        except Exception as error:
            if not self.tail_retry_at:  # the first of a run of failures
                log.warning("deliveries_unchecked", error=repr(error))
            self.tail_retry_at = now + REFETCH_RETRY_S
            return []
        self.tail_retry_at = 0.0
        self.tail_unchecked = False
        if consumer_seq > self.deliveries.consumer_seq:
            log.warning(
                "deliveries_lost",
                after=self.deliveries.stream_seq,
                before=stream_seq + 1,
                read_again=len(found),
            )
        self.deliveries.cover(consumer_seq, stream_seq)
        return found

    async def _watchdog(self) -> None:
        """No heartbeat for a few beats: whatever we count as outstanding is not (the
        consumer's leader died, a reconnect, a lost status); ask again rather than wait.

        Requests answered "no consumer" are asked again after :data:`UNANSWERED_RETRY_S`
        (a consumer's leader is being elected, its node restarted: soon answered again); once
        answered so for :data:`CONSUMER_CHECK_S`, the server is asked now and then whether it
        still has the consumer: raises :class:`ConsumerGone` if it has not, or if the answer
        has been "no consumer" for :data:`CONSUMER_INACTIVE_S` on end. Asked on at once,
        such a request is answered so at once, in a loop that reads nothing while the
        service looks ready."""
        now = time.monotonic()
        silent = now - max(self.last_request, self.last_heard)
        if self.unanswered_since is None:
            if silent > PULL_HEARTBEAT_S * PULL_SILENCE_BEATS:
                await self.ask_again()
            return
        if silent < UNANSWERED_RETRY_S:
            return
        if now - self.unanswered_since >= CONSUMER_CHECK_S and now >= self.next_check:
            self.next_check = now + CONSUMER_CHECK_S
            gone = await self._consumer_gone()
            if gone or now - self.unanswered_since > CONSUMER_INACTIVE_S:
                consumer = self.next_subject.rpartition(".")[2]
                why = "deleted, or removed unread" if gone else "unanswered, its node gone"
                log.error("consumer_gone", consumer=consumer, reason=why)
                raise ConsumerGone(f"the server has no consumer {consumer}: {why}")
        await self.ask_again()

    async def _consumer_gone(self) -> bool:
        """Whether the server says it has no such consumer; an unclear answer (a timeout, no
        JetStream leader this instant) is not taken for its absence."""
        info = self.next_subject.replace(".CONSUMER.MSG.NEXT.", ".CONSUMER.INFO.", 1)
        try:
            reply = await self.nc.request(info, b"", timeout=CONSUMER_INFO_TIMEOUT_S)
            error = json.loads(reply.data).get("error") or {}
        except (nats.errors.Error, TimeoutError, ValueError):
            return False
        return bool(error.get("err_code") == CONSUMER_NOT_FOUND)

    async def close(self) -> list[Msg]:
        """Stop asking; returns the messages that arrived and were never taken."""
        self.closed = True
        if self.subscription is not None:
            try:
                await self.subscription.unsubscribe()
            except (nats.errors.Error, ValueError):
                pass
        leftover, self.buffer = self.buffer, []
        self.held.clear()
        return leftover


def consumer_may_be_gone(status: str, msg: Msg) -> bool:
    """Whether a pull request's answer says no consumer took it: ``503`` (no responders: no
    consumer, or none has a leader this instant) or ``409 Consumer Deleted``. Asked again at
    once, such a request is answered so at once, in a loop that reads nothing."""
    if status == "503":
        return True
    return status == "409" and "Consumer Deleted" in (msg.headers or {}).get("Description", "")


# What each consumer was sent and decoded per subject family: what the Kueue benchmark's
# table of readers is made of.
MESSAGES_READ = prometheus_client.Counter(
    "berth_bus_messages_read",
    "Messages this service's consumer was sent (stage delivered) and decoded (stage decoded),"
    " per subject without its names (cq.*.admitted, wl.started...): what was sent and not"
    " decoded was dropped unread.",
    ["consumer", "subject", "stage"],
)


@functools.cache
def read_counter(consumer: str, subject: str, stage: str) -> prometheus_client.Counter:
    """:data:`MESSAGES_READ`'s series for these labels, looked up once: ``labels()`` takes
    a lock and checks its labels at every call, and a consumer counts per take and family.
    The same series ``labels()`` gives (nothing removes one)."""
    return MESSAGES_READ.labels(consumer, subject, stage)


@dataclass
class ReadCounts:
    """What one consumer was sent and what it decoded, per subject family
    (:func:`shared.subjects.subject_family`): a message sent and not decoded was paid for
    (framing, delivery, a Python callback) only to be dropped."""

    delivered: Counter[str] = field(default_factory=Counter)
    decoded: Counter[str] = field(default_factory=Counter)


def decode_batch(
    messages: Sequence[Msg],
    wanted: Callable[[str], bool] | None = None,
    malformed: Callable[[Msg, str], None] | None = None,
    counts: ReadCounts | None = None,
    batches: BatchView | None = None,
) -> list[AnyEvent]:
    """Decode a fetched batch into events; messages whose subject ``wanted`` refuses are
    skipped undecoded, a malformed one is skipped (acking past it drops it) and handed to
    ``malformed`` (a dead letter), else logged. ``counts`` tallies both, per event
    (a batch's at once: its events are all of its family).

    A batch message (``berth.b.*``, shared/bus/batches.py) becomes the events inside it that
    this consumer keeps: those ``batches`` (the consumer's view) and ``wanted`` keep by their
    own per-workload subject; an event of another family than the batch's is malformed."""
    refuse = malformed or _log_malformed
    events: list[AnyEvent] = []
    for msg in messages:
        if is_batch(msg.subject):
            try:
                delivered = counts.delivered if counts is not None else None
                inside = expand(msg, batches, wanted, refuse, delivered)
            except msgspec.DecodeError as error:
                refuse(msg, str(error))
                continue
            if counts is not None and inside:  # all of the batch's family (expand)
                counts.decoded[BATCH_SUBJECTS[msg.subject]] += len(inside)
            events += inside
            continue
        family = subject_family(msg.subject) if counts is not None else ""
        if counts is not None:
            counts.delivered[family] += 1
        if wanted is not None and not wanted(msg.subject):
            continue
        if batches is not None and batches.drops_copies and is_copy(msg):
            continue
        try:
            events.append(decode_event(msg.data))
        except msgspec.DecodeError as error:
            refuse(msg, str(error))
            continue
        if counts is not None:
            counts.decoded[family] += 1
    return events


def _log_malformed(msg: Msg, error: str) -> None:
    log.error("malformed_event", subject=msg.subject, error=error)
