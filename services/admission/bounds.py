"""Each waiting workload's starvation bound, for ``RUNS BY`` and ``status.berth.runsBy``.

The formula is ``shared.starvation.runs_by``; this module folds what it needs from the events
admission already sees: each managed job's ageing clock (``PriorityBoosted.since``), when its
current wait began (its last ``WorkloadEvicted``), its ClusterQueue (its last admission), its
request, and when an aged workload ended. Every input is an event time, so every replica
(and a restarted one) shows the same bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.admission.model import WorkloadView
from shared.config import ClusterQueue, ClusterQueuePolicy, policy_for
from shared.events import (
    AnyEvent,
    PodSet,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadSubmitted,
)
from shared.starvation import Bound, Earlier, QueueFacts, Waiting, queue_facts, runs_by

__all__ = ["AgeingBook", "request_of"]


def request_of(pod_sets: Iterable[PodSet]) -> dict[str, int]:
    """A workload's whole request: milli-units per resource over its pods."""
    total: dict[str, int] = {}
    for pod_set in pod_sets:
        for resource, value in pod_set.requests.items():
            total[resource] = total.get(resource, 0) + value * pod_set.count
    return total


@dataclass(slots=True)
class Aged:
    since: float
    queue: str  # the ClusterQueue of its last admission
    request: dict[str, int]
    ended_at: float | None = None


class AgeingBook:
    def __init__(self) -> None:
        self._pod_sets: dict[str, list[PodSet]] = {}  # uid -> pod sets, until it ages
        self._queue: dict[str, str] = {}  # uid -> ClusterQueue of its last admission
        self._waiting_since: dict[str, float] = {}  # uid -> its last eviction
        self.aged: dict[str, Aged] = {}  # uid -> ageing facts, kept after it ends

    def apply(self, event: AnyEvent) -> None:
        """Fold one event; idempotent."""
        uid = event.workload.uid
        at = event.time.timestamp()
        match event:
            case WorkloadSubmitted():
                self._pod_sets.setdefault(uid, event.pod_sets)
            case WorkloadAdmitted():
                self._queue[uid] = event.cluster_queue
                if uid in self.aged:
                    self.aged[uid].queue = event.cluster_queue
            case WorkloadEvicted():
                self._waiting_since[uid] = at
            case PriorityBoosted() if event.since is not None and uid not in self.aged:
                self.aged[uid] = Aged(
                    since=event.since.timestamp(),
                    queue=self._queue.get(uid, ""),
                    request=request_of(self._pod_sets.pop(uid, [])),
                )
            case WorkloadFinished() | WorkloadDeleted():
                self._pod_sets.pop(uid, None)
                self._queue.pop(uid, None)
                self._waiting_since.pop(uid, None)
                aged = self.aged.get(uid)
                if aged is not None and aged.ended_at is None:
                    aged.ended_at = at
                    self._forget_ended()

    def _forget_ended(self) -> None:
        """An ended workload matters to later clocks only while it ended after one of them
        started (before that, it was gone before their reservations could begin)."""
        alive = [aged.since for aged in self.aged.values() if aged.ended_at is None]
        oldest = min(alive, default=float("inf"))
        gone = [u for u, a in self.aged.items() if a.ended_at is not None and a.ended_at <= oldest]
        for uid in gone:
            del self.aged[uid]

    def bound(
        self,
        view: WorkloadView,
        *,
        policies: Iterable[ClusterQueuePolicy],
        facts: QueueFacts | None,
        blocked: str = "",
    ) -> Bound | None:
        """The bound of a pending workload (None for any other): ``shared.starvation.runs_by``
        with this book's facts; ``facts`` are its ClusterQueue's (None: unknown), ``blocked``
        says why admission cannot admit it at all."""
        if view.state != "pending":
            return None
        uid = view.ref.uid
        aged = self.aged.get(uid)
        if facts is None:
            facts = QueueFacts(view.cluster_queue, {}, {}, {}, preempts=False)
            blocked = blocked or view.message or "its ClusterQueue is unknown"
        earlier: list[Earlier] = []
        if aged is not None:
            clock = (aged.since, uid)
            earlier = [
                Earlier(other.request, other.ended_at)
                for other_uid, other in self.aged.items()
                if other.queue == view.cluster_queue and (other.since, other_uid) < clock
            ]
        waiting = Waiting(
            queue=facts,
            request=aged.request if aged is not None else {},
            since=None if aged is None else aged.since,
            waiting_since=self._waiting_since.get(uid, 0.0),
            earlier=earlier,
            blocked=blocked,
        )
        return runs_by(policy_for(policies, view.cluster_queue), waiting)


def queues_of(cluster_queues: Iterable[ClusterQueue]) -> dict[str, QueueFacts]:
    return {cq.metadata.name: queue_facts(cq) for cq in cluster_queues}
