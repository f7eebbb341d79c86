"""Admission's Prometheus metrics: Kueue's, under Berth's prefix, then Berth's own.

Kueue's names and labels after the prefix (``kueue_admitted_workloads_total`` is
``berth_admitted_workloads_total{cluster_queue}``), so a Kueue dashboard needs only its
prefix changed. The queue gauges, read from the scheduler when Prometheus scrapes, are
in queue_gauges.py.
"""

from __future__ import annotations

from collections.abc import Container
from functools import partial
from typing import Any

from prometheus_client import Counter

from services.admission.labelled import (
    Children,
    CounterChild,
    HistogramChild,
    LightCounter,
    LightHistogram,
    Tally,
)

__all__ = ["admitted", "attempt", "checks_passed", "evicted", "forget_queues", "pods_ready"]

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
    " ready (waitForPodsReady's PodsReady; observed only while it is enabled), per"
    " ClusterQueue.",
    _CQ,
    buckets=WAIT_BUCKETS,
)
ADMITTED_UNTIL_READY = LightHistogram(
    "berth_admitted_until_ready_wait_time_seconds",
    "Time from admission until the workload's pods are ready (observed only while"
    " waitForPodsReady is enabled), per ClusterQueue.",
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
    "Time from queue time until the workload's pods are ready (observed only while"
    " waitForPodsReady is enabled), per LocalQueue.",
    _LQ,
    buckets=WAIT_BUCKETS,
)
LQ_ADMITTED_UNTIL_READY = LightHistogram(
    "berth_local_queue_admitted_until_ready_wait_time_seconds",
    "Time from admission until the workload's pods are ready (observed only while"
    " waitForPodsReady is enabled), per LocalQueue.",
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
    counters = [c for c in kept if type(c) is CounterChild]
    return Tally(counters, [h for h in kept if type(h) is HistogramChild])


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
