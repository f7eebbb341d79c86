"""Recovery's handling of a batch of events (RecoveryService._on_events): every workload's
facts age its wait; only a managed job's events publish and store anything, and a batch
with none of them returns without going to the bus."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from services.recovery.lifecycle import first_attempt
from services.recovery.service import RecoveryService
from shared.events import (
    AnyEvent,
    CreateWorkload,
    Event,
    WorkloadAdmitted,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
)
from shared.jobs import ManagedJob
from shared.service import Runtime

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
OTHER = WorkloadRef("default", "other", "u-other")


def service_with_a_job() -> tuple[RecoveryService, WorkloadRef, list[list[Event]], list[str]]:
    """A service owning one managed job (its first attempt asked for), whose bus and bucket
    record what they are given: (service, the attempt's workload, publishes, keys stored)."""
    published: list[list[Event]] = []
    stored: list[str] = []

    async def publish_many(events: list[Event]) -> None:
        published.append(list(events))

    async def put(key: str, value: bytes) -> int:
        stored.append(key)
        return len(stored)

    runtime = SimpleNamespace(bus=SimpleNamespace(publish_many=publish_many))
    service = RecoveryService(cast(Runtime, runtime))
    service.kv = cast(Any, SimpleNamespace(put=put))
    job = ManagedJob(id=7, name="train", namespace="default", resources="1x[CPU:1]",
                     submitted_at=0.0, template={"apiVersion": "batch/v1", "kind": "Job",
                                                 "metadata": {}, "spec": {}})  # fmt: skip
    create = first_attempt(job, 0.0)[0]
    assert isinstance(create, CreateWorkload)
    service._index(job)
    return service, create.workload, published, stored


def submitted(ref: WorkloadRef) -> WorkloadSubmitted:
    return WorkloadSubmitted(source="watcher", workload=ref, kind="Job", queue_name="lq",
                             pod_sets=[], created=CREATED)  # fmt: skip


def admitted(ref: WorkloadRef) -> WorkloadAdmitted:
    return WorkloadAdmitted(source="admission", workload=ref, cluster_queue="cq",
                            local_queue="lq", priority=0, assignments=[], generation=1)  # fmt: skip


@dataclass(frozen=True)
class Case:
    why: str
    managed: bool  # the batch's last event is about the managed job's attempt
    again: bool  # ... and was handled in an earlier batch already (a redelivery)
    publishes: bool  # something was published
    stores: bool  # the job was stored
    jobs: bool = True  # the service owns the managed job (else it owns none at all)


CASES = [
    Case("Only other workloads' facts: nothing published or stored.", False, False, False, False),
    Case(
        "No managed job at all (the batch only ages waits): nothing published or stored.",
        False,
        False,
        False,
        False,
        jobs=False,
    ),
    Case(
        "The managed job's admission: its status published, the job stored.",
        True,
        False,
        True,
        True,
    ),
    Case(
        "A redelivered admission of the managed job publishes nothing new, and the job is"
        " stored as after any of its events.",
        True,
        True,
        False,
        True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
async def test_a_batch_publishes_and_stores_only_for_managed_jobs(case: Case) -> None:
    service, attempt, published, stored = service_with_a_job()
    if not case.jobs:
        service._unindex(service.jobs[7])
    started = WorkloadStarted(source="watcher", workload=OTHER, generation=1)
    events: list[AnyEvent] = [submitted(OTHER), started]
    if case.managed:
        events.append(admitted(attempt))
    if case.again:
        await service._on_events([admitted(attempt)])
        published.clear()
        stored.clear()
    await service._on_events(events)
    assert "u-other" in service.waits.waits, "every workload's facts age its wait"
    assert bool([e for batch in published for e in batch]) == case.publishes, case.why
    assert bool(stored) == case.stores, case.why
