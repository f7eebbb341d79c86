"""The Kubernetes backend end to end: kmock as the API server, a real nats-server as the bus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kmock as km
import msgspec
import pytest

from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.kube.mirroring import CONFIG_RESOURCES, SOURCE_ANNOTATION
from services.watcher.kube.watching import WatchSettings
from shared.bus import CONFIG_BUCKET, Bus, KeyNotFound
from shared.events import (
    AnyEvent,
    EvictionRequested,
    FlavorAssignment,
    PodSet,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
)
from shared.service import Runtime
from tests.conftest import bus_auth

FAST = WatchSettings(server_timeout=5, inactivity_timeout=2, backoff_initial=0.01, absent_retry=30)
JOBS_KEY = km.resource("batch/v1/jobs")
PODS_KEY = km.resource("v1/pods")
REF = WorkloadRef(namespace="ns", name="j1", uid="u1")
ASSIGNMENT = FlavorAssignment(
    pod_set="main", count=2, flavors={"cpu": "spot"}, usage={}, node_labels={"pool": "spot"}
)


def labelled_job(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j1",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "1",
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "team-a", **labels},
        },
        "spec": {
            "parallelism": 3,
            "completions": 2,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
                    ]
                }
            },
        },
    }


def admitted_job() -> WorkloadAdmitted:
    """Admission's decision for the test Job (REF), generation 1, on ASSIGNMENT."""
    return WorkloadAdmitted(
        source="admission",
        workload=REF,
        cluster_queue="cq",
        local_queue="team-a",
        priority=0,
        assignments=[ASSIGNMENT],
        generation=1,
    )


class Harness:
    def __init__(self, handler: kmock.KubernetesEmulator, bus: Bus, runtime: Runtime) -> None:
        self.kmock = handler
        self.bus = bus
        self.runtime = runtime
        self.events: list[AnyEvent] = []
        self._subscription: Any = None  # the fixture's replay of berth.wl.>

    async def wait_for(self, predicate: Callable[[AnyEvent], bool]) -> AnyEvent:
        subscription = self._subscription
        async with asyncio.timeout(5):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                # The bus decodes: batches become their events (shared/bus/batches.py).
                self.events += await self.bus.next_batch(subscription, wait=0.2) or []

    def patches(self) -> list[tuple[str, Any]]:
        return [(r.url.path, r.data) for r in self.kmock if r.method == "PATCH"]

    async def api(self, method: str, path: str, body: Any) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with aiohttp.ClientSession() as session:
            url = str(self.kmock.url).rstrip("/") + path
            async with session.request(method, url, json=body, headers=headers) as response:
                assert response.status < 300, await response.text()


@pytest.fixture
async def harness(
    kmock: kmock.KubernetesEmulator, nats_url: str, tmp_path: Path
) -> AsyncIterator[Harness]:
    bus = await Bus.connect(nats_url, source="watcher", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    runtime = Runtime(name="watcher", bus=bus, data_dir=str(tmp_path))
    kmock.objects[PODS_KEY, "ns", "unrelated"] = {"metadata": {"name": "unrelated", "uid": "x"}}
    harness = Harness(kmock, bus, runtime)
    harness._subscription = await bus.replay_subscription(["berth.wl.>"])
    yield harness
    runtime.stopping.set()
    task = getattr(harness, "task", None)
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await bus.close()


async def start(harness: Harness) -> asyncio.Task[None]:
    client = KubeClient.for_host(str(harness.kmock.url).rstrip("/"))
    # kmock 0.8 cannot serve /api/v1/namespaces (it parses "namespaces" as the namespace
    # prefix and fails with a 500), so Namespace mirroring is left out here.
    config = {k: v for k, v in CONFIG_RESOURCES.items() if k != "Namespace"}
    backend = KubernetesBackend(
        harness.runtime, client=client, settings=FAST, config_resources=config
    )

    async def run() -> None:
        try:
            await backend.observe()
        finally:
            await client.close()

    task = asyncio.create_task(run())
    harness.task = task  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        await harness.runtime.ready.wait()
    return task


async def stop(harness: Harness, task: asyncio.Task[None]) -> None:
    harness.runtime.stopping.set()
    async with asyncio.timeout(5):
        await task


async def test_labelled_job_is_suspended_and_reported(harness: Harness) -> None:
    """A labelled running Job is suspended at once and reported with its pod sets."""
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = labelled_job()
    task = await start(harness)
    submitted = await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    await stop(harness, task)
    assert isinstance(submitted, WorkloadSubmitted)
    assert submitted.id == "submitted-u1"
    assert submitted.queue_name == "team-a"
    assert submitted.pod_sets == [
        PodSet(name="main", count=2, requests={"cpu": 500, "memory": 1024**3 * 1000})
    ]
    assert harness.patches() == [
        (
            "/apis/batch/v1/namespaces/ns/jobs/j1",
            {"metadata": {"resourceVersion": "1"}, "spec": {"suspend": True}},
        )
    ]


async def test_admission_eviction_and_finish(harness: Harness) -> None:
    """Admit patches once despite redelivery, evict restores, a Complete condition finishes."""
    obj = labelled_job()
    obj["spec"]["suspend"] = True
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = obj
    task = await start(harness)
    await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    admitted = admitted_job()
    await harness.bus.publish(admitted)
    # A redelivery: the same decision again (another message id, or the stream would dedupe).
    await harness.bus.publish(msgspec.structs.replace(admitted, id="again"))
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    await asyncio.sleep(0.5)  # give the second delivery time to (not) patch
    [(_, admit)] = harness.patches()
    assert admit["spec"]["suspend"] is False
    assert admit["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "spot"}
    assert admit["metadata"]["annotations"]["berth.dev/admitted-generation"] == "1"

    await harness.bus.publish(
        EvictionRequested(
            source="preemption", workload=REF, cluster_queue="cq", generation=1, reason="Preempted"
        )
    )
    evicted = await harness.wait_for(lambda e: isinstance(e, WorkloadEvicted))
    assert evicted.id == "evicted-u1-1"
    job = harness.kmock.objects[JOBS_KEY, "ns", "j1"]
    assert job["spec"]["suspend"] is True
    assert "nodeSelector" not in job["spec"]["template"]["spec"]

    await harness.api(
        "PATCH",
        "/apis/batch/v1/namespaces/ns/jobs/j1",
        {"status": {"conditions": [{"type": "Complete", "status": "True"}]}},
    )
    finished = await harness.wait_for(lambda e: isinstance(e, WorkloadFinished))
    assert isinstance(finished, WorkloadFinished)
    assert finished.id == "finished-u1-1" and finished.succeeded
    await asyncio.sleep(0.3)
    await stop(harness, task)
    job = harness.kmock.objects[JOBS_KEY, "ns", "j1"]
    assert job["metadata"]["annotations"]["berth.dev/finished-generation"] == "1"


async def test_disrupted_managed_pod_is_reported_preempted(harness: Harness) -> None:
    """A managed job's pod preempted by the scheduler evicts the Job with reason Preempted."""
    obj = labelled_job(**{"berth.dev/managed-job": "m1"})
    obj["spec"]["suspend"] = False
    obj["metadata"]["annotations"] = {"berth.dev/admitted-generation": "3"}
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = obj
    task = await start(harness)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "j1-abc",
            "namespace": "ns",
            "uid": "p1",
            "labels": {"berth.dev/managed-job": "m1"},
            "ownerReferences": [{"kind": "Job", "name": "j1", "uid": "u1", "controller": True}],
        },
        "status": {
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
            ]
        },
    }
    await harness.api("POST", "/api/v1/namespaces/ns/pods", pod)
    evicted = await harness.wait_for(lambda e: isinstance(e, WorkloadEvicted))
    await stop(harness, task)
    assert isinstance(evicted, WorkloadEvicted)
    assert (evicted.id, evicted.reason, evicted.generation) == ("evicted-u1-3", "Preempted", 3)
    assert harness.kmock.objects[JOBS_KEY, "ns", "j1"]["spec"]["suspend"] is True


async def test_config_objects_are_mirrored(harness: Harness) -> None:
    """Valid Kueue objects land in the config bucket without status; invalid ones are skipped."""
    lq = km.resource("kueue.x-k8s.io/v1beta1/localqueues")
    harness.kmock.objects[lq, "team-a", "default"] = {
        "metadata": {"name": "default", "namespace": "team-a", "resourceVersion": "5"},
        "spec": {"clusterQueue": "cq"},
        "status": {"pendingWorkloads": 3},
    }
    harness.kmock.objects[lq, "team-a", "bad"] = {
        "metadata": {"name": "bad", "namespace": "team-a"},
        "spec": {"clusterQueue": "cq", "typo": 1},
    }
    task = await start(harness)
    kv = await harness.bus.kv(CONFIG_BUCKET)
    queue = msgspec.json.decode((await kv.get("localqueue.team-a.default")).value or b"")
    assert queue["spec"] == {"clusterQueue": "cq"} and "status" not in queue
    with pytest.raises(KeyNotFound):
        await kv.get("localqueue.team-a.bad")
    await stop(harness, task)


async def test_a_relist_removes_only_the_mirrored_objects_the_cluster_no_longer_has(
    harness: Harness,
) -> None:
    """A LocalQueue mirrored earlier and gone from the cluster is removed at the list; one
    written by `berth apply` (no source annotation) is left alone."""
    kv = await harness.bus.kv(CONFIG_BUCKET)

    def local_queue(name: str, annotations: dict[str, str]) -> bytes:
        metadata = {"name": name, "namespace": "team-a", "annotations": annotations}
        document = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue"}
        return msgspec.json.encode(
            {**document, "metadata": metadata, "spec": {"clusterQueue": "cq"}}
        )

    await kv.put(
        "localqueue.team-a.mirrored", local_queue("mirrored", {SOURCE_ANNOTATION: "kubernetes"})
    )
    await kv.put("localqueue.team-a.applied", local_queue("applied", {}))
    task = await start(harness)

    async def removed() -> None:
        while True:
            try:
                await kv.get("localqueue.team-a.mirrored")
            except KeyNotFound:
                return
            await asyncio.sleep(0.05)

    async with asyncio.timeout(10):
        await removed()
    assert (await kv.get("localqueue.team-a.applied")).value
    await stop(harness, task)
