"""The admission service: the quota authority, one deterministic decision loop.

Its state (config, pending queues, admitted workloads, usage) is the fold of the config
bucket and the event stream. On start it reads the config, then replays the stream from the
first event, deciding nothing until it has caught up (``/readyz`` stays 503 meanwhile). Then
each fetched batch of events is applied and, while this replica leads (docs/replicas.md),
followed by a scheduling pass that admits everything that fits, once the last pass's spacing
has passed (pacing.py); the decisions are published in pieces, their acks awaited behind the
loop, which folds on and runs its next pass once they are in (outbox.py). A standby folds the
same stream and decides nothing; once it holds the lease it decides only after its fold has
passed its own leader marker.

Every decision is applied in memory before it is published and carries a deterministic id
(``admitted-<uid>-<generation>``), so its echo from the stream changes nothing, and a decision
re-published after a crash is dropped by the stream's duplicate window. If a publish fails for
good, the service stops: a restart rebuilds the truth from the stream.

The deciding leader is not sent its own admissions, reservations and pending reports
(:func:`deciding_subjects`): once published, each is folded as its echo would have been
(:meth:`_publish`). A replay and a standby read them from the stream. A leader never widens
its filter again: suspended, nobody else decided meanwhile (its renewal proves it); deposed,
it exits and restarts as a standby.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from datetime import datetime

from nats.js import JetStreamContext

from services.admission import falling_due, metrics, queue_gauges, validation
from services.admission.activation import INACTIVE, Activity, queued
from services.admission.api import serve_api
from services.admission.bounds import AgeingBook
from services.admission.config_settling import ConfigSettling
from services.admission.decisions import PENDING_MESSAGE_INTERVAL_S, Decisions
from services.admission.evictions import eviction as evict
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.interning import Interner
from services.admission.outbox import Outbox
from services.admission.pacing import PassPacing
from services.admission.pending_throttle import PendingThrottle
from services.admission.reading import FOLDED_SUBJECTS, deciding_subjects
from services.admission.scheduler import Admission, Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.bus import EVENTS_PER_HANDLING, BusError
from shared.config import ClusterQueue, LocalQueue
from shared.config_mirror import ConfigMirror
from shared.events import (
    AnyEvent,
    Event,
    EvictionRequested,
    PriorityBoosted,
    SetWorkloadActive,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadPodsReady,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.logging import get_logger
from shared.metrics import sample_consumer_lag
from shared.service import Runtime

__all__ = ["AdmissionService"]

log = get_logger("admission")

IDLE_WAIT_S = 0.2  # how long the loop waits for events when no pass is owed
# Decisions' events sent at a time (_publish): what a consumer hands its handler at once.
PUBLISHED_PIECE = EVENTS_PER_HANDLING
_LEFT = frozenset({WorkloadEvicted, WorkloadFinished, WorkloadDeleted})  # out of its queue
_GONE = frozenset({WorkloadFinished, WorkloadDeleted})  # never pending again
_STOPPED = frozenset({WorkloadEvicted, WorkloadFinished})  # its run has stopped
_MATCHED = _LEFT | {WorkloadSubmitted, WorkloadAdmitted, EvictionRequested, SetWorkloadActive}
_MATCHED |= {WorkloadPending, PriorityBoosted}  # the cases of _apply's match


class AdmissionService:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.bus = runtime.bus
        self.scheduler = Scheduler()
        self.records: dict[str, WorkloadRecord] = {}  # uid -> display record
        self.interner = Interner()  # what pending workloads repeat, kept once
        self.config = ConfigMirror()
        self.bounds = AgeingBook(self.records)  # requests read from the records
        self.pending_throttle = PendingThrottle(PENDING_MESSAGE_INTERVAL_S)
        self.limits = ExecutionLimits()  # maximumExecutionTimeSeconds
        self.gates = Gates()  # admission checks and waitForPodsReady (gates.py)
        # spec.active: every deactivation, and reactivation's resets (activation.py)
        self.activity = Activity(self.gates, self.limits)
        self.deciding = False  # this replica leads and its fold has passed its marker
        self.settling = ConfigSettling(self.config)  # a config burst is taken whole
        self.pacing = PassPacing()  # when the next pass runs (pacing.py)
        self.outbox = Outbox(self.bus, runtime)  # publishes whose acks are still to come
        self.decisions = Decisions(  # what a pass's decisions become (decisions.py)
            self.scheduler, self.records, self.gates, self.limits, self.pending_throttle
        )

    async def run(self) -> None:
        await self.config.start(self.runtime)
        self.config.take_change()
        self._reconfigure()

        subscription = await self.bus.replay_subscription(FOLDED_SUBJECTS)
        started = time.monotonic()
        replayed = await self.bus.replay_to_end(subscription, self._apply)
        log.info("state_rebuilt", events=replayed, seconds=round(time.monotonic() - started, 3))
        api = await serve_api(self)
        queue_gauges.watch_queues(self)
        lag = sample_consumer_lag(self.runtime, consumer="admission", subscription=subscription)
        self.runtime.spawn(lag, name="admission.lag")
        self.runtime.set_ready()  # a warm standby is ready too: it can take over at once
        try:
            await self._live(subscription)
            await self.outbox.settled()  # what the last passes published is stored
        finally:
            await api.unsubscribe()

    # --- events ---------------------------------------------------------------------------

    async def _live(self, subscription: JetStreamContext.PullSubscription) -> None:
        fence = self.bus.fence(subscription)
        pacing, outbox = self.pacing, self.outbox
        outbox.on_settled = lambda: self.bus.wake(subscription)  # a pass may be due now
        while not self.runtime.stopping.is_set():
            # While acks are to come nothing is sent (outbox.py): the wait ends when they are in.
            wait = IDLE_WAIT_S if outbox.busy() else pacing.wait(time.monotonic(), IDLE_WAIT_S)
            events = await self.bus.next_batch(subscription, wait=wait)
            if events is None:
                return
            self._apply(events)
            if events:
                pacing.arrived()
            if not self.runtime.leadership.may_decide(fence):
                self._stand_by()
                continue
            if outbox.busy():
                continue  # the fold goes on; the pass and what fell due wait for the acks
            taking_over = not self.deciding
            if taking_over:
                self.deciding = True
                log.info("deciding", replica=self.runtime.replica, term=self.bus.term)
                try:  # not sent its own admissions (see the docstring)
                    deciding = deciding_subjects(self.bus.settings.batching)
                    await self.bus.refilter(subscription, deciding)
                except BusError as error:  # still sent them: folded twice, idempotent
                    log.warning("refilter_failed", workload="", queue="", reason=str(error))
            # A new leader decides whatever became admissible while nobody decided; a pass
            # after a backoff ends is not spaced; others are, by their own cost (pacing.py).
            if (
                self._requeue_released(time.time())
                or taking_over
                or pacing.take(time.monotonic())
                or self.config.changed.is_set()
            ):
                await self._decide()
            else:
                await self._publish_due()

    def _apply(self, events: Iterable[AnyEvent]) -> None:
        """Fold events into the scheduler; idempotent, so replays and echoes change nothing."""
        # Admission fair sharing's consumption counts from when a fact happened, so a replay
        # after a restart rebuilds the LocalQueues' history: the clock stops at each event. The
        # stream is not always in time order (a watcher's pieces sent again after a failover);
        # fair sharing's ledger counts a step back as no time (Ledger._fold).
        clock = self.scheduler.clock = _StoppedClock()
        deciding = self.deciding
        # The parts every event goes through, looked up once (none is replaced meanwhile),
        # each called only for the kinds it reads (its own filter, hoisted: one call less).
        record_of, checked = self.records.get, validation.CHECKED
        bounds, gates, echoed = self.bounds.apply, self.gates.apply, self.activity.echoed
        bounds_read, gates_read, echoes = AgeingBook.FOLDED, Gates.FOLDED, Activity.ECHOED
        for event in events:
            if type(event) is WorkloadPending and deciding and _own_echo(event):
                continue  # changes nothing (_own_echo)
            kind = type(event)  # set lookups, cheaper than isinstance misses on every event
            ref = event.workload
            record = record_of(ref.uid)
            # A known workload's identity was checked when its submission was folded.
            known = None if record is None else record.ref
            # Only facts with quantities are judged; a refused one is logged and counted,
            # never in the books.
            if kind in checked and validation.refused(event, known):
                continue
            clock.time = event.time  # its epoch seconds only when something reads them
            if kind in bounds_read:
                bounds(event)  # each waiting workload's starvation bound
            # admission checks, pods ready, backoffs
            ready_since = gates(event) if kind in gates_read else None
            if ready_since is not None and record is not None and deciding:
                self._pods_ready(record, event.time.timestamp(), ready_since)
            if type(event) is WorkloadPodsReady and record is not None:  # narrows for mypy
                record.on_pods_ready(event)  # Kueue's PodsReady condition
            if kind in echoes:
                echoed(event)
            if kind in _LEFT:
                self.scheduler.left(ref)
            if kind in _GONE:
                self.pending_throttle.forget(ref.uid)  # never pending again
            if kind in _STOPPED:
                self.limits.stopped(ref.uid, event.time.timestamp())
            if kind not in _MATCHED:  # PodsReady and the like: none of the cases below
                continue
            # By exact type (events are never subclassed): each isinstance miss of a
            # class pattern against a msgspec class costs more than these checks.
            if type(event) is WorkloadSubmitted:
                if record is None:
                    kept = self.interner.submitted(event)  # shared values, once
                    entry = self.records[ref.uid] = WorkloadRecord.of(kept)
                    self.limits.submitted(ref.uid, kept.annotations)
                    self.scheduler.submit(entry)  # held once: the core's entry too
            elif type(event) is WorkloadAdmitted:
                if record is not None and self.scheduler.generation(ref) < event.generation:
                    self.scheduler.restore_admission(
                        ref, event.cluster_queue, event.assignments, generation=event.generation
                    )
                if record is not None and (
                    record.admission is None
                    or record.admission.generation < event.generation
                    or (record.admission.reserved_only and not event.reserved_only)
                ):
                    record.on_admitted(event)
                    self.limits.admitted(ref.uid, event.time.timestamp())
            elif type(event) is WorkloadFinished:
                if record is not None and self.scheduler.generation(ref) == event.generation:
                    if not record.finished:
                        self.scheduler.finish(ref)
                        record.on_finished(event)
            elif type(event) is WorkloadEvicted:
                if (
                    record is not None
                    and not record.finished  # a restarted watcher may report a done run
                    and record.admission is not None
                    and record.admission.generation == event.generation
                ):
                    self.scheduler.evict(ref)
                    self._requeue(ref, record, event.generation)
                    self.activity.evicted(
                        ref, event.generation, self.scheduler, record.admission.cluster_queue
                    )
                    if self.deciding:  # counted once, by the leader, never in a replay
                        metrics.evicted(
                            cluster_queue=record.admission.cluster_queue,
                            namespace=ref.namespace,
                            local_queue=record.admission.local_queue,
                            reason=event.reason,
                        )
                    record.on_evicted(event)
            elif type(event) is EvictionRequested:
                if record is not None:
                    record.on_eviction_requested(event)
                self.scheduler.eviction_requested(ref, event.generation, event.preemptor)
                # A Kueue-made deactivation (max execution time, a Rejected check...)
                self.activity.apply(event, record, self.scheduler, self._queue_of(record))
            elif type(event) is SetWorkloadActive:
                self.pending_throttle.forget(ref.uid)  # no stale pending message after it
                self.activity.apply(event, record, self.scheduler, self._queue_of(record))
            elif type(event) is WorkloadDeleted:
                self.limits.forget(ref.uid)
                self.activity.forget(ref.uid)
                if record is not None:
                    self.scheduler.delete(ref)
                    del self.records[ref.uid]
            elif type(event) is WorkloadPending:
                # Admission's own are echoes (a standby, deciding nothing, shows them);
                # preemption's say why it cannot help yet.
                if record is not None and (event.source != "admission" or not self.deciding):
                    record.on_pending(event)
                if event.source == "preemption":  # no victims: fewer pods may do
                    self.scheduler.no_victims(ref)
            elif type(event) is PriorityBoosted:
                if record is not None:
                    since = 0.0 if event.since is None else event.since.timestamp()
                    self.scheduler.set_boost(
                        ref,
                        event.boost,
                        reserved=event.reserved,
                        since=since,
                        can_preempt=event.can_preempt,
                    )
        self.scheduler.clock = time.time  # decisions are taken now

    def _queue_of(self, record: WorkloadRecord | None) -> str:
        """The ClusterQueue a workload is admitted in or queued for, "" if unknown."""
        if record is None:
            return ""
        if record.admission is not None:
            return record.admission.cluster_queue
        ref = record.ref
        lq = record.submitted.queue_name or "default"
        for local in self.config.of_kind(LocalQueue):
            if (local.metadata.namespace, local.metadata.name) == (ref.namespace, lq):
                return local.spec.cluster_queue
        return ""

    def _stand_by(self) -> None:
        """Not deciding: keep the scheduler's config in step (the leader drains what a
        stopped queue holds; a standby only follows). No pass is owed: the loop waits for
        events, as it would wait forever for a due pass that never comes."""
        self.deciding = False
        self.pacing.clear()
        if self.settling.ready(time.monotonic()) and self.config.take_change():
            self._reconfigure()

    def _reconfigure(self) -> None:
        """The scheduler and the gates take the config as it is now; the metrics' kept
        children of deleted queues are dropped."""
        self.scheduler.set_config(self.config.values())
        self.gates.set_config(self.config.values())
        metrics.forget_queues(
            {cq.metadata.name for cq in self.config.of_kind(ClusterQueue)},
            {
                (lq.metadata.namespace or "default", lq.metadata.name)
                for lq in self.config.of_kind(LocalQueue)
            },
        )

    def _drain(self) -> list[Event]:
        """Evictions for what a HoldAndDrain queue has admitted (once per admission)."""
        events: list[Event] = []
        for ref, cluster_queue, reason in self.scheduler.draining():
            generation = self.scheduler.generation(ref)
            record = self.records.get(ref.uid)
            event = evict(
                "drain",
                ref,
                cluster_queue,
                generation,
                reason,
                message=f"The {'ClusterQueue' if reason.startswith('Cluster') else 'LocalQueue'}"
                " is stopped (HoldAndDrain)",
            )
            if record is not None:
                record.on_eviction_requested(event)
            log.info("draining", workload=ref.key, queue=cluster_queue, reason=reason)
            events.append(event)
        return events

    def _pods_ready(self, record: WorkloadRecord, at: float, admitted_at: float) -> None:
        """Kueue's ready wait times, counted once, by the leader (never in a replay)."""
        if record.admission is None:
            return
        metrics.pods_ready(
            cluster_queue=record.admission.cluster_queue,
            namespace=record.ref.namespace,
            local_queue=record.admission.local_queue,
            waited=max(0.0, at - record.queue_time),
            since_admitted=max(0.0, at - admitted_at),
        )

    def _requeue(self, ref: WorkloadRef, record: WorkloadRecord, generation: int) -> None:
        """After an eviction: one with a backoff (a Retry check, a pods-ready timeout) leaves
        the queue until its requeue time (an inactive one leaves it: Activity.evicted)."""
        if self.gates.after_eviction(ref, generation) == "hold":
            self.scheduler.delete(ref)  # its generations are kept: submit(generation=)
            record.on_requeue_state("False", "BackoffNotFinished", "Waiting for the backoff")

    async def _publish_due(self) -> None:
        """What falls due now, sent without a pass: the gate decisions (:meth:`_gated`),
        then evictions past a maximum execution time and pending reports whose throttle
        ended (:meth:`_after_pass`)."""
        due = (piece for piece in itertools.chain([self._gated()], self._after_pass()) if piece)
        if (first := next(due, None)) is not None:  # most turns: nothing
            await self._publish(itertools.chain([first], due))

    def _gated(self) -> list[Event]:
        """The due decisions of admission checks and waitForPodsReady, their admissions
        folded at once: a pass decided after them counts them (blockAdmission waits for
        their pods). Folded again once sent, like every echo: no change."""
        gated = falling_due.gate_decisions(self.gates, self.records, time.time())
        self._apply([event for event in gated if type(event) is WorkloadAdmitted])
        return gated

    def _after_pass(self) -> Iterator[list[Event]]:
        """What falls due and is sent after a pass, each part made once the part before is
        (each reads what the pass decided): falling_due.py. Held reports released at once
        go in pieces, as a pass's decisions do."""
        limits, records, scheduler = self.limits, self.records, self.scheduler
        yield falling_due.expired(limits, records, scheduler, time.time())
        yield from falling_due.held_reports(
            self.pending_throttle, time.monotonic(), PUBLISHED_PIECE
        )

    def _requeue_released(self, now: float) -> bool:
        """Queue again the workloads whose backoff is over (then a pass admits what fits);
        whether any was."""
        released = self.gates.released(now)
        for ref, reason, generation in released:
            record = self.records.get(ref.uid)
            if record is None or record.finished or self.activity.is_inactive(ref.uid):
                continue  # gone, done, or stopped meanwhile (berth resume queues it)
            wl = queued(record.submitted)  # by its eviction time, or creation (pods_ready.py)
            wl.queue_time = self.gates.pods_ready.order_time(ref.uid, wl.queue_time)
            self.scheduler.submit(wl, generation=generation)
            record.on_requeue_state("True", "BackoffFinished", "The backoff was finished")
            log.info("requeued", workload=ref.key, queue="", reason=reason or "backoff")
        return bool(released)

    async def _decide(self) -> None:
        """A scheduling pass, published after the gate decisions due before it and followed
        by what falls due after it (:meth:`_after_pass`, made once the pass is decided)."""
        if not self.settling.ready(time.monotonic()):
            # More of this config burst is on its way (config_settling.py); what fell due
            # goes out all the same.
            await self._publish_due()
            return
        await self.outbox.settled()  # sent only behind what was sent before (outbox.py)
        first = self._gated()
        if self.config.take_change():
            self._reconfigure()
            first += self._drain()
        if self.gates.blocking():  # waitForPodsReady.blockAdmission: pods not ready yet
            await self._publish(itertools.chain([first], self._after_pass()))
            return
        started = time.monotonic()
        decisions = self.scheduler.schedule()  # also ends the nominations whose victims left
        ended = time.monotonic()
        self.pacing.ran(ended, ended - started)
        if self.scheduler.tried:  # a pass that tried a workload: an attempt
            metrics.attempt(
                admitted_any=any(type(d) is Admission for d in decisions),
                seconds=ended - started,
            )
        first += self.activity.due(self.records, self.scheduler)
        pieces = self.decisions.pieces(decisions, first, size=PUBLISHED_PIECE)
        await self._publish(itertools.chain(pieces, self._after_pass()))

    async def _publish(self, pieces: Iterable[list[Event]]) -> None:
        """Send decisions piece by piece (a large pass's first admissions reach the
        watcher while the rest are made; the acks come behind: outbox.py), then fold this
        replica's admissions and reservations as their echo would be folded: the deciding
        leader is not sent them, nor its pending reports, which need no fold (``_own_echo``;
        an inactive workload's announcement is marked made as it is made: Activity.due;
        services/admission/reading.py). Idempotent like every echo: one
        that comes back anyway (the filter could not be changed) changes nothing. Folded
        before their acks: the scheduler counts them from the pass on, and a publish that
        fails for good stops the service (its successor rebuilds from the stream); the API
        may show an admission meanwhile that its successor decides again."""
        admitted: list[WorkloadAdmitted] = []

        def kept(pieces: Iterable[list[Event]]) -> Iterator[list[Event]]:
            for piece in pieces:
                admitted.extend(event for event in piece if isinstance(event, WorkloadAdmitted))
                yield piece

        await self.outbox.send(kept(pieces))
        if admitted:
            self._apply(admitted)


def _own_echo(event: WorkloadPending) -> bool:
    """A pending report this replica published while deciding, back from the stream (batches
    off: it shares its subjects with preemption's; else only a deciding leader whose filter
    could not be changed is sent it): its fold changes nothing, so the deciding leader skips
    it. Its record took the report when it was decided (decisions.py); no other part folds a
    WorkloadPending (validation, the gates, the ageing bounds: not among their folded types)
    but the scheduler, for
    preemption's reports (``no_victims``), and :meth:`Activity.echoed`, for an inactive
    workload's announcement (reason ``Inactive``: folded as any report)."""
    return event.source == "admission" and event.reason != INACTIVE


class _StoppedClock:
    """A clock stopped at ``time`` (the fold moves it from event to event; 0.0 before the
    first), read in epoch seconds: computed when read (most events are folded unread)."""

    __slots__ = ("time",)

    def __init__(self) -> None:
        self.time: datetime | None = None

    def __call__(self) -> float:
        return 0.0 if self.time is None else self.time.timestamp()
