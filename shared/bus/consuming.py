"""Durable and replay consumers: batches handed to a handler, acked once handled
(:class:`Consuming`, a part of ``Bus``).

Consumers keep pull requests outstanding (:class:`~shared.bus.pulling.PullPump`), hand
whatever has arrived to the handler as one batch, and ack only after the handler returned:
one ack for the batch (durable consumers ack all up to a message); a handler that raises gets
the same batch again here, so a later ack never covers a batch that failed; a malformed
message is logged and skipped (never redelivered forever).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from shared.bus.batches import BatchView
from shared.bus.connection import Connection
from shared.bus.errors import bus_call, translated
from shared.bus.fences import fence_before
from shared.bus.filters import (
    BatchReads,
    consumer_filters,
    transition_filters,
    unbatched_until,
)
from shared.bus.gaps import Deliveries, delivered_of, refetcher
from shared.bus.handing import (
    Handed,
    Handler,
    Settling,
    ack_in_order,
    acting_again,
    cancelled,
    hand_over,
    settled,
    stopped_within,
)
from shared.bus.pulling import (
    CONSUMER_INACTIVE_S,
    MESSAGES_READ,
    PULL_EXPIRES_S,
    PullPump,
    ReadCounts,
    decode_batch,
    handling_chunks,
    read_counter,
)
from shared.bus.settings import JS_API_PREFIX, STREAM
from shared.events import AnyEvent
from shared.fencing import Fence
from shared.logging import get_logger

__all__ = ["HANDLER_ATTEMPTS", "MESSAGES_READ", "Consuming", "Handler", "Settling"]

log = get_logger("bus")

HANDLER_ATTEMPTS = 10  # a batch whose handler keeps raising is retried this often, then split


class Consuming(Connection):
    """What ``Bus`` does to consume the event stream."""

    _batch_reads: BatchReads | None = None

    def _reads(self) -> BatchReads:
        """What each consumer keeps of batches, and where it still reads unbatched ones."""
        if self._batch_reads is None:
            self._batch_reads = BatchReads()
        return self._batch_reads

    async def durable_subscription(
        self,
        durable: str,
        subjects: Sequence[str],
        *,
        max_ack_pending: int = 20_000,
    ) -> JetStreamContext.PullSubscription:
        """A durable pull consumer on some subjects: a restarted service resumes where it was.

        The server sends it only ``subjects`` (and the lease markers: :func:`_filters`).
        """
        with translated():
            return await self._durable_subscription(
                durable, subjects, max_ack_pending=max_ack_pending
            )

    async def _durable_subscription(
        self,
        durable: str,
        subjects: Sequence[str],
        *,
        max_ack_pending: int,
    ) -> JetStreamContext.PullSubscription:
        config = api.ConsumerConfig(
            durable_name=durable,
            # One ack per batch: acking each message cost the busiest consumer a tenth of its
            # CPU and nats-server as many ack messages as events.
            ack_policy=api.AckPolicy.ALL,
            deliver_policy=api.DeliverPolicy.ALL,
            filter_subjects=consumer_filters(subjects, batching=self.settings.batching),
            max_ack_pending=max_ack_pending,
            ack_wait=30.0,
        )
        try:
            # A consumer made by an older Berth with other filters (or none) is updated in
            # place: it resumes where it was, and what follows is filtered anew.
            await self.js.add_consumer(STREAM, config)
        except nats.js.errors.APIError:  # 10012, "ack policy can not be updated", or other
            if not await self._recreated_with_new_ack_policy(config):
                raise  # some other change to the consumer was refused
        subscription = await self.js.pull_subscribe_bind(durable, stream=STREAM)
        self._consumer_names[id(subscription)] = durable
        # It resumes after its ack floor: its fence starts from the markers stored up to there.
        floor = (await self.js.consumer_info(STREAM, durable)).ack_floor
        resume = (floor.stream_seq if floor and floor.stream_seq else 0) + 1
        self._fences[id(subscription)] = await fence_before(self.js, stream=STREAM, sequence=resume)
        if self.settings.batching and (until := await unbatched_until(self.js, resume=resume)):
            self._reads().unbatched[id(subscription)] = (until, list(subjects))
            config.filter_subjects = transition_filters(subjects)
            await self.js.add_consumer(STREAM, config)
            log.info("consumer_reads_unbatched", consumer=durable, until=until)
        self._pull_subscriptions.append(subscription)
        self._reads().views[id(subscription)] = BatchView.of(subjects, self.settings.batching)
        return subscription

    async def _recreated_with_new_ack_policy(self, config: api.ConsumerConfig) -> bool:
        """A durable consumer made by an older Berth acks each message, and NATS cannot
        change a consumer's ack policy: recreate it to resume after its ack floor (what was
        acked beyond the floor comes again; handlers are idempotent)."""
        assert config.durable_name is not None
        old = await self.js.consumer_info(STREAM, config.durable_name)
        if old.config.ack_policy == config.ack_policy:
            return False
        resume = (old.ack_floor.stream_seq if old.ack_floor else 0) + 1
        await self.js.delete_consumer(STREAM, config.durable_name)
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = resume
        await self.js.add_consumer(STREAM, config)
        log.info("consumer_recreated", consumer=config.durable_name, resume_at=resume)
        return True

    async def replay_subscription(
        self, subjects: Sequence[str]
    ) -> JetStreamContext.PullSubscription:
        """An ephemeral consumer reading ``subjects`` (and the lease markers) from the
        stream's first message, filtered by the server.

        For a service whose state is the fold of every event (admission, preemption): no
        acks to keep. :meth:`refilter` changes its subjects later.
        """
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            filter_subjects=consumer_filters(subjects, batching=self.settings.batching),
            inactive_threshold=CONSUMER_INACTIVE_S,
        )
        unbatched = self.settings.batching and await unbatched_until(self.js, resume=1)
        if unbatched:
            config.filter_subjects = transition_filters(subjects)
        with translated():
            subscription = await self.js.pull_subscribe("", stream=STREAM, config=config)
        if unbatched:
            self._reads().unbatched[id(subscription)] = (unbatched, list(subjects))
        self._pull_subscriptions.append(subscription)
        self._reads().views[id(subscription)] = BatchView.of(subjects, self.settings.batching)
        return subscription

    async def _past_unbatched(
        self, subscription: JetStreamContext.PullSubscription, messages: Sequence[Msg]
    ) -> None:
        """Once a consumer reading unbatched messages has passed them, the server sends it
        the batch subjects only (and no longer the per-workload copies it drops)."""
        subjects = self._reads().passed(id(subscription), messages)
        if subjects is not None:
            await self.refilter(subscription, subjects)

    async def refilter(
        self, subscription: JetStreamContext.PullSubscription, subjects: Sequence[str]
    ) -> bool:
        """From the next message the server sends on, the consumer gets ``subjects`` (and
        the lease markers) instead of what it got so far; what was sent before stays as it
        is, in stream order (nats-server 2.10 updates a consumer's filters in place, keeping
        its position). Whether the server's consumer changed: not when it already had these
        filters (read from the server, so a shared durable consumer that another replica
        refiltered is set right)."""
        with translated():
            info = await subscription.consumer_info()
            config = info.config
            had = list(config.filter_subjects or ())
            if config.filter_subject:
                had.append(config.filter_subject)
            # Still reading what was stored before batches: on with its new subjects.
            unbatched = self._reads().unbatched
            if (pending := unbatched.get(id(subscription))) is not None:
                unbatched[id(subscription)] = (pending[0], list(subjects))
                config.filter_subjects = transition_filters(subjects)
            else:
                config.filter_subjects = consumer_filters(subjects, batching=self.settings.batching)
            config.filter_subject = None
            changed = sorted(config.filter_subjects) != sorted(had)
            if changed:
                await self.js.add_consumer(info.stream_name, config)
        views = self._reads().views
        view = BatchView.of(subjects, self.settings.batching)
        if id(subscription) in views:  # what it took lately still counts as taken
            view.recent = views[id(subscription)].recent
        views[id(subscription)] = view
        if changed:
            log.info("consumer_refiltered", consumer=info.name, subjects=config.filter_subjects)
        return changed

    def _decode(
        self, subscription: JetStreamContext.PullSubscription, messages: Sequence[Msg]
    ) -> list[AnyEvent]:
        """The events of a batch this consumer's subjects keep (inside a batch message, its
        view picks them: shared/bus/batches.py) that pass its fence."""
        return self.fence(subscription).screen(self._unscreened(subscription, messages))

    def _unscreened(
        self, subscription: JetStreamContext.PullSubscription, messages: Sequence[Msg]
    ) -> list[AnyEvent]:
        """:meth:`_decode` before the fence: a piece handed over later is screened then, so
        the fence (how far the consumer has read) never runs ahead of what was handled."""
        counts = ReadCounts()
        events = decode_batch(
            messages,
            malformed=self.on_malformed,
            counts=counts,
            batches=self._reads().views.get(id(subscription)),
        )
        consumer = self._consumer_names.get(id(subscription), self.source)
        for stage, counter in (("delivered", counts.delivered), ("decoded", counts.decoded)):
            for family, count in counter.items():
                read_counter(consumer, family, stage).inc(count)
        return events

    def fence(self, subscription: JetStreamContext.PullSubscription) -> Fence:
        """The fence this consumer's events pass (shared/fencing.py): void events and markers
        never reach a handler; its ``term(role)`` shows how far the consumer has read."""
        return self._fences.setdefault(id(subscription), Fence())

    async def consume(
        self,
        subscription: JetStreamContext.PullSubscription,
        handler: Handler,
        *,
        stopping: asyncio.Event,
        batch: int = 512,
        settling_batches: int = 8,
    ) -> None:
        """Fetch batches until ``stopping`` is set, handing each batch to ``handler``; for
        durable consumers (acks all up to a message).

        The events of a take go to the handler in pieces of at most
        :data:`~shared.bus.pulling.EVENTS_PER_HANDLING` (:func:`handling_chunks`), in order;
        the take is acked with its last piece.

        A handler may return what it still has in flight (an awaitable: writes sent, acks
        not in yet). The next batch is handed over at once, and a batch is acked, in order,
        once its own settling is done; up to ``settling_batches`` batches may be settling.
        Why: the watcher's bookkeeping round trip per batch held every admission that came
        meanwhile, leaving quota idle for a round trip per workload.

        What was handed over is always finished (handled, settled and acked) before the
        loop returns, so a SIGTERM drains in-flight work instead of dropping it.
        """
        queue: asyncio.Queue[Handed | None] = asyncio.Queue(maxsize=settling_batches)
        acker = asyncio.create_task(self._ack_in_order(queue, handler, stopping))
        try:
            async for messages in self.batches(subscription, stopping=stopping, batch=batch):
                events = self._unscreened(subscription, messages)
                await self._past_unbatched(subscription, messages)
                chunks = handling_chunks(events)
                for number, chunk in enumerate(chunks, start=1):
                    last = messages[-1] if number == len(chunks) else None  # acks the take
                    if not await self._hand_chunk(
                        subscription, chunk, last, handler, stopping, queue, acker
                    ):
                        break
                else:
                    continue
                break  # stopped, or acking failed: the rest of the take stays unacked
            await hand_over(queue, None, acker)
            await acker
        finally:
            if not acker.done():
                await cancelled(acker)
            # Whatever arrived but was not handled goes back now (not after ack_wait), and no
            # pull request of ours outlives the loop to take messages nobody will read.
            for msg in await self._close_pump(subscription):
                try:
                    await msg.nak()
                except nats.errors.Error:
                    break

    async def _hand_chunk(
        self,
        subscription: JetStreamContext.PullSubscription,
        chunk: list[AnyEvent],
        last: Msg | None,
        handler: Handler,
        stopping: asyncio.Event,
        queue: asyncio.Queue[Handed | None],
        acker: asyncio.Task[None],
    ) -> bool:
        """Screen one piece of a take, hand it to the handler and what it left settling to
        the acker (with ``last``, the message that acks the take, on its last piece); False
        if the loop must end (stopped, or acking failed)."""
        events = self.fence(subscription).screen(chunk)
        if self.acting is not None and not await acting_again(self.acting, stopping):
            return False  # stopped while its lease was suspended: this batch stays unacked
        handled, settling = await self._handle(events, handler, stopping=stopping)
        if not handled:
            return False  # stopped while retrying: this batch stays unacked
        if not await hand_over(queue, (last, events, settling), acker):
            if settling is not None:  # finished, though it will not be acked
                await asyncio.gather(settling, return_exceptions=True)
            return False  # acking failed (the connection): nothing more is acked
        return True

    async def _ack_in_order(
        self,
        queue: asyncio.Queue[Handed | None],
        handler: Handler,
        stopping: asyncio.Event,
    ) -> None:
        """Ack each handed-over batch once it has settled, in order (an ack covers every
        earlier message; sent at most every ACK_EVERY_S: handing.Acks). A batch whose
        settling failed is handled again, settled within the retries, before its ack."""

        async def again(events: list[AnyEvent]) -> bool:
            handled, _ = await self._handle(events, handler, stopping=stopping, settle=True)
            return handled

        await ack_in_order(queue, self._ack, again)

    async def _ack(self, last: Msg) -> None:
        with translated():
            # An ack (and, by the ack policy, of all before it) is an empty publish to the
            # message's reply subject, sent on the current client: the message may have
            # come on one that a rotation of the credentials replaced.
            await self.nc.publish(last.reply)

    async def _handle(
        self,
        events: list[AnyEvent],
        handler: Handler,
        *,
        stopping: asyncio.Event,
        settle: bool = False,
    ) -> tuple[bool, Settling | None]:
        """Hand one batch to the handler until it succeeds: (False, None) if the service
        stopped first, else (True, what the handler left settling). With ``settle``, that
        settling is awaited within each attempt.

        Why here and not by nak and redelivery: an ack covers every earlier message, so the
        next batch's ack would cover a failed one. A batch that fails ``HANDLER_ATTEMPTS``
        times is handled one event at a time, and an event that still fails is logged and
        dropped (what max_deliver used to do), so one poison event cannot stop the service.
        """

        delay = 0.1
        for number in range(1, HANDLER_ATTEMPTS + 1):
            try:
                if settle:
                    await settled(handler(events))
                    return True, None
                return True, await handler(events)
            except Exception:
                log.exception("handler_failed", count=len(events), attempt=number)
            if await stopped_within(stopping, delay):
                return False, None
            delay = min(delay * 2, 5.0)
        for event in events:
            for _ in range(3):
                try:
                    await settled(handler([event]))  # one at a time, each settled
                    break
                except Exception:
                    if await stopped_within(stopping, delay):
                        return False, None
            else:
                log.error(
                    "event_dropped",
                    event_id=event.id,
                    workload=event.workload.key,
                    reason=f"its handler failed {HANDLER_ATTEMPTS + 3} times",
                )
        return True, None

    async def replay_to_end(
        self,
        subscription: JetStreamContext.PullSubscription,
        fold: Callable[[list[AnyEvent]], None],
    ) -> int:
        """Fold every stored event through ``fold``; returns how many messages there were.

        For services whose state is the fold of the whole stream: they call this at start and
        decide nothing until it returns. What arrives after the end stays buffered for
        :meth:`next_batch`.
        """
        if (await bus_call(subscription.consumer_info())).num_pending == 0:
            await self._pump(subscription)  # live from here on
            return 0
        pump = await self._pump(subscription)
        count = 0
        while True:
            # Not interruptible: a replay cut short would leave the service deciding on half
            # its state; a stop during it waits for the end (or the grace period).
            messages = await pump.take(2000, wait=PULL_EXPIRES_S, interruptible=False)
            if not messages:
                if (await bus_call(subscription.consumer_info())).num_pending == 0:
                    return count
                continue
            fold(self._decode(subscription, messages))
            await self._past_unbatched(subscription, messages)
            count += len(messages)
            if messages[-1].metadata.num_pending == 0:
                return count

    async def replay_once(
        self, subjects: Sequence[str], fold: Callable[[list[AnyEvent]], None]
    ) -> int:
        """Fold every stored event on ``subjects`` through ``fold`` with a consumer of its
        own, closed once it reached the end; returns how many messages there were.

        For a service that rebuilds part of its state from the stream at start and follows
        the rest with its durable consumer (recovery's waits: docs/ageing.md).
        """
        subscription = await self.replay_subscription(subjects)
        try:
            return await self.replay_to_end(subscription, fold)
        finally:
            await self._close_pump(subscription)
            self._pull_subscriptions.remove(subscription)
            with translated():
                await subscription.unsubscribe()

    async def next_batch(
        self, subscription: JetStreamContext.PullSubscription, *, wait: float
    ) -> list[AnyEvent] | None:
        """The events that arrived (returned as soon as there is one), at most
        :data:`~shared.bus.pulling.EVENTS_PER_HANDLING` (the rest come with the next calls,
        at once: :func:`handling_chunks`), [] when none came within ``wait`` s, None once
        the connection is closed."""
        if self.nc.is_closed or self.nc.is_draining:
            return None
        pump = await self._pump(subscription)
        if not pump.held:
            messages = await pump.take(None, wait=wait)
            pump.held.extend(handling_chunks(self._unscreened(subscription, messages)))
            await self._past_unbatched(subscription, messages)
        return self.fence(subscription).screen(pump.held.popleft())

    async def batches(
        self,
        subscription: JetStreamContext.PullSubscription,
        *,
        stopping: asyncio.Event,
        batch: int = 512,
        idle_timeout: float = 0.5,
    ) -> AsyncIterator[list[Msg]]:
        pump = await self._pump(subscription)
        while not stopping.is_set():
            if self.nc.is_closed or self.nc.is_draining:
                return
            messages = await pump.take(batch, wait=idle_timeout)
            if messages:
                yield messages

    async def _pump(self, subscription: JetStreamContext.PullSubscription) -> PullPump:
        pump = self._pumps.get(id(subscription))
        if pump is None:
            with translated():
                info = await subscription.consumer_info()
                subject = f"{JS_API_PREFIX}.CONSUMER.MSG.NEXT.{info.stream_name}.{info.name}"
                pump = await PullPump.open(
                    self.nc,
                    subject,
                    Deliveries.taken_by(info),
                    refetcher(self.js, subscription, info.stream_name),
                    delivered_of(subscription),
                )
            self._pumps[id(subscription)] = pump
        return pump

    async def _close_pump(self, subscription: JetStreamContext.PullSubscription) -> list[Msg]:
        pump = self._pumps.pop(id(subscription), None)
        return [] if pump is None else await pump.close()
