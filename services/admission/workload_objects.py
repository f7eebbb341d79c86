"""Kueue-shaped Workload objects for ``berth get workloads -o json|yaml`` and scripts.

Admission sees every event of every workload, so it keeps each workload's conditions as
Kueue would write them (QuotaReserved, Admitted, Evicted, Preempted, PodsReady, Finished, each
with status, reason, message and lastTransitionTime) and renders the object on request.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from services.admission.interning import Generations, kept_once
from services.admission.model import QueuedWorkload
from shared.durations import kube_timestamp
from shared.events import (
    EvictionRequested,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadKind,
    WorkloadPending,
    WorkloadPodsReady,
    WorkloadSubmitted,
)
from shared.quantities import format_quantity, is_binary_resource

__all__ = ["WorkloadRecord", "render_workload"]

# Kueue's PodsReady messages (jobframework's generatePodsReadyCondition).
_NOT_READY = "Not all pods are ready or succeeded"
_LOST = "At least one pod has failed, waiting for recovery"
_READY = "All pods reached readiness and the workload is running"


class Condition(msgspec.Struct, frozen=True, gc=False):
    status: str
    reason: str
    message: str
    time: datetime


Conditions = dict[str, Condition]

_NO_CONDITIONS: Conditions = {}  # never written (see WorkloadRecord.conditions)
# One dict per distinct lone condition (a pending report: QuotaReserved False with the pass's
# reason, message and time), shared by every record that has just that one; and one per
# distinct set of several (a pass's admissions in a ClusterQueue: QuotaReserved and
# Admitted, at the pass's moment).
_LONE: dict[tuple[str, Condition], Conditions] = {}
_SETS: dict[tuple[tuple[str, Condition], ...], Conditions] = {}
# The QuotaReserved message per ClusterQueue, one string for all its admissions.
_RESERVED_IN: Generations[str, str] = Generations()
# Each condition set lately: (the dict before by identity, kind, status, reason, message,
# time) -> (that dict, the dict after). The value holds the dict before, so no other dict
# can take its id while the entry is kept. A pass's admissions in a ClusterQueue, or its
# pending reports of one reason, go from one shared dict to one other: found here, with no
# Condition made, hashed or compared.
Transition = tuple[int, str, str, str, str, datetime]
_TRANSITIONS: dict[Transition, tuple[Conditions, Conditions]] = {}
# An admission's whole change lately (no checks): (the dict before by identity, its
# ClusterQueue, the pass's moment) -> (that dict, the dict after). Its steps depend on
# nothing else: one look-up for all of them, and a miss makes only the dict after.
_ADMISSIONS: dict[tuple[int, str, datetime], tuple[Conditions, Conditions]] = {}


def with_condition(conditions: Conditions, kind: str, condition: Condition) -> Conditions:
    """``conditions`` with ``kind`` set to ``condition``, as a new dict: a record's dict is
    never written in place, so it can be shared with every record that holds the same ones
    (kept once). ``kind`` keeps its place if it was there."""
    if not conditions or (len(conditions) == 1 and kind in conditions):
        return kept_once(_LONE, (kind, condition), lambda: {kind: condition})
    updated = {**conditions, kind: condition}
    return kept_once(_SETS, tuple(updated.items()), lambda: updated)


def _condition(
    conditions: Conditions, kind: str, status: str, reason: str, message: str, time: datetime
) -> Condition:
    """Condition ``kind`` as set in ``conditions``: its lastTransitionTime moves only on a
    transition (a condition whose status stays keeps the time it had)."""
    current = conditions.get(kind)
    if current is not None and current.status == status:
        time = current.time
    return Condition(status, reason, message, time)


def admitted_conditions(before: Conditions, queue: str, time: datetime) -> Conditions:
    """The conditions after an admission in ClusterQueue ``queue`` at ``time`` without
    admission checks (Kueue's): QuotaReserved and Admitted True; PodsReady False
    ``WaitForStart`` if it was there (a new admission's pods start over), Evicted False if it
    was there. Each is set as :func:`_condition` sets it, in that order; the dict after is
    kept once (with_condition), never written."""
    updated = dict(before)
    steps = [
        ("QuotaReserved", "True", "QuotaReserved", _reserved_in(queue)),
        ("Admitted", "True", "Admitted", "The workload is admitted"),
    ]
    if "PodsReady" in before:
        steps.append(("PodsReady", "False", "WaitForStart", _NOT_READY))
    if "Evicted" in before:
        steps.append(("Evicted", "False", "Admitted", "The workload is admitted again"))
    for kind, status, reason, message in steps:
        updated[kind] = _condition(updated, kind, status, reason, message, time)
    return kept_once(_SETS, tuple(updated.items()), lambda: updated)


def _reserved_in(queue: str) -> str:
    """The QuotaReserved message of an admission in ``queue``, one string per queue."""
    return _RESERVED_IN.kept(queue, lambda: f"Quota reserved in ClusterQueue {queue}")


# (kind, labels, annotations, creation, requeue count) once per distinct value: a record
# holds one reference, not five (labels and annotations are the interner's shared dicts,
# so they are keyed by identity; the kept value holds them, so no other dict can take
# their ids meanwhile). The creation is None when ``queue_time`` is it, exactly, in UTC
# (the common case: one float per workload, not a datetime too). A record with a creation
# of its own or a requeue count is given a value of its own (never kept, never shared).
Shown = tuple[WorkloadKind, dict[str, str], dict[str, str], datetime | None, int]
_SHOWN: Generations[tuple[str, int, int], Shown] = Generations()  # one per LocalQueue, often


class WorkloadRecord(QueuedWorkload, kw_only=True, gc=False):
    """What admission remembers of a workload for display; updated from its events. Never
    tracked by the garbage collector (one per workload; nothing it holds refers back).

    A workload is held once: the record is the core's entry itself (a QueuedWorkload, the
    one the scheduler queues: identity, queue, pod sets, priorities) with what the displays
    need beside it; :attr:`submitted` gives the event back as the interner kept it. The
    entry's fields read here never change (the core sets only its ``ageing``, which holds its
    nomination too; a requeue gives the core a new entry)."""

    shown: Shown
    # Shared, never written in place: _set replaces it (with_condition). Empty until a first
    # condition is set (most pending workloads have none).
    conditions: Conditions = msgspec.field(default_factory=lambda: _NO_CONDITIONS)
    admission: WorkloadAdmitted | None = None

    @classmethod
    def of(cls, submitted: WorkloadSubmitted) -> WorkloadRecord:
        """The record (and core entry) of a workload submitted as ``submitted``, as the
        interner keeps it."""
        kind, labels, annotations = submitted.kind, submitted.labels, submitted.annotations
        shown = _SHOWN.kept(
            (kind, id(labels), id(annotations)), lambda: (kind, labels, annotations, None, 0)
        )
        record = cls.of_event(submitted, shown=shown)
        created = submitted.created
        if created.tzinfo is not UTC or datetime.fromtimestamp(record.queue_time, UTC) != created:
            record.shown = (kind, labels, annotations, created, 0)
        return record

    @property
    def kind(self) -> WorkloadKind:
        return self.shown[0]

    @property
    def labels(self) -> dict[str, str]:
        return self.shown[1]

    @property
    def annotations(self) -> dict[str, str]:
        return self.shown[2]

    @property
    def requeue_count(self) -> int:
        return self.shown[4]

    @requeue_count.setter
    def requeue_count(self, count: int) -> None:
        kind, labels, annotations, created, _ = self.shown
        self.shown = (kind, labels, annotations, created, count)  # its own: never kept

    @property
    def created(self) -> datetime:
        created = self.shown[3]
        return datetime.fromtimestamp(self.queue_time, UTC) if created is None else created

    @property
    def submitted(self) -> WorkloadSubmitted:
        """The submitted event as Interner.submitted kept it: no id or source, ``time`` its
        creation, term 0 (nothing reads them after the fold)."""
        created = self.created
        return WorkloadSubmitted(
            id="",
            time=created,
            source="",
            workload=self.ref,
            kind=self.kind,
            queue_name=self.local_queue,
            pod_sets=self.pod_sets,
            created=created,
            priority_class=self.priority_class,
            priority_class_name=self.priority_class_name,
            priority=self.priority,
            labels=self.labels,
            annotations=self.annotations,
        )

    def _set(self, kind: str, status: str, reason: str, message: str, time: datetime) -> None:
        """Set condition ``kind`` from one workload's own event: its time is its own, so
        the dict after is too (a new one, never kept: no other record would share it)."""
        before = self.conditions
        self.conditions = {**before, kind: _condition(before, kind, status, reason, message, time)}

    def _set_shared(
        self, kind: str, status: str, reason: str, message: str, time: datetime
    ) -> None:
        """Set condition ``kind`` at a pass's moment, which many records share: the dict
        after depends only on the dict before and these, so a transition seen lately is
        taken as it was (_TRANSITIONS) and a new one is kept once (with_condition)."""
        before = self.conditions
        key = (id(before), kind, status, reason, message, time)
        found = _TRANSITIONS.get(key)
        if found is None:
            condition = _condition(before, kind, status, reason, message, time)
            after = with_condition(before, kind, condition)
            found = kept_once(_TRANSITIONS, key, lambda: (before, after))
        self.conditions = found[1]

    def on_pending(self, event: WorkloadPending) -> None:
        self._set_shared("QuotaReserved", "False", event.reason, event.message, event.time)

    def on_admitted(self, event: WorkloadAdmitted) -> None:
        self.admission = event
        queue = event.cluster_queue
        if event.reserved_only:  # Kueue: QuotaReserved, not Admitted until the checks pass
            message = _reserved_in(queue)
            self._set_shared("QuotaReserved", "True", "QuotaReserved", message, event.time)
            checks = ", ".join(event.admission_checks)
            waiting = f"The workload has not all checks ready: {checks}"
            self._set_shared("Admitted", "False", "UnsatisfiedChecks", waiting, event.time)
            return
        before, at = self.conditions, event.time
        key = (id(before), queue, at)
        found = _ADMISSIONS.get(key)
        if found is None:
            after = admitted_conditions(before, queue, at)
            found = kept_once(_ADMISSIONS, key, lambda: (before, after))
        self.conditions = found[1]

    def on_pods_ready(self, event: WorkloadPodsReady) -> None:
        """Kueue's PodsReady condition of the current admission, once the watcher reported
        on it: True (``Started``; ``Recovered`` after a loss), or False ``WaitForRecovery``
        once its pods lost readiness (recoveryTimeout counts from that transition)."""
        if self.admission is None or self.admission.generation != event.generation:
            return  # another admission's, late
        current = self.conditions.get("PodsReady")
        if not event.ready:
            self._set("PodsReady", "False", "WaitForRecovery", _LOST, event.time)
        elif current is not None and current.reason in ("WaitForRecovery", "Recovered"):
            self._set("PodsReady", "True", "Recovered", _READY, event.time)
        else:
            self._set("PodsReady", "True", "Started", _READY, event.time)

    def on_eviction_requested(self, event: EvictionRequested) -> None:
        self._set("Evicted", "True", event.reason, event.message, event.time)
        if event.reason == "Preempted":
            self._set("Preempted", "True", event.detail or "Preempted", event.message, event.time)

    def on_evicted(self, event: WorkloadEvicted) -> None:
        self.admission = None
        self.requeue_count += 1
        self._set("Evicted", "True", event.reason, event.message, event.time)
        message = "The workload was evicted and is pending again"
        self._set("QuotaReserved", "False", "Pending", message, event.time)
        if "PodsReady" in self.conditions:  # not admitted: its pods wait to start again
            self._set("PodsReady", "False", "WaitForStart", _NOT_READY, event.time)
        self._set("Admitted", "False", "NoReservation", message, event.time)

    def on_requeue_state(self, status: str, reason: str, message: str) -> None:
        """Kueue's Requeued condition: False while a backoff holds the workload out of its
        queue (a Retry check, a pods-ready timeout), True once it is queued again."""
        self._set("Requeued", status, reason, message, datetime.now(UTC))

    def on_finished(self, event: WorkloadFinished) -> None:
        reason = "Succeeded" if event.succeeded else "Failed"
        message = event.message or (
            "Job finished successfully" if event.succeeded else "Job failed"
        )
        self._set("Finished", "True", reason, message, event.time)

    @property
    def finished(self) -> bool:
        return "Finished" in self.conditions


def _quantities(values: dict[str, int]) -> dict[str, str]:
    return {
        resource: format_quantity(milli, binary=is_binary_resource(resource))
        for resource, milli in sorted(values.items())
    }


def render_workload(record: WorkloadRecord, view: dict[str, Any]) -> dict[str, Any]:
    """A Kueue v1beta1 Workload; ``view`` adds what the scheduler knows (queue, positions)."""
    submitted = record.submitted
    ref = submitted.workload
    spec: dict[str, Any] = {
        "queueName": submitted.queue_name or view.get("local_queue") or "default",
        "priority": view.get("priority", 0),
        "podSets": [
            {
                "name": pod_set.name,
                "count": pod_set.count,
                "requests": _quantities(pod_set.requests),
            }
            for pod_set in submitted.pod_sets
        ],
    }
    if submitted.priority_class:
        spec["priorityClassName"] = submitted.priority_class
        spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    elif submitted.priority_class_name:
        spec["priorityClassName"] = submitted.priority_class_name
        spec["priorityClassSource"] = "scheduling.k8s.io/priorityclass"
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": kind,
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
                "lastTransitionTime": kube_timestamp(condition.time),
            }
            for kind, condition in record.conditions.items()
        ],
    }
    if record.admission is not None:
        status["admission"] = {
            "clusterQueue": record.admission.cluster_queue,
            "podSetAssignments": [
                {
                    "name": assignment.pod_set,
                    "count": assignment.count,
                    "flavors": dict(assignment.flavors),
                    "resourceUsage": _quantities(assignment.usage),
                }
                for assignment in record.admission.assignments
            ],
        }
    if view.get("admission_checks"):  # Kueue's status.admissionChecks
        status["admissionChecks"] = view["admission_checks"]
    if record.requeue_count:
        status["requeueState"] = {"count": record.requeue_count}
    berth: dict[str, Any] = {
        "kind": submitted.kind,
        "clusterQueue": view.get("cluster_queue", ""),
        "basePriority": view.get("base_priority", view.get("priority", 0)),
        "effectivePriority": view.get("priority", 0),
    }
    if view.get("due_at") is not None:
        berth["dueAt"] = view["due_at"]
    if view.get("reservation_generation") is not None:  # waiting for its admission checks
        berth["reservationGeneration"] = view["reservation_generation"]
    if view.get("requeue_at") is not None:  # a backoff before it queues again
        berth["requeueAt"] = view["requeue_at"]
    if "runs_by_reason" in view:  # pending: its starvation bound, or why it has none
        berth["runsBy"] = view["runs_by"]
        berth["runsByReason"] = view["runs_by_reason"]
    for key in ("position_in_cluster_queue", "position_in_local_queue"):
        if view.get(key) is not None:
            berth["positionInClusterQueue" if "cluster" in key else "positionInLocalQueue"] = view[
                key
            ]
    status["berth"] = berth
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
            "creationTimestamp": kube_timestamp(submitted.created),
            "labels": dict(submitted.labels),  # a copy: the stored dict is shared (interning)
        },
        "spec": spec,
        "status": status,
    }
