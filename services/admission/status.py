"""What the admission core shows: Kueue-shaped ClusterQueue and LocalQueue statuses, the
counts behind the metrics, and one view per workload. Read-only over the core's state."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from services.admission.books import QueueBooks
from services.admission.deadlines import WaitTargets
from services.admission.flavors import fmt_quantity
from services.admission.model import LocalQueueKey, QueueStats, WorkloadState, WorkloadView
from services.admission.queues import PENDING, ClusterQueueQueue, Record, State, standing
from services.admission.topology import Topology

__all__ = [
    "cluster_queue_status",
    "due",
    "local_queue_status",
    "queue_stats",
    "workload_views",
]

_STATES: dict[State, WorkloadState] = {
    State.PENDING: "pending",
    State.ADMITTED: "admitted",
    State.FINISHED: "finished",
}
_LQ_BLOCKED = "Can't submit new workloads to clusterQueue"


def _condition(active: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": "Active",
        "status": "True" if active else "False",
        "reason": reason,
        "message": message,
    }


def cluster_queue_status(
    name: str, config: Topology, books: QueueBooks, queue: ClusterQueueQueue | None
) -> dict[str, Any]:
    """Kueue-shaped ClusterQueue status."""
    info = config.cqs.get(name)
    usage = books.cq_usage.get(name, {})
    borrowed = config.tree.borrowed(name)
    flavors: list[dict[str, Any]] = []
    if info is not None:
        for flavor in info.flavor_order:
            resources = []
            for index, group in enumerate(info.groups):
                if flavor not in group:
                    continue
                for resource in info.covered[index]:
                    fr = (flavor, resource)
                    resources.append(
                        {
                            "name": resource,
                            "total": fmt_quantity(resource, usage.get(fr, 0)),
                            "borrowed": fmt_quantity(resource, borrowed.get(fr, 0)),
                        }
                    )
            flavors.append({"name": flavor, "resources": resources})
    admitted = books.cq_admitted.get(name, 0)
    if info is None:
        condition = _condition(False, "NotFound", f"ClusterQueue {name} doesn't exist")
    elif name in config.inactive:
        condition = _condition(False, *config.inactive[name])
    else:
        condition = _condition(True, "Ready", "Can admit new workloads")
    return {
        "pendingWorkloads": 0 if queue is None else queue.size,
        "reservingWorkloads": admitted,
        "admittedWorkloads": admitted,
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "conditions": [condition],
    }


def local_queue_status(
    namespace: str, name: str, config: Topology, books: QueueBooks
) -> dict[str, Any]:
    """Kueue-shaped LocalQueue status."""
    key = (namespace, name)
    by_flavor: dict[str, list[dict[str, str]]] = {}
    for (flavor, resource), value in sorted(books.lq_usage.get(key, {}).items()):
        if value:
            by_flavor.setdefault(flavor, []).append(
                {"name": resource, "total": fmt_quantity(resource, value)}
            )
    admitted = books.lq_admitted.get(key, 0)
    local_queue = config.lqs.get(key)
    if local_queue is None:
        condition = _condition(False, "NotFound", f"LocalQueue {name} doesn't exist")
    elif local_queue.spec.stop_policy != "None":
        condition = _condition(False, "Stopped", "LocalQueue is stopped")
    elif local_queue.spec.cluster_queue not in config.cqs:
        condition = _condition(False, "ClusterQueueDoesNotExist", _LQ_BLOCKED)
    elif local_queue.spec.cluster_queue in config.inactive:
        condition = _condition(False, "ClusterQueueIsInactive", _LQ_BLOCKED)
    else:
        condition = _condition(True, "Ready", "Can submit new workloads to localQueue")
    flavors = [{"name": f, "resources": r} for f, r in by_flavor.items()]
    return {
        "pendingWorkloads": books.lq_pending.get(key, 0),
        "reservingWorkloads": admitted,
        "admittedWorkloads": admitted,
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "conditions": [condition],
    }


def queue_stats(
    queues: Mapping[str, ClusterQueueQueue], config: Topology, books: QueueBooks
) -> QueueStats:
    """Counts and usage per queue for the metrics; O(parked workloads), not O(all)."""
    pending: dict[str, tuple[int, int]] = {}
    lq_inadmissible: dict[LocalQueueKey, int] = {}
    for name, queue in queues.items():
        # An inactive ClusterQueue admits nothing: all its workloads are inadmissible.
        aside = queue.pending() if name in config.inactive else queue.parked_records()
        pending[name] = (queue.size - len(aside), len(aside))
        for record in aside:
            lq = (record.wl.ref.namespace, record.lq_name)
            lq_inadmissible[lq] = lq_inadmissible.get(lq, 0) + 1
    return QueueStats(
        pending=pending,
        reserving=dict(books.cq_admitted),
        usage={name: dict(usage) for name, usage in books.cq_usage.items()},
        active={name: name not in config.inactive for name in config.cqs},
        lq_pending={
            lq: (count - lq_inadmissible.get(lq, 0), lq_inadmissible.get(lq, 0))
            for lq, count in books.lq_pending.items()
        },
        lq_reserving=dict(books.lq_admitted),
        lq_usage={lq: dict(usage) for lq, usage in books.lq_usage.items()},
    )


def due(record: Record, wait_targets: WaitTargets) -> float | None:
    """A queued workload's deadline, if wait targets give it one."""
    if not wait_targets.enabled or record.key is None:
        return None
    deadline = standing(record.key).deadline
    return deadline if 0 < deadline < math.inf else None  # a reservation has none


def workload_views(
    records: Mapping[str, Record],
    queues: Iterable[ClusterQueueQueue],
    wait_targets: WaitTargets,
) -> list[WorkloadView]:
    """Every known workload, with queue positions for the queued pending ones."""
    cq_position: dict[str, int] = {}
    lq_position: dict[str, int] = {}
    for queue in queues:
        per_lq: dict[LocalQueueKey, int] = {}
        for index, record in enumerate(queue.pending()):
            cq_position[record.wl.ref.uid] = index
            lq = (record.wl.ref.namespace, record.lq_name)
            lq_position[record.wl.ref.uid] = per_lq.get(lq, 0)
            per_lq[lq] = per_lq.get(lq, 0) + 1
    views: list[WorkloadView] = []
    for uid, record in records.items():
        reason, message = ("", "") if record.emitted is None else record.emitted[:2]
        pending = record.state is PENDING
        views.append(
            WorkloadView(
                ref=record.wl.ref,
                local_queue=record.lq_name,
                cluster_queue=record.cq,
                priority=record.base or 0,
                effective_priority=record.effective_priority,
                state=_STATES[record.state],
                queue_time=record.wl.queue_time,
                assignments=list(record.assignments),
                reason=reason if pending else "",
                message=message if pending else "",
                position_in_cluster_queue=cq_position.get(uid),
                position_in_local_queue=lq_position.get(uid),
                generation=record.generation,
                due=due(record, wait_targets),
            )
        )
    return views
