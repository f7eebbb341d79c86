"""Recovery's Prometheus metrics: managed jobs (SkyPilot's statuses) and ageing boosts.

Kueue has no managed jobs, so these are Berth's own. Only the replica that leads recovery
serves them (a standby holds no jobs).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Histogram

from shared.jobs import JobStatus, ManagedJob
from shared.metrics import GaugeSpec, Samples, StateGauges

__all__ = ["JOBS", "boosted", "job_samples", "transition"]

JOBS = StateGauges(
    GaugeSpec(
        "berth_managed_jobs",
        "Managed jobs per status (SkyPilot's: PENDING, STARTING, RUNNING, RECOVERING,"
        " SUCCEEDED, FAILED...), every status reported, 0 included.",
        ("status",),
    ),
)
RECOVERIES = Counter(
    "berth_managed_job_recoveries_total",
    "Recoveries of managed jobs (#RECOVERIES: a preemption, or a retried failure).",
)
RECOVERING_SECONDS = Histogram(
    "berth_managed_job_recovering_seconds",
    "Time a managed job spent in RECOVERING, observed when it leaves it.",
    buckets=(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0),
)
BOOSTS = Counter(
    "berth_ageing_boosts_total",
    "Ageing boosts published for waiting preempted jobs, per ClusterQueue; reserved=true"
    " when the boost came with a reservation (docs/ageing.md).",
    ["cluster_queue", "reserved"],
)


def job_samples(jobs: Iterable[ManagedJob]) -> Samples:
    counts = {status.value: 0 for status in JobStatus}
    for job in jobs:
        counts[job.status.value] += 1
    return {"berth_managed_jobs": [((status,), float(n)) for status, n in counts.items()]}


def transition(job: ManagedJob, *, before: JobStatus, recoveries_before: int, now: float) -> None:
    """Count what one step of a job's lifecycle did: each new recovery (#RECOVERIES grew),
    and, when it left RECOVERING, the time since it last entered it."""
    if job.recoveries > recoveries_before:
        RECOVERIES.inc(job.recoveries - recoveries_before)
    if before == JobStatus.RECOVERING and job.status != JobStatus.RECOVERING:
        entered = next(
            (t.time for t in reversed(job.history) if t.status == JobStatus.RECOVERING.value),
            None,
        )
        if entered is not None:
            RECOVERING_SECONDS.observe(max(0.0, now - entered))


def boosted(*, cluster_queue: str, reserved: bool) -> None:
    BOOSTS.labels(cluster_queue=cluster_queue or "_", reserved=str(reserved).lower()).inc()
