"""Admission's queue gauges: Kueue's pending, reserving, admitted and usage gauges per
ClusterQueue, LocalQueue and cohort, under Berth's prefix (docs/metrics.md).

Read from the scheduler's state when Prometheus scrapes (shared/metrics.py), and only from the
replica that decides: a standby's copy of the same state would double every sum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from services.admission.model import QueueStats
from shared.config import ClusterQueue, Cohort, LocalQueue
from shared.metrics import GaugeSpec, Samples, StateGauges
from shared.quantities import QuantityError, parse_quantity

if TYPE_CHECKING:
    from services.admission.service import AdmissionService

__all__ = ["QUEUES", "cohort_shares", "queue_samples", "watch_queues"]

_RESOURCE = ("cohort", "cluster_queue", "flavor", "resource")
_LQ_RESOURCE = ("name", "namespace", "flavor", "resource")
QUEUES = StateGauges(
    GaugeSpec(
        "berth_pending_workloads",
        "Pending workloads per ClusterQueue; status active (in the admission queue) or"
        " inadmissible (tried and set aside until something that could help changes).",
        ("cluster_queue", "status"),
    ),
    GaugeSpec(
        "berth_reserving_active_workloads",
        "Workloads holding quota, per ClusterQueue.",
        ("cluster_queue",),
    ),
    GaugeSpec(
        "berth_admitted_active_workloads",
        "Admitted workloads not finished, per ClusterQueue.",
        ("cluster_queue",),
    ),
    GaugeSpec(
        "berth_cluster_queue_status",
        "1 for the ClusterQueue's status (pending: it cannot admit, e.g. stopped or a missing"
        " flavor; active), 0 for the others; terminating is never reported (Berth refuses to"
        " delete a ClusterQueue that holds quota).",
        ("cluster_queue", "status"),
    ),
    GaugeSpec(
        "berth_cluster_queue_resource_reservation",
        "Quota reserved, per flavor and resource (CPU in cores, memory in bytes).",
        _RESOURCE,
    ),
    GaugeSpec(
        "berth_cluster_queue_resource_usage",
        "Quota used by admitted workloads, per flavor and resource (as reservation: a"
        " reservation waiting for admission checks counts too, not yet told apart).",
        _RESOURCE,
    ),
    GaugeSpec(
        "berth_cluster_queue_nominal_quota", "Nominal quota, per flavor and resource.", _RESOURCE
    ),
    GaugeSpec(
        "berth_cluster_queue_borrowing_limit",
        "Borrowing limit, per flavor and resource (absent: no limit).",
        _RESOURCE,
    ),
    GaugeSpec(
        "berth_cluster_queue_lending_limit",
        "Lending limit, per flavor and resource (absent: no limit).",
        _RESOURCE,
    ),
    GaugeSpec(
        "berth_cluster_queue_weighted_share",
        "With fair sharing on: the ClusterQueue's dominant resource share (its largest"
        " borrowed-to-lendable ratio, per mille, over its fairSharing.weight, rounded up).",
        ("cluster_queue", "cohort"),
    ),
    GaugeSpec(
        "berth_cohort_weighted_share",
        "With fair sharing on: the Cohort's dominant resource share (what its subtree uses"
        " above its subtree quota over what its parent could lend, per mille, over its"
        " fairSharing.weight, rounded up; 0 for a root), as its status.fairSharing shows it.",
        ("cohort",),
    ),
    GaugeSpec(
        "berth_local_queue_pending_workloads",
        "Pending workloads per LocalQueue; status active or inadmissible.",
        ("name", "namespace", "status"),
    ),
    GaugeSpec(
        "berth_local_queue_reserving_active_workloads",
        "Workloads holding quota, per LocalQueue.",
        ("name", "namespace"),
    ),
    GaugeSpec(
        "berth_local_queue_admitted_active_workloads",
        "Admitted workloads not finished, per LocalQueue.",
        ("name", "namespace"),
    ),
    GaugeSpec(
        "berth_local_queue_status",
        "1 for the LocalQueue's Active condition (True, False), 0 for the other.",
        ("name", "namespace", "active"),
    ),
    GaugeSpec(
        "berth_local_queue_resource_reservation",
        "Quota reserved by the LocalQueue's workloads, per flavor and resource.",
        _LQ_RESOURCE,
    ),
    GaugeSpec(
        "berth_local_queue_resource_usage",
        "Quota used by the LocalQueue's admitted workloads, per flavor and resource.",
        _LQ_RESOURCE,
    ),
    GaugeSpec(
        "berth_local_queue_admission_fair_sharing_usage",
        "With admission fair sharing: the LocalQueue's decayed consumption, weighted by"
        " resourceWeights and divided by its fairSharing.weight (lower is admitted first).",
        ("name", "namespace", "cluster_queue"),
    ),
)


def _base_units(milli: int) -> float:
    return milli / 1000.0  # CPU in cores, memory in bytes: what Kueue reports


def _quota(value: str | int | float | None) -> float | None:
    if value is None:
        return None
    try:
        return _base_units(parse_quantity(value))
    except QuantityError:
        return None  # config validation refused it already; nothing to report


def cohort_shares(
    cohort_status: Callable[[str], Mapping[str, Any]],
    cluster_queues: Iterable[ClusterQueue],
    cohorts: Iterable[Cohort],
) -> dict[str, int]:
    """Each cohort's weightedShare exactly as its status shows it (``cohort_status``: the
    scheduler's, which `berth get cohorts -o wide` reads), for every cohort a ClusterQueue
    or a Cohort object names (a cohort only a ClusterQueue names counts, as in Kueue's
    cache); none with fair sharing off (no ``fairSharing`` in the status)."""
    objects = list(cohorts)
    names = {queue.cohort_name for queue in cluster_queues}
    names |= {c.metadata.name for c in objects} | {c.parent_name for c in objects}
    shares: dict[str, int] = {}
    for name in sorted(n for n in names if n):
        fair = cohort_status(name).get("fairSharing") or {}
        if "weightedShare" in fair:
            shares[name] = int(fair["weightedShare"])
    return shares


def queue_samples(
    stats: QueueStats,
    cluster_queues: Iterable[ClusterQueue],
    local_queues: Iterable[LocalQueue],
    cohort_weighted_shares: Mapping[str, int] | None = None,
) -> Samples:
    """Every queue gauge's samples from the scheduler's stats, the queues' config and the
    cohorts' shares (:func:`cohort_shares`)."""
    samples: dict[str, list[tuple[tuple[str, ...], float]]] = {
        spec.name: [] for spec in QUEUES.specs
    }

    def add(name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is not None:
            samples[name].append((labels, value))

    for queue in cluster_queues:
        name = queue.metadata.name
        cohort = queue.cohort_name
        active, inadmissible = stats.pending.get(name, (0, 0))
        add("berth_pending_workloads", (name, "active"), active)
        add("berth_pending_workloads", (name, "inadmissible"), inadmissible)
        reserving = stats.reserving.get(name, 0)
        add("berth_reserving_active_workloads", (name,), reserving)
        add("berth_admitted_active_workloads", (name,), reserving)
        is_active = stats.active.get(name, False)
        for status in ("pending", "active", "terminating"):
            add(
                "berth_cluster_queue_status",
                (name, status),
                float(status == ("active" if is_active else "pending")),
            )
        usage = stats.usage.get(name, {})
        for group in queue.spec.resource_groups:
            for flavor in group.flavors:
                for quota in flavor.resources:
                    labels = (cohort, name, flavor.name, quota.name)
                    used = _base_units(usage.get((flavor.name, quota.name), 0))
                    add("berth_cluster_queue_resource_reservation", labels, used)
                    add("berth_cluster_queue_resource_usage", labels, used)
                    add("berth_cluster_queue_nominal_quota", labels, _quota(quota.nominal_quota))
                    add(
                        "berth_cluster_queue_borrowing_limit", labels, _quota(quota.borrowing_limit)
                    )
                    add("berth_cluster_queue_lending_limit", labels, _quota(quota.lending_limit))
        add("berth_cluster_queue_weighted_share", (name, cohort), stats.weighted_share.get(name))
    for cohort_name, share in (cohort_weighted_shares or {}).items():
        add("berth_cohort_weighted_share", (cohort_name,), share)
    for local in local_queues:
        key = (local.metadata.namespace or "default", local.metadata.name)
        lq = (key[1], key[0])  # Kueue's label order: name, namespace
        active, inadmissible = stats.lq_pending.get(key, (0, 0))
        add("berth_local_queue_pending_workloads", (*lq, "active"), active)
        add("berth_local_queue_pending_workloads", (*lq, "inadmissible"), inadmissible)
        reserving = stats.lq_reserving.get(key, 0)
        add("berth_local_queue_reserving_active_workloads", lq, reserving)
        add("berth_local_queue_admitted_active_workloads", lq, reserving)
        add(
            "berth_local_queue_admission_fair_sharing_usage",
            (*lq, local.spec.cluster_queue),
            stats.lq_fair_usage.get(key),
        )
        can_submit = local.spec.stop_policy == "None" and stats.active.get(
            local.spec.cluster_queue, False
        )
        for status in ("True", "False"):
            add("berth_local_queue_status", (*lq, status), float(status == str(can_submit)))
        for (flavor_name, resource), milli in sorted(stats.lq_usage.get(key, {}).items()):
            add(
                "berth_local_queue_resource_reservation",
                (*lq, flavor_name, resource),
                _base_units(milli),
            )
            add(
                "berth_local_queue_resource_usage", (*lq, flavor_name, resource), _base_units(milli)
            )
    return samples


def watch_queues(service: AdmissionService) -> None:
    """Serve the queue gauges from this service's state while it decides."""

    def read() -> Samples:
        if not service.deciding:
            return {}
        cluster_queues = service.config.of_kind(ClusterQueue)
        return queue_samples(
            service.scheduler.queue_stats(),
            cluster_queues,
            service.config.of_kind(LocalQueue),
            cohort_shares(
                service.scheduler.cohort_status, cluster_queues, service.config.of_kind(Cohort)
            ),
        )

    QUEUES.read = read
