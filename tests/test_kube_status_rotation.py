"""The Kubernetes status writer across a rotation of the watcher's seed: `berth creds rotate`
then NATS reloaded; the watcher signs in anew on a new nats-py client (shared/bus/connection.py)
and the writer follows its triggers on it, so Workload statuses in the cluster keep up.
Real nats-server with nkey authentication; kmock for the Kubernetes API."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
import kmock as km
import pytest

import shared.bus.connection
from berth_cli.natsserver import NatsServer
from services.admission.workload_objects import WorkloadRecord, render_workload
from services.watcher.kube.api import KubeClient
from services.watcher.kube.kueue_status import KueueStatusWriter, StatusSettings
from shared.auth import ClientAuth, CredentialStore
from shared.bus import Bus
from shared.events import AnyEvent, WorkloadAdmitted, WorkloadFinished, WorkloadPending
from tests.conftest import captured_logs, connect_as
from tests.test_kube_status import ADMITTED, JOB, PENDING, REF, SUBMITTED, T0

WAIT_S = 30.0  # generous: a status that never comes fails here instead of hanging
FINISHED = WorkloadFinished(source="watcher", workload=REF, generation=1, succeeded=True, time=T0)


@pytest.fixture
def server(tmp_path: Path, store: CredentialStore) -> Iterator[NatsServer]:
    with NatsServer(store_dir=tmp_path / "nats", auth_conf=store.auth_conf) as running:
        yield running


@dataclass
class Cluster:
    """The writer as the watcher runs it (its own seed, riding out outages), admission's
    status API (as admission), and an admin connection that publishes the events."""

    writer: KueueStatusWriter
    admin: Bus
    record: WorkloadRecord
    kube: kmock.KubernetesEmulator

    async def decided(self, event: AnyEvent, condition: tuple[str, str]) -> None:
        """Admission's API renders ``event`` folded, the event is published, and a
        Workload status PATCH with ``condition`` (type, status) reaches the cluster."""
        if isinstance(event, WorkloadPending):
            self.record.on_pending(event)
        elif isinstance(event, WorkloadAdmitted):
            self.record.on_admitted(event)
        elif isinstance(event, WorkloadFinished):
            self.record.on_finished(event)
        await self.admin.publish(event)
        try:
            async with asyncio.timeout(WAIT_S):
                # kmock records requests without a notification to wait on: poll.
                while condition not in self.patched():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        except TimeoutError:
            pytest.fail(f"no Workload status with {condition} reached the cluster")

    def patched(self) -> set[tuple[str, str]]:
        """The conditions (type, status) in the Workload status patches the cluster got."""
        return {
            (condition["type"], condition["status"])
            for request in self.kube
            if request.method == "PATCH" and request.url.path.endswith("/status")
            for condition in request.data["status"].get("conditions") or []
        }


@pytest.fixture
async def cluster(
    server: NatsServer, store: CredentialStore, kmock: kmock.KubernetesEmulator
) -> AsyncIterator[Cluster]:
    kmock.objects[km.resource("kueue.x-k8s.io/v1beta2/workloads"), "zz", "placeholder"] = {
        "metadata": {"name": "placeholder"}
    }
    kmock.objects[km.resource("v1/events"), "zz", "e"] = {"metadata": {"name": "e"}}
    admin = await connect_as(server.url, store, "admin")
    await admin.ensure_stream()
    admission = await connect_as(server.url, store, "admission")
    record = WorkloadRecord.of(SUBMITTED)

    async def workloads(_: str, data: bytes) -> dict[str, Any]:
        return {"items": [render_workload(record, {"local_queue": "user-queue"})], "next": None}

    api = await admission.serve_requests("berth.api.admission.workloads", workloads)
    bus = await Bus.connect(
        server.url, source="watcher", auth=ClientAuth(seed=store.seed_path("watcher"))
    )
    client = KubeClient.for_host(str(kmock.url).rstrip("/"))
    writer = KueueStatusWriter(bus, client, {"u1": JOB}, settings=StatusSettings())
    stopping = asyncio.Event()
    task = asyncio.create_task(writer.run(stopping))
    try:
        yield Cluster(writer, admin, record, kmock)
    finally:
        stopping.set()
        try:
            await asyncio.wait_for(task, WAIT_S)  # the writer's own failure fails the test here
        finally:
            await api.unsubscribe()
            await client.close()
            for connection in (bus, admission, admin):
                await connection.close()


async def test_workload_status_keeps_up_after_the_watchers_seed_rotates(
    cluster: Cluster, server: NatsServer, store: CredentialStore
) -> None:
    """After the watcher signs in anew with its rotated seed, a decision (an admission) and
    then a fact (the Job finished) each reach the Workload's status in the cluster. Before
    the writer followed its triggers anew, they died with the replaced client and the
    Workload stayed as it was before the rotation."""
    await cluster.decided(PENDING, ("QuotaReserved", "False"))  # before the rotation
    with captured_logs(shared.bus.connection) as logs:
        store.rotate("watcher")
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGHUP)  # what `berth creds rotate` does

        async def renewed() -> None:
            while not any(line["event"] == "credentials_renewed" for line in logs):  # noqa: ASYNC110
                await asyncio.sleep(0.05)

        await asyncio.wait_for(renewed(), WAIT_S)
    # Signed in anew on a new client: the old one, and what was subscribed on it, is gone.
    await cluster.decided(ADMITTED, ("Admitted", "True"))
    # By now the writer follows on the new client (its full round after the reconnect is
    # done): this one reaches the cluster only through its triggers.
    await cluster.decided(FINISHED, ("Finished", "True"))
