"""The preemption service: chooses victims when a pending workload can only fit by eviction.

Like admission, its state is the fold of the config bucket and the event stream, replayed
from the start before it acts; a standby replica folds the same stream and decides nothing
(docs/replicas.md). Admission's ``WorkloadPending`` with ``preemption_may_help``
names a preemptor and the flavor-resources it needs; the service runs the victim search and
publishes one ``EvictionRequested`` per victim (id ``evict-<uid>-<generation>``, so no
redelivery or re-evaluation ever evicts a workload twice). The watcher stops the victims;
their ``WorkloadEvicted`` frees the quota and admission admits the preemptor.

No thrashing: while a preemptor's evictions are in flight it gets no further victims, and the
room they free is reserved for it in every other search. A preemptor preemption cannot help
is told why (a ``WorkloadPending`` from source "preemption") and looked at again only when
something changes: a config change, its evictions completing, or the end of a victim's
minimum run time.
"""

from __future__ import annotations

import time

from services.preemption import metrics
from services.preemption.cluster import Cluster
from services.preemption.deciding import Decision, decide
from shared.config_mirror import ConfigMirror
from shared.events import (
    STATE_SUBJECTS,
    AnyEvent,
    Event,
    EvictionRequested,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
)
from shared.logging import get_logger
from shared.metrics import sample_consumer_lag
from shared.service import Runtime
from shared.subjects import pending_reports_of

__all__ = ["FOLDED_SUBJECTS", "PreemptionService", "folded_subjects", "forget_told"]

log = get_logger("preemption")

# What the cluster's fold reads (Cluster.apply): the state subjects but pod readiness and
# admission checks' answers. A reservation (cq.*.reserved) holds quota as an admission does.
FOLDED_SUBJECTS = tuple(
    s for s in STATE_SUBJECTS if s not in ("berth.wl.podsready.>", "berth.check.>")
)


def folded_subjects(batching: bool) -> tuple[str, ...]:
    """What preemption's consumer is sent: :data:`FOLDED_SUBJECTS`, with of the pending
    reports only admission's where they have their own subject (batches on:
    :func:`shared.subjects.pending_reports_of`). Its own answers would come back only to be
    dropped: the fold reads admission's reports alone (``Cluster._pending``)."""
    return pending_reports_of("admission", FOLDED_SUBJECTS, batching=batching)


# After a preemptor's victims are gone, give admission this long to admit it before looking
# again (it may have lost the room to a higher-priority workload meanwhile).
SETTLE_SECONDS = 1.0

_BECAUSE = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
    "InCohortFairSharing": "fair sharing within the cohort",
}


# The facts whose victim's room may be what its preemptor waits for (PreemptionService._fold).
_FREEING = frozenset({WorkloadEvicted, WorkloadFinished})
# The facts after which a preemptor's last "cannot help" answer says nothing any more: it was
# admitted (a later wait is another), or it is over (forget_told).
_ENDS_TOLD = frozenset({WorkloadAdmitted, WorkloadFinished, WorkloadDeleted})


def forget_told(told: dict[str, str], events: list[AnyEvent]) -> None:
    """Forget the "cannot help" answers of the preemptors these events admit or end: else
    each stayed for the replica's life, and one admitted, evicted and waiting again with the
    same answer would not be told it."""
    for event in events:
        if type(event) in _ENDS_TOLD:
            told.pop(event.workload.uid, None)


def touches_reservations(cluster: Cluster, events: list[AnyEvent]) -> bool:
    """Whether folding ``events`` may leave a waiting ageing reservation to look at: only if
    the cluster holds a reservation now or a boost in the batch may grant one (nothing else
    adds to ``Cluster.reserved``). Else the fold keeps no set of touched ClusterQueues: with
    no reservation at its end, nothing would read it."""
    return bool(cluster.reserved) or PriorityBoosted in set(map(type, events))


class PreemptionService:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.bus = runtime.bus
        self.cluster = Cluster()
        self.config = ConfigMirror()
        self.due: dict[str, float] = {}  # preemptor uid -> when to look at it (monotonic)
        self.told: dict[str, str] = {}  # preemptor uid -> last "cannot help" message sent

    async def run(self) -> None:
        await self.config.start(self.runtime)
        self.config.take_change()
        self.cluster.set_config(self.config.values())
        subscription = await self.bus.replay_subscription(
            folded_subjects(self.bus.settings.batching)
        )
        lag = sample_consumer_lag(self.runtime, consumer="preemption", subscription=subscription)
        self.runtime.spawn(lag, name="preemption.lag")
        await self.bus.replay_to_end(subscription, lambda events: self._fold(events, live=False))
        self.runtime.set_ready()  # a warm standby is ready too: it can take over at once
        fence = self.bus.fence(subscription)
        deciding = False
        while not self.runtime.stopping.is_set():
            # A short timeout: a protection that ends must be looked at even when all is quiet.
            events = await self.bus.next_batch(subscription, wait=0.25)
            if events is None:
                return
            self._fold(events, live=True)
            # A standby folds and decides nothing; a new leader decides once its fold has
            # passed its own marker (docs/replicas.md).
            if not self.runtime.leadership.may_decide(fence):
                deciding = False
                continue
            if not deciding:
                deciding = True
                log.info("deciding", replica=self.runtime.replica, term=self.bus.term)
                now = time.monotonic()  # every waiting preemptor gets a look from this leader
                self.due = {uid: now for uid in self.cluster.waiting}
            await self._evaluate_due()

    # --- inputs ---------------------------------------------------------------------------

    def _fold(self, events: list[AnyEvent], *, live: bool) -> None:
        if self.config.take_change():
            self.cluster.set_config(self.config.values())
            now = time.monotonic()
            self.due.update({uid: now for uid in self.cluster.waiting})
        cluster = self.cluster
        apply, queue_of, victims = cluster.apply, cluster.queue_of, cluster.victim_of
        if not live:
            for event in events:
                apply(event)
            return
        # ClusterQueues whose room or reservations changed, for the waiting reservations
        # below; kept only if there can be one when the batch is folded (touches_reservations).
        touched: set[str] | None = set() if touches_reservations(cluster, events) else None
        if self.told:
            forget_told(self.told, events)
        due, folds, waiting = self.due, cluster.folds, cluster.waiting
        for event in events:
            uid = event.workload.uid
            kind = type(event)
            victim_of = victims.get(uid) if kind in _FREEING else None
            fold = folds.get(kind)  # Cluster.apply, without its call
            if touched is not None:
                queue = queue_of.get(uid)
                if queue:
                    touched.add(queue)
                if fold is not None:
                    fold(event)
                queue = queue_of.get(uid)
                if queue:
                    touched.add(queue)
            elif fold is not None:
                fold(event)
            if kind is WorkloadPending:
                # Admission's report (again) asks for room; this service's own answer (batches
                # off: it shares their subjects) changes nothing to look at.
                if uid in waiting and event.source == "admission":
                    due[uid] = time.monotonic()
            elif victim_of is not None:
                if not cluster.busy(victim_of) and victim_of in cluster.waiting:
                    due[victim_of] = time.monotonic() + SETTLE_SECONDS
        # A waiting reservation is looked at whenever its ClusterQueue changes: room it needs
        # may have been freed or promised elsewhere, and its bound counts every step.
        for queue in touched if touched and cluster.reserved else ():
            first = cluster.first_reservation(queue)
            if first is not None and first in cluster.waiting:
                due[first] = time.monotonic()

    # --- decisions ------------------------------------------------------------------------

    async def _evaluate_due(self) -> None:
        now = time.monotonic()
        ready = sorted(uid for uid, when in self.due.items() if when <= now)
        outgoing: list[Event] = []
        for uid in ready:
            del self.due[uid]
            outgoing.extend(self._evaluate(uid))
        if outgoing:
            await self.bus.publish_many(outgoing)

    def _evaluate(self, uid: str) -> list[Event]:
        pending = self.cluster.waiting.get(uid)
        if pending is None:
            return []
        wall = time.time()
        started = time.perf_counter()
        decision = decide(self.cluster, uid, wall)  # services/preemption/deciding.py
        metrics.SEARCH_SECONDS.observe(time.perf_counter() - started)
        if decision.victims:
            return self._evict(pending, decision)
        if decision.retry_at is not None:
            self.due[uid] = time.monotonic() + max(0.0, decision.retry_at - wall) + 0.05
        message = decision.message
        if not message or self.told.get(uid) == message:
            return []
        self.told[uid] = message
        log.info(
            "preemption_cannot_help",
            workload=pending.workload.key,
            queue=pending.cluster_queue,
            reason=message,
        )
        return [
            WorkloadPending(
                source="preemption",
                workload=pending.workload,
                cluster_queue=pending.cluster_queue,
                reason="Pending",
                message=f"{pending.message}; {message}",
                priority=pending.priority,
            )
        ]

    def _evict(self, pending: WorkloadPending, decision: Decision) -> list[Event]:
        events: list[Event] = []
        preemptor = pending.workload
        # A reservation's victims are told why: not the priority of the workload it frees
        # room for, but that workload's wait (docs/ageing.md).
        because = "an ageing reservation" if decision.reservation else ""
        for victim in decision.victims:
            workload = victim.workload
            generation = self.cluster.generations.get(workload.ref.uid, 0)
            event = EvictionRequested(
                id=f"evict-{workload.ref.uid}-{generation}",
                source="preemption",
                workload=workload.ref,
                cluster_queue=workload.cluster_queue,
                generation=generation,
                reason="Preempted",
                detail=victim.reason,
                message=(
                    f"Preempted to accommodate a workload (UID: {preemptor.uid},"
                    f" name: {preemptor.key}) due to {because or _BECAUSE[victim.reason]}"
                ),
                preemptor=preemptor,
            )
            self.cluster.apply(event)  # in memory now, so nothing else counts on this room
            events.append(event)
            metrics.PREEMPTED.labels(
                preempting_cluster_queue=pending.cluster_queue, reason=victim.reason
            ).inc()
            log.info(
                "preempting",
                workload=workload.ref.key,
                queue=workload.cluster_queue,
                reason=because or victim.reason,
                preemptor=preemptor.key,
                preemptor_queue=pending.cluster_queue,
            )
        self.told.pop(preemptor.uid, None)
        return events
