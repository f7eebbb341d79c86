"""A managed job's row in `berth jobs queue` and on the console's jobs page
(shared.jobs.queue_row), table-driven with the reason per case."""

from __future__ import annotations

import pytest

from shared.jobs import QUEUE_COLUMNS, JobStatus, ManagedJob, queue_row

NOW = 10_000.0


def _job(**fields: object) -> ManagedJob:
    base: dict[str, object] = {"id": 7, "name": "j", "namespace": "d", "resources": "1x[CPU:1]"}
    return ManagedJob(**{**base, "submitted_at": 9_000.0, **fields})  # type: ignore[arg-type]


CASES: list[tuple[str, ManagedJob, list[object]]] = [
    (
        "never ran: the total counts from submission to now, the job duration is '-'",
        _job(),
        [7, "j", "1x[CPU:1]", "16 mins ago", "16m 40s", "-", 0, "PENDING"],
    ),
    (
        "running: earlier runs summed plus the current run up to now",
        _job(
            status=JobStatus.RUNNING,
            started_at=9_100.0,
            run_started_at=9_900.0,
            job_seconds=60.0,
            recoveries=1,
        ),
        [7, "j", "1x[CPU:1]", "16 mins ago", "16m 40s", "2m 40s", 1, "RUNNING"],
    ),
    (
        "ended: the total stops at the end, no run is current",
        _job(status=JobStatus.SUCCEEDED, started_at=9_100.0, ended_at=9_500.0, job_seconds=300.0),
        [7, "j", "1x[CPU:1]", "16 mins ago", "8m 20s", "5m 0s", 0, "SUCCEEDED"],
    ),
]


@pytest.mark.parametrize(("reason", "job", "row"), CASES, ids=[c[0] for c in CASES])
def test_queue_row(reason: str, job: ManagedJob, row: list[object]) -> None:
    assert queue_row(job, NOW) == row, reason
    assert len(row) == len(QUEUE_COLUMNS)
