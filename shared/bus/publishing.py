"""Publishing events and updating keys, pipelined, with retries of unknown outcomes
(:class:`Publishing`, a part of ``Bus``).

With ``BusSettings.batching`` the events of one call go as batches, one message per subject
family, each preceded by its events' per-workload copies (shared/bus/batches.py).

Every publish of the record carries ``Nats-Msg-Id`` = the event's id (a batch: a digest of
its events' ids; a per-workload copy carries none, :meth:`Publishing.publish_copies`), and a
publish that times out is retried with the *same* id: its outcome was unknown, and the
stream's duplicate window drops the repeat if the first attempt was in fact stored. Hot paths
publish pipelined (:meth:`Publishing.publish_many`), never one awaited ack at a time.

Plain puts to a bucket may go as JetStream fast batches (:meth:`Publishing.send_key_batch`):
one ack per batch, not per put.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
import nats.errors
from nats.js.kv import KeyValue

from shared.bus.acks import (
    BATCH_DISABLED,
    BATCH_REFUSALS,
    NO_RESPONDERS,
    WRONG_LAST_SEQUENCE,
    Ack,
    AckTimeout,
    PublishRefused,
)
from shared.bus.batches import COPY_HEADER, Prepared, Wire, batched
from shared.bus.buckets import Bucket
from shared.bus.connection import Connection
from shared.bus.errors import BusError, KeyExists, NoStream, translated
from shared.bus.headers import header_value
from shared.events import Event
from shared.logging import get_logger

__all__ = [
    "PUBLISH_ATTEMPTS",
    "KeyBatch",
    "KeyUpdates",
    "Publishing",
    "SentEvents",
    "keep_publishing",
]

log = get_logger("bus")

PUBLISH_ATTEMPTS = 5
PUBLISH_BACKOFF_CAP_S = 2.0
# During an outage a retry is cheap (the same message id: the stream keeps one copy) and the
# stream comes back at an instant nobody announces (a Raft election ends): retrying at most
# this far apart, a publish is stored soon after, not up to a whole backoff later.
OUTAGE_BACKOFF_CAP_S = 0.25


def keep_publishing(attempt: int, *, outage: bool, stopping: bool) -> bool:
    """Whether a publish whose outcome is still unknown after ``attempt`` tries is tried again.

    A service rides out a NATS outage (the server restarting, a cluster electing a leader):
    while the connection is down or has just come back, it retries without limit, unless it
    is stopping (then its unacked batch is redelivered to the next run). Otherwise, and for a
    client that does not reconnect (the CLI), it gives up after :data:`PUBLISH_ATTEMPTS`.
    """
    return attempt < PUBLISH_ATTEMPTS or (outage and not stopping)


class SentEvents:
    """Events sent and not yet acknowledged (:meth:`Publishing.send_many`)."""

    def __init__(
        self,
        bus: Publishing,
        prepared: list[Wire],
        futures: list[asyncio.Future[Ack]],
    ) -> None:
        self.bus = bus
        self.prepared = prepared  # subject, payload, message id
        self.futures = futures

    async def settle(self) -> None:
        """Wait for every ack; publish again (same id) any that failed or went unanswered,
        each before the next ack is awaited. What was sent after a failed one (here, or in
        a later ``send_many``) may already be stored: the copy sent again lands after it, so
        a failover (a reconnect, a stream's leader election) can store them out of order.
        Nothing is lost or stored twice (the stream drops a second copy of an id)."""
        for (subject, payload, msg_id), future in zip(self.prepared, self.futures, strict=True):
            try:
                await future
            except (AckTimeout, PublishRefused):
                await self.bus.publish_raw(subject, payload, msg_id)

    def abandon(self) -> None:
        """Await none of the acks (the caller failed before :meth:`settle`): each outcome
        is read when it comes, so an ack that fails is not reported as "Future exception
        was never retrieved"; nothing is sent again."""
        for future in self.futures:
            future.add_done_callback(_read_outcome)


def _read_outcome(future: asyncio.Future[Ack]) -> None:
    if not future.cancelled():
        future.exception()


class KeyUpdates:
    """Key updates sent and not yet acknowledged (:meth:`Publishing.send_key_updates`)."""

    def __init__(self, keys: list[str], futures: list[asyncio.Future[Ack]]) -> None:
        self.keys = keys
        self.futures = futures

    async def outcomes(self) -> list[int | Exception]:
        """Each update's new revision, or ``KeyExists`` (the swap lost),
        ``AckTimeout`` (unknown, or no stream answered: read the key again) or ``BusError``."""
        outcomes: list[int | Exception] = []
        for key, future in zip(self.keys, self.futures, strict=True):
            try:
                outcomes.append((await future).seq)
            except PublishRefused as refused:
                outcomes.append(_refused(key, refused))
            except AckTimeout as timeout:
                outcomes.append(timeout)
        return outcomes


# Puts in one fast batch at most. Batches of one call overlap, and a stream with two batches in
# flight sends a flow message per message to the later one: few and large, then. Bounded, as
# all of a batch is written again when its ack does not come.
BATCH_WRITES = 2048


class KeyBatch:
    """Plain puts sent as fast batches (:meth:`Publishing.send_key_batch`), not yet acked."""

    def __init__(
        self, kv: Bucket, keys: list[str], sent: list[tuple[int, asyncio.Future[Ack]]]
    ) -> None:
        self.kv = kv
        self.keys = keys
        self.sent = sent  # each batch's size and its commit's ack, in order

    async def outcomes(self) -> list[Exception | None]:
        """Each put's outcome: None (stored), ``AckTimeout`` (not known to be stored: write
        the key again) or ``BusError`` (refused), as :meth:`KeyUpdates.outcomes` says."""
        outcomes: list[Exception | None] = []
        for size, future in self.sent:
            start = len(outcomes)
            outcomes += await self._batch_outcomes(self.keys[start : start + size], future)
        return outcomes

    async def _batch_outcomes(
        self, keys: list[str], future: asyncio.Future[Ack]
    ) -> list[Exception | None]:
        """A batch's ack counts the puts it stored, its first ones: the others were not (a
        gap ends a batch). A batch refused as a batch stored none. A refusal of its first
        put or of its last (the commit) is that put's own, as a plain put's would be; of
        the others, whether they were stored is unknown. All but a put's own refusal are
        ``AckTimeout``, so that the caller writes them again, as after a timeout (a put
        may be stored twice). A stream that no longer takes batches (its option turned
        off) makes the bucket's later writes plain puts, as does a plain publish's ack
        (:func:`_plain_ack`)."""
        try:
            ack = await future
        except AckTimeout as timeout:
            return [timeout for _ in keys]
        except PublishRefused as refused:
            if refused.err_code == BATCH_DISABLED:
                self.kv.stop_batches("the stream's allow_batched is off")
            outcomes: list[Exception | None] = [_unstored(key) for key in keys]
            if refused.err_code not in BATCH_REFUSALS and 0 < refused.place <= len(keys):
                place = refused.place - 1
                outcomes[place] = _refused(keys[place], refused)
            return outcomes
        if not ack.batch:
            return _plain_ack(self.kv, keys)
        stored = min(ack.count, len(keys))
        return [None] * stored + [_unstored(key) for key in keys[stored:]]


def _plain_ack(kv: Bucket, keys: list[str]) -> list[Exception | None]:
    """A batch answered with a plain publish's ack (no ``batch``): the stream's leader does
    not know fast batches (older than nats-server 2.14, as in a rolling upgrade or a
    rollback) and stored its first put as a plain one; whether it stored the others is
    unknown (each was answered, or not, as a plain put). So the first is stored and the
    rest are to be written again, and the bucket's later writes are plain puts: read as a
    batch's ack (count 0), every put would be written again, batched again, forever."""
    kv.stop_batches("the stream's leader answered a batch as plain puts")
    return [None] + [_unstored(key) for key in keys[1:]]


def _unstored(key: str) -> AckTimeout:
    """A put its batch did not store, or not known to (a gap, a refused batch, no ack in
    time, a leader change): ``AckTimeout``, as a timed-out put's, so that the caller writes
    the key again (it may then be stored twice, never lost)."""
    return AckTimeout(f"put of {key}: not stored by its batch, write it again")


def _refused(key: str, refused: PublishRefused) -> BusError:
    """What a refused update of ``key`` is to its caller: ``KeyExists`` (the swap lost),
    ``AckTimeout`` (no stream answered: not stored, try again) or ``BusError``."""
    if refused.err_code == WRONG_LAST_SEQUENCE:
        return KeyExists(f"update of {key}: {refused.description}")
    if refused.code == NO_RESPONDERS:
        # The bucket's stream has no leader this instant (a NATS cluster electing one): not
        # stored, try again, as after a timeout (and as publishes do).
        return AckTimeout(f"update of {key}: {refused.description}")
    return BusError(f"update of {key} refused: {refused.description}")


# A copy's headers, one table for all: nats-py only reads them.
COPY_HEADERS = {COPY_HEADER: "1"}


class Publishing(Connection):
    """What ``Bus`` does to publish: events to the stream, values to buckets."""

    async def publish(self, event: Event) -> Ack:
        """Publish one event and wait for the stream to store it (retrying on timeout); an
        event of a batched family goes as a batch of one (with its copy)."""
        [prepared] = self._prepared([event])
        if not self.settings.batching:
            return await self.publish_raw(prepared.subject, prepared.payload, prepared.msg_id)
        [message], copies = batched([prepared], self.batch_subjects)
        await self.publish_copies(copies)
        return await self.publish_raw(*message)

    def _prepared(self, events: Sequence[Event]) -> list[Prepared]:
        """Subject, payload and message id of each event, stamped with this bus's lease term:
        ``term``, and ``-t<term>`` on the id, so that a new leader's decision is never dropped
        as a copy of a deposed leader's void one (docs/events.md)."""
        term = self.term
        if not term:
            return Prepared.each(events)
        replace = msgspec.structs.replace
        return Prepared.each(
            [replace(event, term=term, id=f"{event.id}-t{term}") for event in events]
        )

    async def publish_copies(self, copies: Sequence[Wire]) -> None:
        """The per-workload copies of the events of batches about to be sent: each on its
        own subject, marked a copy, not awaited (no reply subject: the stream stores it, acks
        nothing). Sent *before* their batch on the same connection, so the stream stores them
        first: whatever a service does on reading the batch (an admission after a submission)
        comes after them in the per-workload view too. Sent after their batch's ack, a
        service's reaction could be stored before the copy of what it reacted to. Best effort:
        the batch is the record (docs/events.md "Batches"). Only the copies the deployment
        keeps (``BusSettings.copies``, ``BERTH_BUS_COPIES``).

        No ``Nats-Msg-Id``: a copy is sent once per batch sent (a retried batch does not
        send its copies again), so the stream's duplicate window would only drop the copy of
        a fact reported again, which a follower is told apart by its event's id as it tells
        a redelivery. With one, nats-server kept every copy's id for the window's two
        minutes, memory and work per copy beyond storing it."""
        copied = self.settings.copied  # BERTH_BUS_COPIES: which events have a copy
        if copied is False or not copies:
            return
        if copied is not True:
            copies = [copy for copy in copies if copied(copy[0])]
        current = self._current  # its client read at each copy: whichever is current then
        try:
            for subject, payload, _ in copies:
                await current.client.publish(subject, payload, "", COPY_HEADERS)
        except nats.errors.Error as error:
            log.warning("copies_unsent", count=len(copies), error=repr(error))

    async def publish_raw(self, subject: str, payload: bytes, msg_id: str) -> Ack:
        """Publish a prepared message until the stream stores it, or give up (BusError)."""
        headers = {"Nats-Msg-Id": header_value(msg_id)}
        delay = 0.1
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._acked(subject, payload, headers)
            except (AckTimeout, nats.errors.Error, NoStream) as error:
                # Unknown outcome: retry with the same id, the duplicate window dedupes.
                # No responders for the stream is an outage too, even on a connection that
                # stayed up: in a NATS cluster, the stream's leader died and its Raft group
                # elects another, which takes seconds. Giving up after PUBLISH_ATTEMPTS
                # failed the watcher's finish round, so the service stopped with Finished
                # reports unsent while their terminal statuses were stored: no watcher ever
                # reported them, and their quota stayed held (bench/failover.py).
                outage = self._in_outage() or (
                    isinstance(error, NoStream) and self.rides_out_outages
                )
                if not keep_publishing(attempt, outage=outage, stopping=self.stopping):
                    raise BusError(f"publish to {subject} failed: {error!r}") from error
                log.warning(
                    "publish_retry",
                    subject=subject,
                    attempt=attempt,
                    outage=outage,
                    error=repr(error),
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, OUTAGE_BACKOFF_CAP_S if outage else PUBLISH_BACKOFF_CAP_S)

    async def _acked(self, subject: str, payload: bytes, headers: dict[str, str]) -> Ack:
        try:
            return await (await self.acks.send(subject, payload, headers))
        except PublishRefused as refused:
            if refused.code == NO_RESPONDERS:
                raise NoStream(str(refused)) from refused  # the stream may be coming up
            raise BusError(f"publish to {subject} refused: {refused.description}") from refused

    async def publish_many(self, events: Sequence[Event]) -> None:
        """Publish a batch pipelined (one round trip for all), then retry any that failed."""
        await (await self.send_many(events)).settle()

    async def send_many(self, events: Sequence[Event]) -> SentEvents:
        """Send the batch of :meth:`publish_many` and return at once: the caller may send
        more (key updates) before it awaits ``settle()``, one round trip for all."""
        prepared = self._prepared(events)
        if self.settings.batching:
            wire, copies = batched(prepared, self.batch_subjects)
        else:
            wire, copies = [p[:3] for p in prepared], []  # subject, payload, message id
        await self.publish_copies(copies)
        futures = await self.acks.send_many(
            [
                (subject, payload, {"Nats-Msg-Id": header_value(msg_id)})
                for subject, payload, msg_id in wire
            ]
        )
        return SentEvents(self, wire, futures)

    async def update_key(self, kv: KeyValue, key: str, value: bytes, *, last: int) -> int:
        """``kv.update`` (compare-and-swap on the key's last revision), pipelined like a
        publish; returns the new revision. A lost swap raises ``KeyExists``, as ``kv.update``
        does; an unanswered one raises ``AckTimeout`` (whether it was stored is unknown: read
        the key again)."""
        [outcome] = await (await self.send_key_updates(kv, [(key, value, last)])).outcomes()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def send_key_updates(
        self, kv: KeyValue, updates: Sequence[tuple[str, bytes, int | None]]
    ) -> KeyUpdates:
        """Many :meth:`update_key` (key, value, last revision) sent at once; this returns
        before the acks, so the caller may send more (a publish) before it awaits
        ``outcomes()``, one round trip for all. A last revision of None is a plain put."""
        if not isinstance(kv, Bucket):
            raise TypeError(f"update a bucket opened by Bus.kv, not {type(kv).__name__}")
        prefix = kv.prefix
        futures = await self.acks.send_many(
            [
                (
                    f"{prefix}{key}",
                    value,
                    # A plain put has no headers (as kv.put): not an empty block to build.
                    None
                    if last is None
                    else {"Nats-Expected-Last-Subject-Sequence": header_value(str(last))},
                )
                for key, value, last in updates
            ]
        )
        return KeyUpdates([key for key, _, _ in updates], futures)

    async def send_key_batch(
        self, kv: KeyValue, puts: Sequence[tuple[str, bytes]]
    ) -> KeyBatch | KeyUpdates:
        """Plain puts (key, value) sent at once, as :meth:`send_key_updates` with no last
        revision, but as fast batches of at most :data:`BATCH_WRITES`: one ack per batch,
        not per put. Only with ``BusSettings.batching`` (``BERTH_BUS_BATCHES``) and where
        the bucket's stream allows them (:meth:`Bucket.allow_batches`, which asks once);
        else they go as plain puts, and the stream is left as it is. No puts: nothing sent
        and nothing asked. ``outcomes()`` says, per put, None or an int (stored),
        ``AckTimeout`` (write it again) or ``BusError``. If a batch cannot be sent, it
        raises, and no batch of the call is awaited (:meth:`AckTracker.send_batches`)."""
        if not isinstance(kv, Bucket):
            raise TypeError(f"update a bucket opened by Bus.kv, not {type(kv).__name__}")
        if not puts:
            return KeyBatch(kv, [], [])
        if not (self.settings.batching and await kv.allow_batches()):
            with translated():
                plain = [(key, value, None) for key, value in puts]
                return await self.send_key_updates(kv, plain)
        prefix = kv.prefix
        pieces = [puts[start : start + BATCH_WRITES] for start in range(0, len(puts), BATCH_WRITES)]
        with translated():
            futures = await self.acks.send_batches(
                [[(prefix + key, value) for key, value in piece] for piece in pieces]
            )
        sent = [(len(piece), future) for piece, future in zip(pieces, futures, strict=True)]
        return KeyBatch(kv, [key for key, _ in puts], sent)
