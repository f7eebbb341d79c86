"""Pipelines and recover_on_exit_codes in a managed job's life (services.recovery.lifecycle)."""

from __future__ import annotations

from typing import Any

import pytest

from services.recovery.lifecycle import advance, cancel, first_attempt
from shared.events import (
    CreateWorkload,
    Event,
    WorkloadDeleted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadStarted,
)
from shared.jobs import JobStatus, ManagedJob, PipelineTask
from tests.test_lifecycle import T0, admitted

TEMPLATE: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {}}


def _task(name: str, restarts: int = 0, codes: list[int] | None = None) -> PipelineTask:
    template = {**TEMPLATE, "metadata": {"labels": {"task": name}}}
    return PipelineTask(name, f"1x[{name}]", template, restarts, codes or [])


def pipeline(*tasks: PipelineTask) -> tuple[ManagedJob, WorkloadRef]:
    record = ManagedJob(
        id=3,
        name="pipe",
        namespace="default",
        resources=tasks[0].resources,
        submitted_at=T0,
        max_restarts_on_errors=tasks[0].max_restarts_on_errors,
        recover_on_exit_codes=list(tasks[0].recover_on_exit_codes),
        template=tasks[0].template,
        tasks=list(tasks),
    )
    create = first_attempt(record, T0)[0]
    assert isinstance(create, CreateWorkload)
    return record, create.workload


def finish(record: ManagedJob, ref: WorkloadRef, generation: int, code: int) -> list[Event]:
    advance(record, admitted(ref, generation), T0)
    advance(record, WorkloadStarted(source="watcher", workload=ref, generation=generation), T0)
    ended = WorkloadFinished(
        source="watcher", workload=ref, generation=generation, succeeded=code == 0, exit_code=code
    )
    return advance(record, ended, T0 + 1)


def _created(events: list[Event]) -> CreateWorkload:
    [create] = [e for e in events if isinstance(e, CreateWorkload)]
    return create


def test_tasks_run_in_order_each_from_its_own_job() -> None:
    """A task's success starts the next task's first attempt (named -t1), from its own Job;
    the last one's success is the job's; every task ends SUCCEEDED."""
    record, ref = pipeline(_task("prep"), _task("train"))
    events = finish(record, ref, 1, 0)
    create = _created(events)
    assert create.workload.name == "pipe-3-t1"
    assert create.object["metadata"]["labels"]["task"] == "train"
    assert record.status == JobStatus.PENDING and record.resources == "1x[train]"
    assert [t.status for t in record.tasks] == ["SUCCEEDED", "PENDING"]
    finish(record, create.workload, 1, 0)
    assert record.status == JobStatus.SUCCEEDED
    assert [t.status for t in record.tasks] == ["SUCCEEDED", "SUCCEEDED"]


def test_a_failed_task_fails_the_job_and_cancels_the_rest() -> None:
    """Past its retries a task FAILS the job; later tasks never run: CANCELLED."""
    record, ref = pipeline(_task("a"), _task("b", restarts=1), _task("c"))
    create = _created(finish(record, ref, 1, 0))
    retry = _created(finish(record, create.workload, 1, 3))  # b's one retry
    assert retry.workload.name == "pipe-3-t1-r1"
    finish(record, retry.workload, 1, 3)
    assert record.status == JobStatus.FAILED
    assert [t.status for t in record.tasks] == ["SUCCEEDED", "FAILED", "CANCELLED"]


def test_a_cancelled_pipeline_cancels_its_tasks() -> None:
    """Cancel during the first task: it and the ones after are CANCELLED."""
    record, ref = pipeline(_task("a"), _task("b"))
    cancel(record, T0)
    advance(record, WorkloadDeleted(source="watcher", workload=ref), T0)
    assert [t.status for t in record.tasks] == ["CANCELLED", "CANCELLED"]


@pytest.mark.parametrize(
    ("code", "status", "recoveries", "restarts"),
    [
        (33, JobStatus.RECOVERING, 1, 0),  # listed: always back, not counted as a restart
        (1, JobStatus.FAILED, 0, 0),  # not listed, no restarts allowed
    ],
)
def test_recover_on_exit_codes(
    code: int, status: JobStatus, recoveries: int, restarts: int
) -> None:
    """An exit code in recover_on_exit_codes always brings the job back, whatever its
    max_restarts_on_errors (0 here), and does not use up a restart."""
    record, ref = pipeline(_task("only", codes=[33, 34]))
    finish(record, ref, 1, code)
    assert record.status == status
    assert record.recoveries == recoveries and record.restarts_on_errors == restarts
