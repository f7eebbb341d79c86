"""The rules behind the metrics, without a stack: Kueue's pending statuses from the admission
core, the queue gauges' samples, and what a managed job's step counts."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from services.admission.queue_gauges import queue_samples
from services.admission.scheduler import QueuedWorkload, Scheduler
from services.recovery import metrics as recovery_metrics
from shared.config import ClusterQueue, LocalQueue, parse_object
from shared.events import PodSet, WorkloadRef
from shared.jobs import JobStatus, ManagedJob, Transition
from tests.scheduler_world import cq, flavor, group, lq


def _scheduler(**spec: Any) -> tuple[Scheduler, list[Any]]:
    objects = [
        parse_object(document)
        for document in (
            flavor("f"),
            cq("cq", group(["cpu"], ("f", {"cpu": (1, 2, None)})), cohort="co", **spec),
            lq("lq", "cq"),
        )
    ]
    scheduler = Scheduler()
    scheduler.set_config(objects)
    for index in range(3):
        ref = WorkloadRef("default", f"w{index}", f"u{index}")
        pod_set = PodSet("main", 1, {"cpu": 1000})
        scheduler.submit(QueuedWorkload(ref, "lq", [pod_set], queue_time=float(index)))
    scheduler.schedule()
    return scheduler, objects


# (ClusterQueue spec, (active, inadmissible), why)
PENDING_CASES = [
    ({}, (0, 2), "BestEffortFIFO: the two that did not fit were tried and set aside"),
    ({"stopPolicy": "Hold"}, (0, 3), "an inactive ClusterQueue admits nothing: all inadmissible"),
]


@pytest.mark.parametrize(
    ("spec", "expected", "reason"), PENDING_CASES, ids=[c[2] for c in PENDING_CASES]
)
def test_pending_statuses(spec: dict[str, Any], expected: tuple[int, int], reason: str) -> None:
    """Kueue's pending_workloads{status}: active in the queue, or inadmissible."""
    scheduler, _ = _scheduler(**spec)
    stats = scheduler.queue_stats()
    assert stats.pending["cq"] == expected, reason
    assert stats.lq_pending[("default", "lq")] == expected, reason


def test_queue_samples() -> None:
    """Usage and quotas in base units with Kueue's labels; one status at 1; an unset
    lending limit is absent."""
    scheduler, objects = _scheduler()
    samples = {
        name: dict(values)
        for name, values in queue_samples(
            scheduler.queue_stats(),
            [o for o in objects if isinstance(o, ClusterQueue)],
            [o for o in objects if isinstance(o, LocalQueue)],
        ).items()
    }
    resource = ("co", "cq", "f", "cpu")
    assert samples["berth_cluster_queue_resource_usage"][resource] == 1.0
    assert samples["berth_cluster_queue_nominal_quota"][resource] == 1.0
    assert samples["berth_cluster_queue_borrowing_limit"][resource] == 2.0
    assert samples["berth_cluster_queue_lending_limit"] == {}
    assert samples["berth_cluster_queue_status"] == {
        ("cq", "pending"): 0.0,
        ("cq", "active"): 1.0,
        ("cq", "terminating"): 0.0,
    }
    assert samples["berth_reserving_active_workloads"][("cq",)] == 1.0
    assert samples["berth_local_queue_pending_workloads"][("lq", "default", "inadmissible")] == 2.0
    assert samples["berth_local_queue_status"][("lq", "default", "True")] == 1.0
    assert samples["berth_local_queue_resource_usage"][("lq", "default", "f", "cpu")] == 1.0


def _job(status: JobStatus, recoveries: int, history: list[tuple[float, str]]) -> ManagedJob:
    job = ManagedJob(id=1, name="j", namespace="default", resources="1x[CPU:1]", submitted_at=0.0)
    job.status, job.recoveries = status, recoveries
    job.history = [Transition(time, name) for time, name in history]
    return job


# (before, recoveries before, job after, recoveries counted, RECOVERING seconds observed, why)
TRANSITION_CASES = [
    (
        JobStatus.RUNNING,
        0,
        _job(JobStatus.RECOVERING, 1, [(5.0, "RUNNING"), (10.0, "RECOVERING")]),
        1,
        None,
        "a preemption is one recovery",
    ),
    (
        JobStatus.RECOVERING,
        1,
        _job(JobStatus.STARTING, 1, [(10.0, "RECOVERING"), (14.0, "STARTING")]),
        0,
        4.0,
        "leaving RECOVERING: the time since it entered",
    ),
    (
        JobStatus.RUNNING,
        0,
        _job(JobStatus.SUCCEEDED, 0, [(5.0, "RUNNING"), (9.0, "SUCCEEDED")]),
        0,
        None,
        "a plain step counts nothing",
    ),
]


@pytest.mark.parametrize(
    ("before", "recoveries", "job", "counted", "seconds", "reason"),
    TRANSITION_CASES,
    ids=[c[5] for c in TRANSITION_CASES],
)
def test_job_transition(
    before: JobStatus,
    recoveries: int,
    job: ManagedJob,
    counted: int,
    seconds: float | None,
    reason: str,
) -> None:
    """One lifecycle step counts new recoveries and the time spent in RECOVERING."""

    def read() -> tuple[float, float]:
        total = REGISTRY.get_sample_value("berth_managed_job_recoveries_total")
        spent = REGISTRY.get_sample_value("berth_managed_job_recovering_seconds_sum")
        return total or 0.0, spent or 0.0

    total, spent = read()
    now = job.history[-1].time
    recovery_metrics.transition(job, before=before, recoveries_before=recoveries, now=now)
    assert read() == (total + counted, spent + (seconds or 0.0)), reason
