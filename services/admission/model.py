"""The admission core's public value types: what goes in, and the decisions that come out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import msgspec

from shared.events import FlavorAssignment, PodSet, WorkloadRef, WorkloadSubmitted
from shared.quota import FlavorResource

__all__ = [
    "NO_AGEING",
    "Admission",
    "Ageing",
    "Decision",
    "Inadmissible",
    "QueueStats",
    "QueuedWorkload",
    "WorkloadView",
]


Q = TypeVar("Q", bound="QueuedWorkload")


class Ageing(msgspec.Struct, frozen=True, gc=False):
    """What ageing and preemption set on a queued workload (QueuedWorkload's properties of
    the same names say what each means). One value, not four fields of every workload: most
    never have any, and share :data:`NO_AGEING`."""

    boost: int = 0
    reserved: bool = False
    since: float = 0.0
    nominated: bool = False


NO_AGEING = Ageing()


def _ageing(boost: int, reserved: bool, since: float, nominated: bool) -> Ageing:
    """The ageing of these values: :data:`NO_AGEING` itself for none."""
    if not (boost or reserved or since or nominated):
        return NO_AGEING
    return Ageing(boost, reserved, since, nominated)


class QueuedWorkload(msgspec.Struct, gc=False):
    """A pending workload as the core queues it. Never tracked by the garbage collector (a
    million of them would make every full collection walk them): it refers to no object
    that refers back to it."""

    ref: WorkloadRef
    local_queue: str  # kueue.x-k8s.io/queue-name; "" means the namespace's LocalQueue "default"
    pod_sets: list[PodSet]
    queue_time: float  # epoch seconds of creation; an evicted workload keeps it (ordering only)
    priority_class: str = ""  # WorkloadPriorityClass (label kueue.x-k8s.io/priority-class)
    priority_class_name: str = ""  # scheduling.k8s.io PriorityClass (pod priorityClassName)
    priority: int | None = None  # pod spec priority set directly
    ageing: Ageing = NO_AGEING  # its ageing and nomination: the shared value while it has none

    @property
    def boost(self) -> int:
        """The ageing boost added to its base priority."""
        return self.ageing.boost

    @property
    def reserved(self) -> bool:
        """Reserved (a starving managed job): it goes first in its ClusterQueue and, while
        it does not fit, nothing behind it is admitted, so released quota accumulates for it."""
        return self.ageing.reserved

    @property
    def since(self) -> float:
        """Its ageing clock: reservations go earliest clock first."""
        return self.ageing.since

    @property
    def nominated(self) -> bool:
        """Nominated (a preemptor whose victims are being evicted): the room they free is its
        own, so it goes before everything else in its ClusterQueue, reservations included."""
        return self.ageing.nominated

    def nominate(self, nominated: bool) -> None:
        """Nominated or no longer (``nominated``), its boost, reservation and clock kept."""
        ageing = self.ageing
        if ageing.nominated is not nominated:
            self.ageing = _ageing(ageing.boost, ageing.reserved, ageing.since, nominated)

    def age(self, boost: int, reserved: bool, since: float) -> bool:
        """Take recovery's latest boost, reservation and clock (its nomination kept);
        whether anything changed."""
        ageing = self.ageing
        if (ageing.boost, ageing.reserved, ageing.since) == (boost, reserved, since):
            return False
        self.ageing = _ageing(boost, reserved, since, ageing.nominated)
        return True

    @classmethod
    def of_event(cls: type[Q], event: WorkloadSubmitted, **more: Any) -> Q:
        """The scheduler's entry for a submitted workload (at submission and on
        reactivation); ``more``: a subclass's own fields (the service's WorkloadRecord)."""
        return cls(
            ref=event.workload,
            local_queue=event.queue_name,
            pod_sets=event.pod_sets,
            queue_time=event.created.timestamp(),
            priority_class=event.priority_class,
            priority_class_name=event.priority_class_name,
            priority=event.priority,
            **more,
        )


class Admission(msgspec.Struct, frozen=True, gc=False):
    """Decision: the workload is admitted with these flavors; its quota is reserved. (The
    decisions are never tracked by the garbage collector: a first pass makes half a
    million, and tracked they started full collections in the middle of the pass.)"""

    ref: WorkloadRef
    cluster_queue: str
    local_queue: str
    priority: int  # the base priority (without boost), as Kueue records it
    assignments: list[FlavorAssignment]
    queue_time: float = 0.0  # epoch seconds: creation, kept across evictions
    due: float | None = None  # its deadline under wait targets (epoch seconds)
    # With fair sharing on: its ClusterQueue's weightedShare once admitted (for the log).
    weighted_share: int | None = None


class Inadmissible(msgspec.Struct, frozen=True, gc=False):
    """Decision: the workload stays pending; emitted only when the reason or message changed."""

    ref: WorkloadRef
    cluster_queue: str
    reason: str
    message: str
    preemption_may_help: bool = False
    # (pod set, resource, flavor) where preemption would have to make room.
    preempt_flavors: tuple[tuple[str, str, str], ...] = ()
    # (flavor, resource, amount) needed there, for the preemption service.
    contested: tuple[tuple[str, str, int], ...] = ()


Decision = Admission | Inadmissible

WorkloadState = Literal["pending", "admitted", "finished"]


@dataclass(frozen=True, slots=True)
class WorkloadView:
    ref: WorkloadRef
    local_queue: str
    cluster_queue: str  # "" while unresolved
    priority: int  # base priority (0 while unresolvable)
    effective_priority: int  # base + boost
    state: WorkloadState
    queue_time: float
    assignments: list[FlavorAssignment] = field(default_factory=list)
    reason: str = ""
    message: str = ""
    position_in_cluster_queue: int | None = None  # 0-based, pending and queued only
    position_in_local_queue: int | None = None
    generation: int = 0  # how many times it has been admitted
    due: float | None = None  # queued under wait targets: when it is due (epoch seconds)


LocalQueueKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What the metrics show of the queues, per ClusterQueue and per LocalQueue.

    Pending workloads are (active, inadmissible) as Kueue counts them: inadmissible ones
    were tried and set aside until something changes (or their ClusterQueue is inactive).
    Usage is in milli-units per (flavor, resource); reserving counts admitted workloads.
    """

    pending: dict[str, tuple[int, int]]
    reserving: dict[str, int]
    usage: dict[str, dict[FlavorResource, int]]
    active: dict[str, bool]  # configured ClusterQueue -> can it admit
    lq_pending: dict[LocalQueueKey, tuple[int, int]]
    lq_reserving: dict[LocalQueueKey, int]
    lq_usage: dict[LocalQueueKey, dict[FlavorResource, int]]
    # Fair sharing: each ClusterQueue's weightedShare; admission fair sharing: each
    # LocalQueue's weighted consumption (services/admission/fairness.py).
    weighted_share: dict[str, int] = field(default_factory=dict)
    lq_fair_usage: dict[LocalQueueKey, float] = field(default_factory=dict)
