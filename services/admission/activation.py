"""Kueue's ``spec.active`` in admission: one active state per workload, whoever deactivated it
(a user's ``berth stop workload`` or kueuectl's ``stop workload``, its maximum execution time,
a Rejected admission check, waitForPodsReady's requeue limit), and one way back: ``berth
resume workload`` reactivates it whatever the reason.

The rule is :func:`services.admission.deactivation.active_after`; :class:`Activity` folds it
(so a replay, a standby and the leader agree) and acts on its transitions:

- Deactivated, a pending workload leaves its queue at once (and its backoff, if it was in
  one); an admitted one keeps its quota until the watcher has stopped it: for a user's stop
  admission requests its eviction (reason ``Deactivated``, once per admission), a Kueue-made
  deactivation is an eviction already. When the watcher reports it evicted its quota is freed
  and it leaves the queue instead of waiting again.
- Either way admission then says so with a ``WorkloadPending`` of reason ``Inactive`` whose
  message gives the reason, and ``preemption_may_help`` false: ``berth get workloads``
  (``-o wide``, ``describe``, ``-o json``: ``spec.active`` and ``status.berth.deactivation``)
  show it, and preemption stops looking for victims for it.
- Reactivated (``SetWorkloadActive(active=True)``), its requeue state starts over (Kueue
  clears ``requeueState``: no backoff, the pods-ready requeue count 0, Requeued ``Reactivated``),
  one deactivated for its maximum execution time gets a fresh budget, and a workload neither
  admitted nor finished is queued again at once with its original creation time and its
  ageing boost; an eviction still in flight completes and it then waits as any evicted one.
- A finished or deleted workload is not affected; a deleted one is forgotten.

Only the leader publishes (:meth:`Activity.due`); what it published comes back through the
fold, which is how a restarted or newly elected leader knows it was already said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from services.admission.deactivation import (
    DEACTIVATED,
    EXEC_CAUSE,
    Deactivation,
    active_after,
    cause_of,
)
from services.admission.evictions import deactivation as deactivate
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
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

__all__ = ["DEACTIVATED", "INACTIVE", "SUBJECTS", "Activity", "pending_message", "queued"]

log = get_logger("admission.activation")
SUBJECTS = ("berth.cmd.active.>",)  # SetWorkloadActive, from the CLI; folded with the state
INACTIVE = "Inactive"  # the pending reason Berth shows while it is inactive
# What Activity.echoed reads (events are never subclassed: exact types; a set lookup before
# three isinstance misses on every other event of the fold).
_ECHOED = frozenset({PriorityBoosted, EvictionRequested, WorkloadPending})


def pending_message(deactivation: Deactivation) -> str:
    """What ``berth get workloads -o wide`` shows of an inactive workload: why, and how back."""
    why = f" due to {deactivation.why}" if deactivation.why else ""
    return (
        f"The workload is inactive (spec.active: false){why}: it is not queued until"
        " `berth resume workload`"
    )


def queued(event: WorkloadSubmitted) -> QueuedWorkload:
    """The scheduler's entry for a submitted workload (at submission and on reactivation)."""
    return QueuedWorkload.of_event(event)


@dataclass
class Activity:
    """Which workloads are inactive and why, and what admission still has to say about them.

    ``gates`` and ``limits`` are the service's own: a reactivation resets the requeue state
    the gates keep and the execution time the limits count."""

    ECHOED: ClassVar[frozenset[type]] = _ECHOED  # what echoed reads; it passes any other by

    gates: Gates = field(default_factory=Gates)
    limits: ExecutionLimits = field(default_factory=ExecutionLimits)
    inactive: dict[str, Deactivation] = field(default_factory=dict)
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
        event: SetWorkloadActive | EvictionRequested,
        record: WorkloadRecord | None,
        scheduler: Scheduler,
        cluster_queue: str,
    ) -> None:
        """Fold one stop, resume or eviction (the rule: deactivation.active_after);
        ``cluster_queue``: the workload's, as far as admission knows ("" if unknown)."""
        ref = event.workload
        if record is None or record.finished:
            if isinstance(event, SetWorkloadActive):
                log.info(
                    "activation_ignored",
                    workload=ref.key,
                    queue="",
                    reason="unknown or finished workload",
                    active=event.active,
                )
            return
        if isinstance(event, EvictionRequested):
            asked = (ref.uid, event.generation)
            cause = cause_of(event)
            # Seen already (a redelivery, a user's stop carried out), or no deactivation.
            if asked in self.evictions_asked or cause is None:
                return
            self.evictions_asked.add(asked)  # this admission's eviction: none other is asked
            if cause.cause == EXEC_CAUSE:  # its limit reported (a replay does not report it
                self.limits.exceeded.add(ref.uid)  # again; a resume gives a fresh budget)
        current = self.inactive.get(ref.uid)
        after = active_after(current, event)
        if after is current:
            return
        if after is not None:
            self._deactivate(ref, after, record, scheduler, cluster_queue, event)
        else:
            self._reactivate(ref, record, scheduler, event)

    def _deactivate(
        self,
        ref: WorkloadRef,
        deactivation: Deactivation,
        record: WorkloadRecord,
        scheduler: Scheduler,
        cluster_queue: str,
        event: Event,
    ) -> None:
        self.inactive[ref.uid] = deactivation
        if record.admission is None:  # pending: out of its queue (and any backoff) now
            self._leave(ref, scheduler)
            self.unannounced[ref.uid] = (f"inactive-{event.id}", cluster_queue)
        log.info(
            "deactivated",
            workload=ref.key,
            queue=record.local_queue,
            reason=deactivation.reason,
            admitted=record.admission is not None,
        )

    def _reactivate(
        self, ref: WorkloadRef, record: WorkloadRecord, scheduler: Scheduler, event: Event
    ) -> None:
        self.inactive.pop(ref.uid, None)
        self.unannounced.pop(ref.uid, None)
        held = self.gates.reactivated(ref.uid)  # requeue state reset, any backoff ended
        self.limits.reactivated(ref.uid, event.time.timestamp())
        record.requeue_count = 0
        record.on_requeue_state("True", "Reactivated", "The workload was reactivated")
        if record.admission is None:  # an eviction in flight requeues it when it lands
            generation = max(self.generations.pop(ref.uid, 0), held)
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
            queue=record.local_queue,
            reason="Reactivated",
        )

    def _leave(self, ref: WorkloadRef, scheduler: Scheduler) -> None:
        held = self.gates.unhold(ref.uid)  # a backoff's hold kept its generation
        self.generations[ref.uid] = max(scheduler.generation(ref), held)
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
        if type(event) not in _ECHOED:
            return
        if type(event) is PriorityBoosted:  # by exact type, as _ECHOED
            self.boosts[event.workload.uid] = event
        elif type(event) is EvictionRequested and event.reason == DEACTIVATED:
            self.evictions_asked.add((event.workload.uid, event.generation))
        elif (
            type(event) is WorkloadPending
            and event.source == "admission"
            and event.reason == INACTIVE
        ):
            self.unannounced.pop(event.workload.uid, None)

    def forget(self, uid: str) -> None:
        """A deleted workload: nothing of it is kept."""
        self.inactive.pop(uid, None)
        self.unannounced.pop(uid, None)
        self.generations.pop(uid, None)
        self.boosts.pop(uid, None)

    def show(self, uid: str, item: dict[str, Any]) -> None:
        """An inactive workload's rendering: Kueue's ``spec.active: false``, and the reason
        it was deactivated for (``status.berth.deactivation``: Kueue's Evicted reason and
        message)."""
        deactivation = self.inactive.get(uid)
        if deactivation is None:
            return
        item["spec"]["active"] = False
        item["status"].setdefault("berth", {})["deactivation"] = {
            "reason": deactivation.reason,
            "message": deactivation.message,
        }

    def due(self, records: dict[str, WorkloadRecord], scheduler: Scheduler) -> list[Event]:
        """The leader's evictions (``Deactivated``) of admitted workloads a user stopped and
        its ``Inactive`` announcements, each once; applied to the records as they are made."""
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
            queue = record.admission.cluster_queue
            eviction = deactivate("deactivate", ref, queue, generation, self.inactive[uid])
            record.on_eviction_requested(eviction)
            log.info(
                "evicting", workload=ref.key, queue=eviction.cluster_queue, reason=eviction.reason
            )
            events.append(eviction)
        for uid, (event_id, cluster_queue) in sorted(self.unannounced.items()):
            record = records.get(uid)
            if record is None:
                continue
            ref = record.ref
            pending = WorkloadPending(
                id=event_id,
                source="admission",
                workload=ref,
                cluster_queue=cluster_queue or "_",
                reason=INACTIVE,
                message=pending_message(self.inactive.get(uid, Deactivation())),
                preemption_may_help=False,
            )
            record.on_pending(pending)
            log.info("pending", workload=ref.key, queue=pending.cluster_queue, reason=INACTIVE)
            events.append(pending)
        self.unannounced.clear()
        return events
