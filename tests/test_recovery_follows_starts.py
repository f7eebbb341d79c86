"""Recovery reads workloads' starts only while a managed job is under way
(services/recovery/service.py ``subjects_for``): a start moves only a managed job along, so
with none under way every start was decoded to be dropped. The table pins the rule; the
stack test runs recovery in process on a real nats-server and follows its durable consumer's
filters through a job's launch, run and end, and a restart with a job under way."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.recovery.service import (
    STARTS,
    WAIT_SUBJECTS,
    LaunchRequest,
    RecoveryService,
    subjects_for,
)
from shared.bus import STREAM, Bus, BusError, KeyNotFound
from shared.events import (
    CreateWorkload,
    Event,
    WorkloadAdmitted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadStarted,
)
from shared.jobs import JobStatus, ManagedJob, job_key
from tests.test_recovery_restart import configured, start_service, stop_recovery
from tests.test_watcher_contract import until

S = JobStatus


@dataclass(frozen=True)
class Case:
    why: str
    statuses: Sequence[JobStatus]  # one managed job per status
    starts: bool  # whether its consumer is sent starts


CASES = [
    Case("No managed job: no start matters to recovery", [], False),
    Case("Only jobs that ended: their workloads' starts change nothing",
         [S.SUCCEEDED, S.FAILED, S.CANCELLED, S.FAILED_SETUP, S.FAILED_PRECHECKS,
          S.FAILED_CONTROLLER], False),
    Case("A pending job's attempt will start: STARTING -> RUNNING needs it", [S.PENDING], True),
    Case("An admitted job waits for its start", [S.SUCCEEDED, S.STARTING], True),
    Case("A running job's start may come again (a redelivery): still followed", [S.RUNNING], True),
    Case("A recovering job's next run starts too", [S.FAILED, S.RECOVERING], True),
    Case("A cancelling job is not done until its workload is gone", [S.CANCELLING], True),
]  # fmt: skip


def _job(number: int, status: JobStatus) -> ManagedJob:
    return ManagedJob(id=number, name=f"j{number}", namespace="ns", resources="1x[CPU:1]",
                      submitted_at=0.0, status=status)  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_starts_are_followed_only_while_a_job_is_under_way(case: Case) -> None:
    jobs = [_job(n, status) for n, status in enumerate(case.statuses)]
    subjects = subjects_for(jobs, batching=False)
    assert subjects[: len(WAIT_SUBJECTS)] == list(WAIT_SUBJECTS)  # every wait's facts, always
    assert (STARTS in subjects) == case.starts
    subjects = subjects_for(jobs, batching=True)  # the same, admission's pending batches named
    assert subjects[: len(WAIT_SUBJECTS) + 1] == [*WAIT_SUBJECTS, "berth.b.cq.pending"]
    assert (STARTS in subjects) == case.starts


# --- on a real nats-server ----------------------------------------------------------------------


async def _sent_starts(bus: Bus) -> bool:
    """Whether nats-server sends the durable consumer `recovery` the workloads' starts."""
    info = await bus.js.consumer_info(STREAM, "recovery")
    return any("started" in subject for subject in info.config.filter_subjects or [])


async def _status(job: ManagedJob, status: JobStatus) -> bool:
    return job.status == status


async def test_a_jobs_start_is_read_and_starts_are_dropped_once_it_ended(
    nats_url: str, tmp_path: Path
) -> None:
    bus = await configured(nats_url)
    service, runtime, task = await start_service(nats_url, tmp_path / "first")
    try:
        assert not await _sent_starts(bus), "no job: no starts sent"
        reply = await service._launch(_launch_request("train"))
        job = service.jobs[reply["id"]]
        assert job.status == JobStatus.PENDING and await _sent_starts(bus), "followed at launch"
        attempt = job.current
        assert attempt is not None
        ref = WorkloadRef("ns", attempt.name, attempt.uid)
        await bus.publish_many([
            WorkloadAdmitted(source="admission", workload=ref, cluster_queue="cq",
                             local_queue="lq", priority=0, assignments=[], generation=1),
        ])  # fmt: skip
        await until(lambda: _status(job, JobStatus.STARTING), "the job was admitted")
        started = WorkloadStarted(source="watcher", workload=ref, generation=1)
        await bus.publish_many([started])
        await until(lambda: _status(job, JobStatus.RUNNING), "its start reached recovery")
        await bus.publish_many([WorkloadFinished(source="watcher", workload=ref, generation=1,
                                                 succeeded=True)])  # fmt: skip
        await until(lambda: _status(job, JobStatus.SUCCEEDED), "the job ended")
        await until(lambda: _no_starts(bus), "starts dropped after the last job ended")
    finally:
        await stop_recovery(runtime, task)
    # A restart with a job under way follows starts from its first read.
    await _relaunch_and_restart(nats_url, tmp_path, bus)
    await bus.close()


async def _no_starts(bus: Bus) -> bool:
    return not await _sent_starts(bus)


async def _relaunch_and_restart(url: str, tmp_path: Path, bus: Bus) -> None:
    service, runtime, task = await start_service(url, tmp_path / "second")
    try:
        assert not await _sent_starts(bus), "the jobs it loaded all ended: no starts"
        await service._launch(_launch_request("again"))
    finally:
        await stop_recovery(runtime, task)
    await bus.js.delete_consumer(STREAM, "recovery")  # it starts afresh: filters from its jobs
    _, runtime, task = await start_service(url, tmp_path / "third")
    try:
        assert await _sent_starts(bus), "a job under way at start: starts followed at once"
    finally:
        await stop_recovery(runtime, task)


def _launch_request(name: str) -> LaunchRequest:
    template = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {}}
    return LaunchRequest(name=name, namespace="ns", template=template, resources="1x[CPU:1]",
                         queue_name="lq")  # fmt: skip


@asynccontextmanager
async def _recovery(url: str, data_dir: Path) -> AsyncIterator[tuple[Bus, RecoveryService]]:
    """A configured server's connection (as admission) and recovery running on it."""
    bus = await configured(url)
    service, runtime, task = await start_service(url, data_dir)
    try:
        yield bus, service
    finally:
        await stop_recovery(runtime, task)
        await bus.close()


async def test_a_launch_asks_for_its_workload_only_once_starts_are_followed(
    nats_url: str, tmp_path: Path
) -> None:
    """The order the rule rests on: the consumer follows starts before the job's first
    workload is asked for (else its start could be stored unfollowed and the job would wait
    in STARTING for good)."""
    async with _recovery(nats_url, tmp_path / "r") as (bus, service):
        followed_at_create: list[bool] = []
        publish_many = service.bus.publish_many

        async def spying(events: Sequence[Event]) -> None:
            if any(isinstance(event, CreateWorkload) for event in events):
                followed_at_create.append(await _sent_starts(bus))
            await publish_many(events)

        service.bus.publish_many = spying  # type: ignore[method-assign]
        await service._launch(_launch_request("train"))
        assert followed_at_create == [True]


async def test_a_refilter_by_a_deposed_replica_is_set_right_by_the_next_tick(
    nats_url: str, tmp_path: Path
) -> None:
    """The consumer is shared by the replicas: a deposed leader's late refilter (here: made
    from outside) drops starts the active one's job needs; its next tick reads the server's
    filters, not what it last set, and follows starts again."""
    async with _recovery(nats_url, tmp_path / "r") as (bus, service):
        await service._launch(_launch_request("train"))
        assert await _sent_starts(bus)
        info = await bus.js.consumer_info(STREAM, "recovery")
        info.config.filter_subjects = [
            s for s in info.config.filter_subjects or [] if "started" not in s
        ]
        await bus.js.add_consumer(STREAM, info.config)
        assert not await _sent_starts(bus), "the deposed replica's refilter landed"
        await until(lambda: _sent_starts(bus), "the active replica's tick followed starts again")


async def test_a_launch_whose_refilter_fails_leaves_no_job_behind(
    nats_url: str, tmp_path: Path
) -> None:
    """A launch refused with an error holds nothing: no job in memory (the metric, the
    filters, the id's owner would count it) and none stored."""

    async def failing(subscription: object, subjects: Sequence[str]) -> bool:
        raise BusError("nats: timeout")

    async with _recovery(nats_url, tmp_path / "r") as (_, service):
        service.bus.refilter = failing  # type: ignore[method-assign]
        with pytest.raises(BusError):
            await service._launch(_launch_request("train"))
        assert service.jobs == {} and service.by_workload == {}
        assert service.kv is not None
        with pytest.raises(KeyNotFound):
            await service.kv.get(job_key(1))  # the id it took is never stored as a job
