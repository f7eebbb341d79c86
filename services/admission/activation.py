"""Kueue's ``spec.active``: a workload set inactive (``berth stop workload``, kueuectl's
``stop workload``) is never admitted until it is active again (``berth resume workload``).

The rule, applied in the fold (so a replay, a standby and the leader agree):

- ``SetWorkloadActive(active=False)`` marks the workload inactive. A pending one leaves its
  queue at once; an admitted one keeps its quota until the watcher has stopped it: admission
  requests its eviction with Kueue's reason ``Deactivated`` (once per admission), the
  normal eviction path, and when the watcher reports it evicted its quota is freed and it
  leaves the queue instead of waiting again.
- Either way admission then says so with a ``WorkloadPending`` of reason ``Inactive`` and
  ``preemption_may_help`` false: ``berth get workloads``/``describe`` show it, and preemption
  stops looking for victims for it.
- ``SetWorkloadActive(active=True)`` clears the mark: a workload that is neither admitted
  nor finished is queued again with its original creation time and its ageing boost
  (Kueue's Requeued reason ``Reactivated``); an eviction still in flight completes and the
  workload then waits as any evicted one does.
- A finished or deleted workload is not affected; a deleted one is forgotten.

Only the leader publishes (:meth:`Activity.due`); what it published comes back through the
fold, which is how a restarted or newly elected leader knows it was already said.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.admission.model import QueuedWorkload
from services.admission.scheduler import Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.events import (
    Event,
    EvictionRequested,
    PriorityBoosted,
    SetWorkloadActive,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.logging import get_logger

__all__ = ["DEACTIVATED", "INACTIVE", "SUBJECTS", "Activity", "queued"]

log = get_logger("admission.activation")
SUBJECTS = ("berth.cmd.active.>",)  # SetWorkloadActive, from the CLI; folded with the state
DEACTIVATED = "Deactivated"  # Kueue's Evicted reason for spec.active false
INACTIVE = "Inactive"  # the pending reason Berth shows while it is inactive
EVICT_MESSAGE = "The workload is deactivated (spec.active: false)"
PENDING_MESSAGE = (
    "The workload is inactive (spec.active: false): it is not queued until `berth resume workload`"
)


def queued(event: WorkloadSubmitted) -> QueuedWorkload:
    """The scheduler's entry for a submitted workload (at submission and on reactivation)."""
    return QueuedWorkload(
        ref=event.workload,
        local_queue=event.queue_name,
        pod_sets=event.pod_sets,
        queue_time=event.created.timestamp(),
        priority_class=event.priority_class,
        priority_class_name=event.priority_class_name,
        priority=event.priority,
    )


@dataclass
class Activity:
    """Which workloads are inactive, and what admission still has to say about them."""

    inactive: set[str] = field(default_factory=set)
    # To announce as Inactive: uid -> (the announcement's id, its ClusterQueue); emptied by
    # the leader's publication or the echo of it.
    unannounced: dict[str, tuple[str, str]] = field(default_factory=dict)
    evictions_asked: set[tuple[str, int]] = field(default_factory=set)  # (uid, generation)
    generations: dict[str, int] = field(default_factory=dict)  # admissions before it left
    boosts: dict[str, PriorityBoosted] = field(default_factory=dict)  # latest, to restore

    def is_inactive(self, uid: str) -> bool:
        return uid in self.inactive

    def apply(
        self,
        event: SetWorkloadActive,
        record: WorkloadRecord | None,
        scheduler: Scheduler,
        cluster_queue: str,
    ) -> None:
        """Fold one stop or resume (the rule in the module's docstring); ``cluster_queue``:
        the workload's, as far as admission knows ("" if its LocalQueue is unknown)."""
        ref = event.workload
        if record is None or record.finished:
            log.info(
                "activation_ignored",
                workload=ref.key,
                queue="",
                reason="unknown or finished workload",
                active=event.active,
            )
            return
        if not event.active:
            if ref.uid in self.inactive:
                return
            self.inactive.add(ref.uid)
            if record.admission is None:  # pending: out of its queue now
                self._leave(ref, scheduler)
                self.unannounced[ref.uid] = (f"inactive-{event.id}", cluster_queue)
            log.info(
                "deactivated",
                workload=ref.key,
                queue=record.submitted.queue_name,
                reason="spec.active false",
                admitted=record.admission is not None,
            )
            return
        if ref.uid not in self.inactive:
            return
        self.inactive.discard(ref.uid)
        self.unannounced.pop(ref.uid, None)
        if record.admission is None:  # an eviction in flight requeues it when it lands
            generation = self.generations.pop(ref.uid, 0)
            scheduler.submit(queued(record.submitted), generation=generation)
            boost = self.boosts.get(ref.uid)
            if boost is not None:
                since = 0.0 if boost.since is None else boost.since.timestamp()
                scheduler.set_boost(
                    ref,
                    boost.boost,
                    reserved=boost.reserved,
                    since=since,
                    can_preempt=boost.can_preempt,
                )
        log.info(
            "reactivated",
            workload=ref.key,
            queue=record.submitted.queue_name,
            reason="Reactivated",
        )

    def _leave(self, ref: WorkloadRef, scheduler: Scheduler) -> None:
        self.generations[ref.uid] = scheduler.generation(ref)
        scheduler.delete(ref)

    def evicted(
        self, ref: WorkloadRef, generation: int, scheduler: Scheduler, cluster_queue: str
    ) -> None:
        """The watcher stopped an admission (already released by the caller): an inactive
        workload leaves the queue instead of waiting again, and is announced."""
        if ref.uid in self.inactive:
            self._leave(ref, scheduler)
            self.unannounced[ref.uid] = (f"inactive-{ref.uid}-{generation}", cluster_queue)

    def echoed(self, event: Event) -> None:
        """What admission published about inactive workloads, back from the stream, and
        each workload's latest ageing boost (restored when it is queued again)."""
        if isinstance(event, PriorityBoosted):
            self.boosts[event.workload.uid] = event
        elif isinstance(event, EvictionRequested) and event.reason == DEACTIVATED:
            self.evictions_asked.add((event.workload.uid, event.generation))
        elif (
            isinstance(event, WorkloadPending)
            and event.source == "admission"
            and event.reason == INACTIVE
        ):
            self.unannounced.pop(event.workload.uid, None)

    def forget(self, uid: str) -> None:
        """A deleted workload: nothing of it is kept."""
        self.inactive.discard(uid)
        self.unannounced.pop(uid, None)
        self.generations.pop(uid, None)
        self.boosts.pop(uid, None)

    def due(self, records: dict[str, WorkloadRecord], scheduler: Scheduler) -> list[Event]:
        """The leader's evictions (``Deactivated``) of admitted inactive workloads and its
        ``Inactive`` announcements, each once; applied to the records as they are made."""
        events: list[Event] = []
        for uid in sorted(self.inactive):
            record = records.get(uid)
            if record is None or record.admission is None or record.finished:
                continue
            ref = record.admission.workload
            generation = scheduler.generation(ref)
            if (uid, generation) in self.evictions_asked:
                continue
            if not scheduler.holds_quota(ref, generation):
                continue
            self.evictions_asked.add((uid, generation))
            eviction = EvictionRequested(
                id=f"deactivate-{uid}-{generation}",
                source="admission",
                workload=ref,
                cluster_queue=record.admission.cluster_queue,
                generation=generation,
                reason=DEACTIVATED,
                message=EVICT_MESSAGE,
            )
            record.on_eviction_requested(eviction)
            log.info("evicting", workload=ref.key, queue=eviction.cluster_queue, reason=DEACTIVATED)
            events.append(eviction)
        for uid, (event_id, cluster_queue) in sorted(self.unannounced.items()):
            record = records.get(uid)
            if record is None:
                continue
            ref = record.submitted.workload
            pending = WorkloadPending(
                id=event_id,
                source="admission",
                workload=ref,
                cluster_queue=cluster_queue or "_",
                reason=INACTIVE,
                message=PENDING_MESSAGE,
                preemption_may_help=False,
            )
            record.on_pending(pending)
            log.info("pending", workload=ref.key, queue=pending.cluster_queue, reason=INACTIVE)
            events.append(pending)
        self.unannounced.clear()
        return events
