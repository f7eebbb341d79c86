"""A redelivered create after a cancel creates nothing (services/watcher/command_order.py):
the rule as a table, then both backends against a real nats-server (kmock as the API server
for the Kubernetes one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import kmock
import kmock as km
import pytest

from services.watcher.command_order import create_stands, create_verdict
from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.local.backend import LocalBackend
from shared.bus import OBJECTS_BUCKET, Bus, KeyNotFound
from shared.deadletter import dead_letters
from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadDeleted,
    WorkloadRef,
)
from shared.service import Runtime
from shared.workloads import workload_key
from tests.conftest import bus_auth

REF = WorkloadRef("ns", "train-1", "uid-1")
CREATE = CreateWorkload(id="create-uid-1", source="recovery", workload=REF, object={})
OTHER = WorkloadRef("ns", "train-1", "uid-2")

CASES: list[tuple[AnyEvent | None, bool, str]] = [
    (None, True, "no command on the stream names the workload: nothing voids it"),
    (CREATE, True, "the create is itself the newest command: the first delivery"),
    (
        CreateWorkload(id="create-uid-1-again", source="recovery", workload=REF, object={}),
        True,
        "a newer copy of the same request (same uid): creating is idempotent",
    ),
    (DeleteWorkload(id="delete-uid-1", source="recovery", workload=REF), False, "recovery's cancel came after it"),
    (
        RemoveWorkload(source="cli", workload=WorkloadRef("ns", "train-1", "")),
        False,
        "`berth delete workload` names no uid: it removed whatever had the name",
    ),
    (
        DeleteWorkload(source="recovery", workload=OTHER),
        True,
        "a delete of another object of the name does not cancel this one",
    ),
    (
        SubmitWorkload(source="cli", workload=OTHER, object={}),
        False,
        "a newer object of the name was asked for: this old one must not take its name",
    ),
    (
        WorkloadDeleted(source="watcher", workload=REF),
        True,
        "not a command: facts never void a create (the stream query asks for commands only)",
    ),
]


@pytest.mark.parametrize(("newest", "stands", "reason"), CASES, ids=[c[2] for c in CASES])
def test_create_verdict(newest: AnyEvent | None, stands: bool, reason: str) -> None:
    assert (create_verdict(CREATE, newest) is None) is stands, reason


def _job(ref: WorkloadRef) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
            "creationTimestamp": "2025-01-01T00:00:00+00:00",
            "labels": {"kueue.x-k8s.io/queue-name": "default"},
        },
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            }
        },
    }


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    yield bus
    await bus.close()


Exists = Callable[[], Awaitable[bool]]
Verb = Callable[[Any], Awaitable[None]]


closing: list[KubeClient] = []


async def _kube(bus: Bus, api: kmock.KubernetesEmulator, tmp_path: Path) -> tuple[Verb, Verb, Exists]:
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(tmp_path))
    client = KubeClient.for_host(str(api.url).rstrip("/"))
    backend = KubernetesBackend(runtime, client=client)
    key = km.resource("batch/v1/jobs")
    api.objects[key, "other", "served"] = {"metadata": {"name": "served"}}  # Jobs are served
    closing.append(client)

    async def exists() -> bool:  # kmock keeps a deleted object's history, marked deleted
        found = (key, REF.namespace, REF.name) in api.objects
        return found and not api.objects[key, REF.namespace, REF.name].deleted

    return backend.create, backend.delete, exists


async def _local(bus: Bus, api: kmock.KubernetesEmulator, tmp_path: Path) -> tuple[Verb, Verb, Exists]:
    backend = LocalBackend(Runtime(name="watcher", bus=bus, data_dir=str(tmp_path)), stop_grace=1)
    backend.kv = kv = await bus.kv(OBJECTS_BUCKET)
    backend.letters = dead_letters(bus, "watcher")

    async def delete(command: DeleteWorkload) -> None:
        await backend.delete(command)
        backend.objects.pop(workload_key(REF.namespace, REF.name), None)  # as its watch would

    async def exists() -> bool:
        try:
            entry = await kv.get(workload_key(REF.namespace, REF.name))
        except KeyNotFound:
            return False
        return bool(entry.value)

    async def create(command: CreateWorkload) -> None:
        await backend.create(command)
        if await exists():  # as its watch would: the object is known
            backend.objects[workload_key(REF.namespace, REF.name)] = _job(REF)

    return create, delete, exists


@pytest.mark.parametrize("make", [_kube, _local], ids=["kubernetes", "local"])
async def test_a_create_redelivered_after_a_cancel_creates_nothing(
    make: Any, bus: Bus, kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    """Recovery's CreateWorkload creates the Job; the cancel's DeleteWorkload deletes it; the
    same CreateWorkload delivered again (a watcher that restarted before acking it) finds
    the delete after it on the stream and creates nothing. A later create of the name (a new
    uid) is carried out."""
    create, delete, exists = await make(bus, kmock, tmp_path)
    try:
        await _create_cancel_redeliver(bus, create, delete, exists)
    finally:
        for client in closing:
            await client.close()
        closing.clear()


async def _create_cancel_redeliver(bus: Bus, create: Verb, delete: Verb, exists: Exists) -> None:
    command = CreateWorkload(id="create-uid-1", source="recovery", workload=REF, object=_job(REF))
    cancel = DeleteWorkload(id="delete-uid-1", source="recovery", workload=REF)
    await bus.publish(command)
    await create(command)
    assert await exists()
    await bus.publish(cancel)
    await delete(cancel)
    assert not await exists()
    await create(command)  # the redelivery
    await asyncio.sleep(0.1)
    assert not await exists(), "a cancelled workload was created again"
    assert not await create_stands(bus.js, command)

    again = WorkloadRef("ns", "train-1", "uid-3")
    resubmitted = SubmitWorkload(source="cli", workload=again, object=_job(again))
    await bus.publish(resubmitted)
    await create(resubmitted)
    assert await exists()
