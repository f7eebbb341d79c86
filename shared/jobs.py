"""Managed jobs: the record recovery keeps for each one, in the ``berth-jobs`` bucket.

Recovery is the only writer; the CLI reads the bucket for ``berth jobs queue``. A job runs as
one or more *attempts*, each a workload named ``<name>-<id>`` (then ``-r1``, ``-r2``... for
retries after a failure of the user's program). A preempted attempt is requeued as it is, with
its original queue time; only failures make a new attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import StrEnum

import msgspec
from nats.js.kv import KeyValue

from shared.bus import KeyNotFound
from shared.durations import ago, run_time
from shared.logging import get_logger

__all__ = [
    "QUEUE_COLUMNS",
    "TERMINAL",
    "Attempt",
    "JobStatus",
    "ManagedJob",
    "PipelineTask",
    "decode_job",
    "encode_job",
    "job_key",
    "queue_row",
]

log = get_logger("jobs")
# Told of a record that does not decode: (bucket/key, reason, the raw bytes).
Malformed = Callable[[str, str, bytes], Awaitable[None]]

NEXT_ID_KEY = "next-id"


class JobStatus(StrEnum):
    """SkyPilot's managed-job statuses."""

    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_PRECHECKS = "FAILED_PRECHECKS"
    FAILED_CONTROLLER = "FAILED_CONTROLLER"


TERMINAL = frozenset(
    {
        JobStatus.CANCELLED,
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.FAILED_SETUP,
        JobStatus.FAILED_PRECHECKS,
        JobStatus.FAILED_CONTROLLER,
    }
)


class Attempt(msgspec.Struct):
    """One workload of the job."""

    name: str
    uid: str
    generation: int = 0  # the admission currently (or last) running
    evicted_generation: int = 0  # the last admission counted as a preemption


class Transition(msgspec.Struct):
    time: float
    status: str
    message: str = ""


class PipelineTask(msgspec.Struct):
    """One task of a pipeline (a multi-document task file): run in order, one at a time."""

    name: str
    resources: str
    template: dict[str, object]  # the Job its attempts are made from
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: list[int] = []
    status: str = "PENDING"  # its own SkyPilot status: the job's while it is the current one
    started_at: float | None = None
    ended_at: float | None = None


class ManagedJob(msgspec.Struct):
    id: int
    name: str
    namespace: str
    resources: str  # e.g. "1x[T4:4]"
    submitted_at: float
    status: JobStatus = JobStatus.PENDING
    message: str = ""
    recoveries: int = 0  # preemptions plus retried failures
    restarts_on_errors: int = 0
    max_restarts_on_errors: int = 0
    attempts: list[Attempt] = []
    cluster_queue: str = ""
    base_priority: int = 0
    started_at: float | None = None  # first time it ran
    run_started_at: float | None = None  # start of the current run
    job_seconds: float = 0.0  # time spent running, summed over runs
    ended_at: float | None = None
    first_preempted_at: float | None = None  # ageing counts from here, never reset
    boost: int = 0
    reserved: bool = False
    cancel_requested: bool = False
    template: dict[str, object] = {}  # the Job each attempt is made from
    history: list[Transition] = []
    recover_on_exit_codes: list[int] = []  # failures with these exit codes always come back
    tasks: list[PipelineTask] = []  # a pipeline's tasks; empty for a job of one task
    task_index: int = 0  # the pipeline's current task
    task_first_attempt: int = 0  # index in `attempts` of the current task's first attempt

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


# SkyPilot's `sky jobs queue` columns, which `berth jobs queue` and the console's jobs page show
QUEUE_COLUMNS = (
    "ID",
    "NAME",
    "RESOURCES",
    "SUBMITTED",
    "TOT. DURATION",
    "JOB DURATION",
    "#RECOVERIES",
    "STATUS",
)


def queue_row(job: ManagedJob, now: float) -> list[object]:
    """A job's row under QUEUE_COLUMNS at ``now``: the total duration runs from submission to
    the end (or now); the job duration sums every run, the current one up to now, and is "-"
    before the first run."""
    total = (job.ended_at or now) - job.submitted_at
    running = job.job_seconds + (now - job.run_started_at if job.run_started_at else 0.0)
    return [
        job.id,
        job.name,
        job.resources,
        ago(now - job.submitted_at),
        run_time(total),
        run_time(running) if job.started_at else "-",
        job.recoveries,
        job.status.value,
    ]


def job_key(job_id: int) -> str:
    return f"job.{job_id:08d}"


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ManagedJob)


def encode_job(job: ManagedJob) -> bytes:
    return _encoder.encode(job)


def decode_job(data: bytes) -> ManagedJob:
    return _decoder.decode(data)


async def load_jobs(kv: KeyValue, *, malformed: Malformed | None = None) -> list[ManagedJob]:
    """Every stored managed job, by id; a record that does not decode is skipped and handed
    to ``malformed`` (a dead letter: source, reason, bytes), else logged.

    Why not ``kv.keys()``: its scan can end early while keys are being updated, and a listing
    that drops a running job (seen as a flaky `berth jobs queue`) is worse than a few more
    gets. Ids are sequential (``NEXT_ID_KEY`` holds the next one), so each job is read
    directly; an id taken by a launch whose job is not stored yet is skipped.
    """
    try:
        entry = await kv.get(NEXT_ID_KEY)
    except KeyNotFound:
        return []
    last = int(entry.value or b"1") - 1
    entries = await asyncio.gather(
        *(kv.get(job_key(job_id)) for job_id in range(1, last + 1)), return_exceptions=True
    )
    jobs = []
    for job_entry in entries:
        if isinstance(job_entry, KeyNotFound):
            continue
        if isinstance(job_entry, BaseException):
            raise job_entry
        if job_entry.value:
            try:
                jobs.append(decode_job(job_entry.value))
            except msgspec.DecodeError as error:  # no poison pill: the other jobs load
                source = f"{job_entry.bucket}/{job_entry.key}"
                if malformed is None:
                    log.error("malformed_object", source=source, reason=str(error))
                else:
                    await malformed(source, str(error), job_entry.value)
    return jobs
