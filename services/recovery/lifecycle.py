"""A managed job's life, as SkyPilot's managed jobs have it: pure state transitions.

``advance(job, event)`` moves a job along on one fact about its current attempt and returns
the commands and announcements to publish. Every command carries a deterministic id, so a
redelivered event (recovery acks only after persisting) produces duplicates the stream drops:
a preemption is counted once, a failed attempt is retried once.

- PENDING -> STARTING (admitted) -> RUNNING (its pods run) -> SUCCEEDED;
- a preemption (WorkloadEvicted): RECOVERING, #RECOVERIES + 1, and admission requeues the
  same workload with its original queue time; retried without limit;
- a failure of the user's program: a new attempt while ``restarts_on_errors`` allows
  (RECOVERING, #RECOVERIES + 1), else FAILED; a failed setup is FAILED_SETUP; an exit code
  in ``recover_on_exit_codes`` always makes a new attempt, without counting against
  ``max_restarts_on_errors`` (SkyPilot's rule);
- a pipeline (``job.tasks``) runs its tasks in order: a task's success makes the next task's
  first attempt (PENDING again), each task with its own Job, retries and exit codes; each
  task's status is the job's while it is the current one, and a job that ends otherwise
  than SUCCEEDED cancels the tasks after it;
- a workload that can never fit: FAILED_PRECHECKS; a cancel: CANCELLING, then CANCELLED.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime

from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    Event,
    JobStatusChanged,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
)
from shared.jobs import TERMINAL, Attempt, JobStatus, ManagedJob, Transition
from shared.tasks import SETUP_FAILED_EXIT_CODE
from shared.workloads import MANAGED_JOB_LABEL

__all__ = ["advance", "advance_safely", "cancel", "first_attempt", "set_status"]

# Admission's words for a workload that no amount of waiting will admit.
_NEVER_FITS = ("maximum capacity", "unavailable in ClusterQueue")
# Evictions caused by Berth's own restarts: the job is requeued, but #RECOVERIES (which
# counts preemptions and retried failures) and the ageing clock are not touched.
# Requeued without having been preempted: Berth's own restart, an admission check's Retry of
# a reservation that never ran (docs/admission-checks.md).
NOT_A_RECOVERY = frozenset({"WatcherRestarted", "AdmissionCheck"})
_ATTEMPT_NAMESPACE = uuid.UUID("6f1b4f0e-2f44-4b53-9f0e-6c1c1b6a9f31")


def _ref(job: ManagedJob, attempt: Attempt) -> WorkloadRef:
    return WorkloadRef(namespace=job.namespace, name=attempt.name, uid=attempt.uid)


def set_status(job: ManagedJob, status: JobStatus, message: str, now: float) -> list[Event]:
    """Record a transition and announce it on ``berth.job.status.<id>``."""
    if job.status == status and job.message == message:
        return []
    job.status = status
    job.message = message
    job.history.append(Transition(now, status.value, message))
    if job.done and job.ended_at is None:
        job.ended_at = now
    if job.tasks:
        _task_status(job, status, now)
    attempt = job.current
    ref = _ref(job, attempt) if attempt else WorkloadRef(job.namespace, job.name, "")
    return [
        JobStatusChanged(
            id=f"status-{job.id}-{len(job.history)}",
            source="recovery",
            workload=ref,
            job_id=job.id,
            status=status.value,
            recoveries=job.recoveries,
            message=message,
        )
    ]


def _task_status(job: ManagedJob, status: JobStatus, now: float) -> None:
    """A pipeline's current task takes the job's status; an end other than success cancels
    the tasks after it."""
    task = job.tasks[job.task_index]
    task.status = status.value
    if status == JobStatus.RUNNING and task.started_at is None:
        task.started_at = now
    if status in TERMINAL:
        task.ended_at = task.ended_at or now
        for later in job.tasks[job.task_index + 1 :]:
            later.status = JobStatus.CANCELLED.value


def new_attempt(job: ManagedJob, now: float) -> CreateWorkload:
    """The next attempt's workload object, named ``<name>-<id>`` then ``-r1``, ``-r2``...
    (a pipeline's later tasks ``<name>-<id>-t1``, ``-t1-r1``...)."""
    number = len(job.attempts)
    retry = number - job.task_first_attempt
    name = f"{job.name}-{job.id}" + (f"-t{job.task_index}" if job.task_index else "")
    name += f"-r{retry}" if retry else ""
    uid = str(uuid.uuid5(_ATTEMPT_NAMESPACE, f"{job.id}/{number}"))
    job.attempts.append(Attempt(name=name, uid=uid))
    obj = copy.deepcopy(job.template)
    metadata = obj.setdefault("metadata", {})
    assert isinstance(metadata, dict)
    metadata.pop("generateName", None)
    metadata.update(
        name=name,
        namespace=job.namespace,
        uid=uid,
        creationTimestamp=datetime.fromtimestamp(now, UTC).isoformat(),
    )
    metadata["labels"] = {**(metadata.get("labels") or {}), MANAGED_JOB_LABEL: str(job.id)}
    return CreateWorkload(
        id=f"create-{uid}",
        source="recovery",
        workload=WorkloadRef(job.namespace, name, uid),
        object=obj,
    )


def first_attempt(job: ManagedJob, now: float) -> list[Event]:
    return [new_attempt(job, now), *set_status(job, JobStatus.PENDING, "waiting for quota", now)]


def cancel(job: ManagedJob, now: float) -> list[Event]:
    """Stop the job: its current workload is deleted; CANCELLED once it is gone."""
    job.cancel_requested = True
    events = set_status(job, JobStatus.CANCELLING, "cancel requested", now)
    attempt = job.current
    if attempt is not None:
        events.append(
            DeleteWorkload(
                id=f"delete-{attempt.uid}", source="recovery", workload=_ref(job, attempt)
            )
        )
    return events


def _stop_run(job: ManagedJob, now: float) -> None:
    if job.run_started_at is not None:
        job.job_seconds += max(0.0, now - job.run_started_at)
        job.run_started_at = None


def advance(job: ManagedJob, event: AnyEvent, now: float) -> list[Event]:
    """Apply one fact about the job's current attempt; returns what to publish."""
    attempt = job.current
    if attempt is None or event.workload.name != attempt.name or job.done:
        return []  # about an earlier attempt, or the job is over: nothing changes
    if event.workload.uid and attempt.uid != event.workload.uid:
        attempt.uid = event.workload.uid  # a cluster assigns its own uids
    cancelling = job.cancel_requested
    match event:
        case WorkloadAdmitted():
            if event.generation <= attempt.generation:
                return []
            attempt.generation = event.generation
            job.cluster_queue = event.cluster_queue
            if cancelling:
                return []
            return set_status(job, JobStatus.STARTING, f"admitted in {event.cluster_queue}", now)
        case WorkloadStarted():
            if event.generation != attempt.generation or job.run_started_at is not None:
                return []
            job.started_at = job.started_at or now
            job.run_started_at = now
            return [] if cancelling else set_status(job, JobStatus.RUNNING, "", now)
        case WorkloadEvicted():
            if (
                event.generation != attempt.generation
                or event.generation <= attempt.evicted_generation
            ):
                return []
            attempt.evicted_generation = event.generation
            _stop_run(job, now)
            if cancelling:
                return []
            message = event.message or f"evicted: {event.reason}"
            if event.reason in NOT_A_RECOVERY:
                return set_status(job, JobStatus.RECOVERING, message, now)
            job.recoveries += 1
            job.first_preempted_at = job.first_preempted_at or now
            return set_status(job, JobStatus.RECOVERING, message, now)
        case WorkloadFinished():
            if event.generation != attempt.generation:
                return []
            _stop_run(job, now)
            if event.succeeded:
                if job.tasks and job.task_index + 1 < len(job.tasks) and not cancelling:
                    return _next_task(job, now)
                return set_status(job, JobStatus.SUCCEEDED, "", now)
            if event.exit_code == SETUP_FAILED_EXIT_CODE:
                return set_status(job, JobStatus.FAILED_SETUP, "the setup script failed", now)
            message = event.message or f"exit code {event.exit_code}"
            if not cancelling and event.exit_code in job.recover_on_exit_codes:
                job.recoveries += 1
                text = f"{message}; exit code {event.exit_code} always recovers"
                return [new_attempt(job, now), *set_status(job, JobStatus.RECOVERING, text, now)]
            if cancelling or job.restarts_on_errors >= job.max_restarts_on_errors:
                return set_status(job, JobStatus.FAILED, message, now)
            job.restarts_on_errors += 1
            job.recoveries += 1
            retry = f"{message}; retry {job.restarts_on_errors} of {job.max_restarts_on_errors}"
            return [new_attempt(job, now), *set_status(job, JobStatus.RECOVERING, retry, now)]
        case WorkloadPending():
            if event.source == "admission" and any(words in event.message for words in _NEVER_FITS):
                events = set_status(job, JobStatus.FAILED_PRECHECKS, event.message, now)
                events.append(
                    DeleteWorkload(
                        id=f"delete-{attempt.uid}", source="recovery", workload=_ref(job, attempt)
                    )
                )
                return events
            return []
        case WorkloadDeleted():
            _stop_run(job, now)
            if cancelling:
                return set_status(job, JobStatus.CANCELLED, "", now)
            return set_status(job, JobStatus.CANCELLED, "its workload was deleted", now)
    return []


def _next_task(job: ManagedJob, now: float) -> list[Event]:
    """A pipeline's task succeeded: the next one becomes the job's (its Job, its retries and
    exit codes, its resources) and its first attempt is requested."""
    done = job.tasks[job.task_index]
    done.status, done.ended_at = JobStatus.SUCCEEDED.value, now
    job.task_index += 1
    task = job.tasks[job.task_index]
    job.template = task.template
    job.resources = task.resources
    job.max_restarts_on_errors = task.max_restarts_on_errors
    job.recover_on_exit_codes = list(task.recover_on_exit_codes)
    job.restarts_on_errors = 0
    job.task_first_attempt = len(job.attempts)
    message = f"task {job.task_index} ({task.name}) waiting for quota"
    return [new_attempt(job, now), *set_status(job, JobStatus.PENDING, message, now)]


def advance_safely(job: ManagedJob, event: AnyEvent, now: float) -> list[Event]:
    """``advance``, except that a bug in handling one job fails that job (FAILED_CONTROLLER,
    as SkyPilot's controller does) instead of stopping recovery for every job."""
    try:
        return advance(job, event, now)
    except Exception as error:
        return set_status(job, JobStatus.FAILED_CONTROLLER, f"recovery failed: {error!r}", now)
