"""Admission's Prometheus metrics: Kueue's, under Berth's prefix, then Berth's own.

Kueue's names and labels after the prefix (``kueue_admitted_workloads_total`` is
``berth_admitted_workloads_total{cluster_queue}``), so a Kueue dashboard needs only its
prefix changed. The queue gauges are read from the scheduler when Prometheus scrapes
(shared/metrics.py), and only from the replica that decides: a standby's copy of the same
state would double every sum.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from services.admission.labelled import Children, LightCounter, LightHistogram, Tally
from services.admission.model import QueueStats
from shared.config import ClusterQueue, Cohort, LocalQueue
from shared.metrics import GaugeSpec, Samples, StateGauges
from shared.quantities import QuantityError, parse_quantity

if TYPE_CHECKING:
    from services.admission.service import AdmissionService

__all__ = ["QUEUES", "admitted", "attempt", "checks_passed", "cohort_shares", "evicted"]
__all__ += ["forget_queues", "pods_ready", "queue_samples"]

# Kueue's buckets (1 s to 10240 s, doubling from 2.5) and sub-second ones before them: a
# Kueue panel reading a bucket by its `le` finds it.
WAIT_BUCKETS = (0.1, 0.25, 0.5, 1.0, *(2.5 * 2**n for n in range(13)))
_CQ = ["cluster_queue"]
_LQ = ["name", "namespace"]

# --- Kueue's metrics ---------------------------------------------------------------------------

ADMISSION_ATTEMPTS = LightCounter(
    "berth_admission_attempts_total",
    "Admission attempts (scheduling passes that tried at least one workload), by result:"
    " success if at least one workload was admitted, else inadmissible.",
    ["result"],
)
ADMISSION_ATTEMPT_DURATION = LightHistogram(
    "berth_admission_attempt_duration_seconds",
    "Duration of an admission attempt (one scheduling pass), by result.",
    ["result"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
)
QUOTA_RESERVED = LightCounter(
    "berth_quota_reserved_workloads_total", "Workloads that got quota, per ClusterQueue.", _CQ
)
QUOTA_RESERVED_WAIT = LightHistogram(
    "berth_quota_reserved_wait_time_seconds",
    "Time from queue time (creation, kept across evictions) to quota reservation.",
    _CQ,
    buckets=WAIT_BUCKETS,
)
ADMITTED = LightCounter(
    "berth_admitted_workloads_total", "Workloads admitted (each admission), per ClusterQueue.", _CQ
)
ADMISSION_CHECKS_WAIT = LightHistogram(
    "berth_admission_checks_wait_time_seconds",
    "Time from quota reservation to admission, for workloads that waited for admission"
    " checks, per ClusterQueue.",
    _CQ,
    buckets=WAIT_BUCKETS,
)
READY_WAIT = LightHistogram(
    "berth_ready_wait_time_seconds",
    "Time from queue time (creation, kept across evictions) until the workload's pods are"
    " ready (waitForPodsReady's PodsReady), per ClusterQueue.",
    _CQ,
    buckets=WAIT_BUCKETS,
)
ADMITTED_UNTIL_READY = LightHistogram(
    "berth_admitted_until_ready_wait_time_seconds",
    "Time from admission until the workload's pods are ready, per ClusterQueue.",
    _CQ,
    buckets=WAIT_BUCKETS,
)
ADMISSION_WAIT = LightHistogram(
    "berth_admission_wait_time_seconds",
    "Time from queue time (creation, kept across evictions) to admission, per ClusterQueue.",
    _CQ,
    buckets=WAIT_BUCKETS,
)
EVICTED = LightCounter(
    "berth_evicted_workloads_total",
    "Workloads evicted, per ClusterQueue and Kueue's reason (Preempted, ClusterQueueStopped,"
    " LocalQueueStopped...).",
    ["cluster_queue", "reason"],
)
LQ_QUOTA_RESERVED = LightCounter(
    "berth_local_queue_quota_reserved_workloads_total",
    "Workloads that got quota, per LocalQueue.",
    _LQ,
)
LQ_QUOTA_RESERVED_WAIT = LightHistogram(
    "berth_local_queue_quota_reserved_wait_time_seconds",
    "Time from queue time to quota reservation, per LocalQueue.",
    _LQ,
    buckets=WAIT_BUCKETS,
)
LQ_ADMITTED = LightCounter(
    "berth_local_queue_admitted_workloads_total", "Workloads admitted, per LocalQueue.", _LQ
)
LQ_ADMISSION_CHECKS_WAIT = LightHistogram(
    "berth_local_queue_admission_checks_wait_time_seconds",
    "Time from quota reservation to admission, for workloads that waited for admission"
    " checks, per LocalQueue.",
    _LQ,
    buckets=WAIT_BUCKETS,
)
LQ_READY_WAIT = LightHistogram(
    "berth_local_queue_ready_wait_time_seconds",
    "Time from queue time until the workload's pods are ready, per LocalQueue.",
    _LQ,
    buckets=WAIT_BUCKETS,
)
LQ_ADMITTED_UNTIL_READY = LightHistogram(
    "berth_local_queue_admitted_until_ready_wait_time_seconds",
    "Time from admission until the workload's pods are ready, per LocalQueue.",
    _LQ,
    buckets=WAIT_BUCKETS,
)
LQ_ADMISSION_WAIT = LightHistogram(
    "berth_local_queue_admission_wait_time_seconds",
    "Time from queue time to admission, per LocalQueue.",
    _LQ,
    buckets=WAIT_BUCKETS,
)
LQ_EVICTED = LightCounter(
    "berth_local_queue_evicted_workloads_total",
    "Workloads evicted, per LocalQueue and reason.",
    [*_LQ, "reason"],
)

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

# --- Berth's own ------------------------------------------------------------------------------

LATE = LightCounter(
    "berth_admission_late_total",
    "Admissions after the workload's deadline (Configuration.spec.admission.waitTargets).",
    _CQ,
)
# Facts refused before they reach the quota books (services/admission/validation.py).
REFUSED_FACTS = Counter(
    "berth_admission_refused_facts_total",
    "Workload facts refused as malformed (never folded into quota), by reason.",
    ["reason"],
)

# The children the functions below count on, kept (labelled.py); per queue, for forget_queues.
_KEPT = Children()
_BY_CLUSTER_QUEUE = frozenset(
    {QUOTA_RESERVED, QUOTA_RESERVED_WAIT, ADMITTED, ADMISSION_CHECKS_WAIT, READY_WAIT}
    | {ADMITTED_UNTIL_READY, ADMISSION_WAIT, EVICTED, LATE}
)
_BY_LOCAL_QUEUE = frozenset(
    {LQ_QUOTA_RESERVED, LQ_QUOTA_RESERVED_WAIT, LQ_ADMITTED, LQ_ADMISSION_CHECKS_WAIT}
    | {LQ_READY_WAIT, LQ_ADMITTED_UNTIL_READY, LQ_ADMISSION_WAIT, LQ_EVICTED}
)
# The series one count touches together, kept as one tally per queue (Children.group).
_RESERVATIONS = (QUOTA_RESERVED, LQ_QUOTA_RESERVED, QUOTA_RESERVED_WAIT, LQ_QUOTA_RESERVED_WAIT)
_ADMISSIONS = (ADMITTED, LQ_ADMITTED, ADMISSION_WAIT, LQ_ADMISSION_WAIT)
_RESERVED_AND_ADMITTED = _RESERVATIONS + _ADMISSIONS  # an admission without checks: both
_READINESS = ((READY_WAIT, LQ_READY_WAIT), (ADMITTED_UNTIL_READY, LQ_ADMITTED_UNTIL_READY))


def attempt(*, admitted_any: bool, seconds: float) -> None:
    """A scheduling pass that tried at least one workload is one of Kueue's admission
    attempts: ``success`` if it admitted one, else ``inadmissible``."""
    result = "success" if admitted_any else "inadmissible"
    _KEPT.of(ADMISSION_ATTEMPTS, result).inc()
    _KEPT.of(ADMISSION_ATTEMPT_DURATION, result).observe(seconds)


def admitted(
    *,
    cluster_queue: str,
    namespace: str,
    local_queue: str,
    waited: float,
    late: bool,
    reserved_only: bool = False,
) -> None:
    """A quota reservation, counted per ClusterQueue and LocalQueue with its wait from queue
    time; ``late`` past its wait target. Without admission checks it is an admission at
    once; with them (``reserved_only``) the admission is counted by :func:`checks_passed`."""
    make = _reservation_tally if reserved_only else _reserved_and_admitted_tally
    _KEPT.group(make, cluster_queue, local_queue, namespace).add(waited)
    if late:
        _KEPT.of(LATE, cluster_queue).inc()


def checks_passed(
    *, cluster_queue: str, namespace: str, local_queue: str, waited: float, checks_waited: float
) -> None:
    """A reservation whose admission checks are all Ready is admitted: counted with its wait
    from queue time, and ``checks_waited`` from its reservation."""
    _KEPT.group(_admission_tally, cluster_queue, local_queue, namespace).add(waited)
    _KEPT.of(ADMISSION_CHECKS_WAIT, cluster_queue).observe(checks_waited)
    _KEPT.of(LQ_ADMISSION_CHECKS_WAIT, local_queue, namespace).observe(checks_waited)


def pods_ready(
    *, cluster_queue: str, namespace: str, local_queue: str, waited: float, since_admitted: float
) -> None:
    """A workload's pods became ready: ``waited`` from its queue time, ``since_admitted``
    from its admission (Kueue's ready and admitted-until-ready wait times)."""
    ready, until_ready = _KEPT.group(_readiness_tallies, cluster_queue, local_queue, namespace)
    ready.add(waited)
    until_ready.add(since_admitted)


def _tally(metrics: tuple[Any, ...], cluster_queue: str, local_queue: str, namespace: str) -> Tally:
    """The metrics' children for the queues, counted together: the counters count one, the
    histograms observe one wait (the ClusterQueue's series and the LocalQueue's alike)."""
    kept = _children(metrics, cluster_queue, local_queue, namespace)
    counters = [c for c in kept if type(c) is LightCounter]
    return Tally(counters, [h for h in kept if type(h) is LightHistogram])


# Each series' maker, by its queues alone: a group is kept by its maker and label values
# (Children.group), so no call hashes its metrics.
_reservation_tally = partial(_tally, _RESERVATIONS)
_reserved_and_admitted_tally = partial(_tally, _RESERVED_AND_ADMITTED)
_admission_tally = partial(_tally, _ADMISSIONS)


def _readiness_tallies(cluster_queue: str, local_queue: str, namespace: str) -> tuple[Tally, ...]:
    """One :func:`_tally` per group of :data:`_READINESS`, in order."""
    return tuple(_tally(group, cluster_queue, local_queue, namespace) for group in _READINESS)


def _children(
    metrics: tuple[Any, ...], cluster_queue: str, local_queue: str, namespace: str
) -> tuple[Any, ...]:
    """Each metric's kept child for its queue: the ClusterQueue's or the LocalQueue's."""
    of = _KEPT.of
    return tuple(
        of(m, local_queue, namespace) if m in _BY_LOCAL_QUEUE else of(m, cluster_queue)
        for m in metrics
    )


def evicted(*, cluster_queue: str, namespace: str, local_queue: str, reason: str) -> None:
    """An eviction that freed quota (the watcher's WorkloadEvicted of a current admission),
    per ClusterQueue and LocalQueue, with Kueue's reason."""
    _KEPT.of(EVICTED, cluster_queue, reason).inc()
    _KEPT.of(LQ_EVICTED, local_queue, namespace, reason).inc()


def forget_queues(cluster_queues: Container[str], local_queues: Container[tuple[str, str]]) -> None:
    """The kept children (labelled.py) of ClusterQueues and LocalQueues ``(namespace,
    name)`` that no longer exist are dropped; what the metrics serve is unchanged."""

    def gone(metric: object, values: tuple[str, ...]) -> bool:
        if metric in _BY_LOCAL_QUEUE:  # labels name, namespace[, reason]
            return (values[1], values[0]) not in local_queues
        return metric in _BY_CLUSTER_QUEUE and values[0] not in cluster_queues

    _KEPT.forget(gone)


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
