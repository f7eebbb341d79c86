"""A managed job's transitions (services.recovery.lifecycle), one rule per test."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.recovery.lifecycle import advance, advance_safely, cancel, first_attempt
from shared.events import (
    CreateWorkload,
    DeleteWorkload,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
)
from shared.jobs import JobStatus, ManagedJob
from shared.tasks import SETUP_FAILED_EXIT_CODE

T0 = 1_000.0


def job(max_restarts: int = 0) -> tuple[ManagedJob, WorkloadRef]:
    record = ManagedJob(
        id=7,
        name="train",
        namespace="default",
        resources="1x[CPU:1]",
        submitted_at=T0,
        max_restarts_on_errors=max_restarts,
        template={"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {}},
    )
    events = first_attempt(record, T0)
    create = events[0]
    assert isinstance(create, CreateWorkload)
    assert create.object["metadata"]["labels"]["berth.dev/managed-job"] == "7"
    return record, create.workload


def admitted(ref: WorkloadRef, generation: int) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        source="admission",
        workload=ref,
        cluster_queue="cq",
        local_queue="lq",
        priority=0,
        assignments=[],
        generation=generation,
        time=datetime.now(UTC),
    )


def run(record: ManagedJob, ref: WorkloadRef, generation: int) -> None:
    advance(record, admitted(ref, generation), T0)
    advance(record, WorkloadStarted(source="watcher", workload=ref, generation=generation), T0)


def test_runs_then_succeeds() -> None:
    """PENDING, STARTING, RUNNING, SUCCEEDED, with no recovery."""
    record, ref = job()
    run(record, ref, 1)
    advance(
        record,
        WorkloadFinished(source="watcher", workload=ref, generation=1, succeeded=True),
        T0 + 5,
    )
    assert [step.status for step in record.history] == [
        "PENDING",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]
    assert record.recoveries == 0 and record.job_seconds == 5


def test_a_preemption_is_counted_once_and_starts_the_ageing_clock_once() -> None:
    """A redelivered eviction changes nothing; a second preemption keeps the first clock."""
    record, ref = job()
    run(record, ref, 1)
    evicted = WorkloadEvicted(source="watcher", workload=ref, generation=1, reason="Preempted")
    advance(record, evicted, T0 + 1)
    advance(record, evicted, T0 + 2)
    assert record.status == JobStatus.RECOVERING and record.recoveries == 1
    run(record, ref, 2)
    advance(
        record,
        WorkloadEvicted(source="watcher", workload=ref, generation=2, reason="Preempted"),
        T0 + 9,
    )
    assert record.recoveries == 2 and record.first_preempted_at == T0 + 1


@pytest.mark.parametrize(
    ("reason", "why"),
    [
        ("WatcherRestarted", "requeued after Berth's own restart"),
        ("AdmissionCheck", "an admission check's Retry: the reservation never ran"),
    ],
)
def test_a_requeue_that_is_no_preemption_is_not_a_recovery(reason: str, why: str) -> None:
    """RECOVERING, but #RECOVERIES stays 0 and the ageing clock does not start."""
    record, ref = job()
    run(record, ref, 1)
    advance(
        record,
        WorkloadEvicted(source="watcher", workload=ref, generation=1, reason=reason),
        T0,
    )
    assert record.status == JobStatus.RECOVERING and record.recoveries == 0, why
    assert record.first_preempted_at is None, why


def test_failures_are_retried_up_to_the_limit_with_a_new_attempt() -> None:
    """A failing program gets a new attempt while max_restarts_on_errors allows, then FAILED."""
    record, ref = job(max_restarts=1)
    run(record, ref, 1)
    failed = WorkloadFinished(
        source="watcher", workload=ref, generation=1, succeeded=False, exit_code=3
    )
    events = advance(record, failed, T0)
    retry = next(e for e in events if isinstance(e, CreateWorkload))
    assert retry.workload.name == "train-7-r1" and record.recoveries == 1
    assert advance(record, failed, T0) == []  # about the old attempt now: ignored
    run(record, retry.workload, 1)
    advance(
        record,
        WorkloadFinished(
            source="watcher", workload=retry.workload, generation=1, succeeded=False, exit_code=3
        ),
        T0,
    )
    assert record.status == JobStatus.FAILED and len(record.attempts) == 2


def test_setup_failure_and_prechecks() -> None:
    """Exit code 86 is FAILED_SETUP; a request that can never fit is FAILED_PRECHECKS."""
    record, ref = job(max_restarts=3)
    run(record, ref, 1)
    advance(
        record,
        WorkloadFinished(
            source="watcher",
            workload=ref,
            generation=1,
            succeeded=False,
            exit_code=SETUP_FAILED_EXIT_CODE,
        ),
        T0,
    )
    assert record.status == JobStatus.FAILED_SETUP
    other, other_ref = job()
    pending = WorkloadPending(
        source="admission",
        workload=other_ref,
        cluster_queue="cq",
        reason="Pending",
        message="couldn't assign flavors to pod set main: request > maximum capacity (5 > 4)",
    )
    events = advance(other, pending, T0)
    assert other.status == JobStatus.FAILED_PRECHECKS
    assert any(isinstance(e, DeleteWorkload) for e in events)


def test_cancel_deletes_the_workload_then_cancelled() -> None:
    """A cancel is CANCELLING until the workload is gone, then CANCELLED."""
    record, ref = job()
    run(record, ref, 1)
    assert any(isinstance(e, DeleteWorkload) for e in cancel(record, T0))
    assert record.status == JobStatus.CANCELLING
    advance(record, WorkloadDeleted(source="watcher", workload=ref), T0)
    assert record.status == JobStatus.CANCELLED


def test_a_bug_fails_only_that_job() -> None:
    """An error while handling a job makes it FAILED_CONTROLLER instead of stopping recovery."""
    record, ref = job(max_restarts=1)
    run(record, ref, 1)
    record.template = {"metadata": "not a mapping"}  # the next attempt cannot be built
    failed = WorkloadFinished(
        source="watcher", workload=ref, generation=1, succeeded=False, exit_code=1
    )
    advance_safely(record, failed, T0)
    assert record.status == JobStatus.FAILED_CONTROLLER and "recovery failed" in record.message
