"""Managed jobs on the Kubernetes backend: kmock as the API server, the real recovery service.

The watcher (Kubernetes backend) and recovery run in this process on a real nats-server;
admission's and preemption's decisions are published by the test, as those services would.
Each test asserts the exact writes the API server receives (kmock records every request).
kmock keeps the uid it is sent (a real API server assigns its own: the watcher keys on the
``berth.dev/requested-uid`` annotation for that case, see services/watcher/kube/creating.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kmock as km
import msgspec
import pytest

from berth_cli.tasks import load_managed_job
from services.recovery.service import RecoveryService
from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.kube.mirroring import CONFIG_RESOURCES
from services.watcher.kube.watching import WatchSettings
from shared.bus import CONFIG_BUCKET, Bus
from shared.events import (
    AnyEvent,
    EvictionRequested,
    FlavorAssignment,
    JobStatusChanged,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.service import Runtime
from tests.conftest import bus_auth

FAST = WatchSettings(server_timeout=5, inactivity_timeout=2, backoff_initial=0.01, absent_retry=30)
JOBS_KEY = km.resource("batch/v1/jobs")
PODS_KEY = km.resource("v1/pods")
IMAGE = "registry.example/berth-task:1"
JOBS_PATH = "/apis/batch/v1/namespaces/ns/jobs"
TASK = """
name: train
resources:
  cpus: 2
run: python train.py
"""
ASSIGNMENT = FlavorAssignment(
    pod_set="main", count=1, flavors={"cpu": "spot"}, usage={"cpu": 2000}, node_labels={}
)


class Cluster:
    """A watcher and recovery against kmock, and the test's view of the event stream."""

    def __init__(self, api: kmock.KubernetesEmulator, bus: Bus) -> None:
        self.api = api
        self.bus = bus
        self.events: list[AnyEvent] = []
        self.runtimes: list[Runtime] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.buses: list[Bus] = []
        self.subscription: Any = None

    async def wait_for(self, predicate: Callable[[AnyEvent], bool]) -> AnyEvent:
        async with asyncio.timeout(8):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                # The bus decodes: batches become their events (shared/bus/batches.py).
                self.events += await self.bus.next_batch(self.subscription, wait=0.2) or []

    async def status(self, status: str, **fields: Any) -> JobStatusChanged:
        def matches(event: AnyEvent) -> bool:
            return (
                isinstance(event, JobStatusChanged)
                and event.status == status
                and all(getattr(event, k) == v for k, v in fields.items())
            )

        found = await self.wait_for(matches)
        assert isinstance(found, JobStatusChanged)
        return found

    def writes(self) -> list[tuple[str, str, Any]]:
        """Every request that changes something: (method, path, body), in order."""
        return [
            (r.method, r.url.path, r.data)
            for r in self.api
            if r.method in ("POST", "PATCH", "DELETE", "PUT")
        ]

    async def ask(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = await self.bus.nc.request(
            f"berth.api.recovery.{verb}", msgspec.json.encode(body), timeout=5
        )
        result: dict[str, Any] = msgspec.json.decode(reply.data)
        return result

    async def launch(self, task: str = TASK) -> int:
        spec = load_managed_job(task, source="task.yaml")
        reply = await self.ask(
            "launch",
            {
                "name": spec.name,
                "namespace": "ns",
                "template": spec.job,
                "resources": spec.resources,
                "queueName": spec.queue_name,
                "maxRestartsOnErrors": spec.max_restarts_on_errors,
            },
        )
        return int(reply["id"])

    async def admit(self, submitted: WorkloadSubmitted, generation: int) -> None:
        await self.bus.publish(
            WorkloadAdmitted(
                source="admission",
                workload=submitted.workload,
                cluster_queue="cq",
                local_queue="default",
                priority=0,
                assignments=[ASSIGNMENT],
                generation=generation,
            )
        )


@pytest.fixture
async def cluster(
    kmock: kmock.KubernetesEmulator, nats_url: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    bus = await Bus.connect(nats_url, source="admission", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    config = await bus.kv(CONFIG_BUCKET)
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "ns"},
        "spec": {"clusterQueue": "cq"},
    }
    await config.put("localqueue.ns.default", msgspec.json.encode(queue))
    kmock.objects[PODS_KEY, "ns", "unrelated"] = {"metadata": {"name": "unrelated", "uid": "x"}}
    kmock.objects[JOBS_KEY, "other", "unrelated"] = {"metadata": {"name": "unrelated", "uid": "y"}}
    cluster = Cluster(kmock, bus)
    cluster.subscription = await bus.replay_subscription(["berth.>"])
    for name in ("watcher", "recovery"):
        service_bus = await Bus.connect(nats_url, source=name, auth=bus_auth(nats_url))
        runtime = Runtime(name=name, bus=service_bus, data_dir=str(tmp_path / name))
        cluster.buses.append(service_bus)
        cluster.runtimes.append(runtime)
        if name == "watcher":
            client = KubeClient.for_host(str(kmock.url).rstrip("/"))
            resources = {k: v for k, v in CONFIG_RESOURCES.items() if k != "Namespace"}
            backend = KubernetesBackend(
                runtime, client=client, settings=FAST, config_resources=resources, image=IMAGE
            )
            cluster.tasks.append(asyncio.create_task(_run_then_close(backend, client)))
        else:
            cluster.tasks.append(asyncio.create_task(RecoveryService(runtime).run()))
        async with asyncio.timeout(5):
            await runtime.ready.wait()
        await service_bus.nc.flush()  # its API subscriptions reached the server
    yield cluster
    for runtime in cluster.runtimes:
        runtime.stopping.set()
    async with asyncio.timeout(5):
        await asyncio.gather(*cluster.tasks, return_exceptions=True)
    for runtime in cluster.runtimes:
        await runtime.cancel_tasks(grace=1)
    for service_bus in cluster.buses:
        await service_bus.close()
    await bus.close()


async def _run_then_close(backend: KubernetesBackend, client: KubeClient) -> None:
    try:
        await backend.observe()
    finally:
        await client.close()


def _submitted(name: str) -> Callable[[AnyEvent], bool]:
    return lambda e: isinstance(e, WorkloadSubmitted) and e.workload.name == name


async def test_kube_managed_job_launched_preempted_recovered_and_cancelled(
    cluster: Cluster,
) -> None:
    """Launch creates the Job held; admission unsuspends it; preemption suspends it and
    restores its template; recovery brings the same Job back (#RECOVERIES 1); cancel deletes
    it with its pods (Background): exactly these writes reach the API server."""
    job_id = await cluster.launch()
    submitted = await cluster.wait_for(_submitted("train-1"))
    assert isinstance(submitted, WorkloadSubmitted)
    uid = submitted.workload.uid
    [(method, path, body)] = cluster.writes()
    assert (method, path) == ("POST", JOBS_PATH)
    metadata = body["metadata"]
    assert (metadata["name"], metadata["namespace"], metadata["uid"]) == ("train-1", "ns", uid)
    assert metadata["labels"] == {
        "kueue.x-k8s.io/queue-name": "default",
        "berth.dev/managed-job": str(job_id),
    }
    assert metadata["annotations"]["berth.dev/requested-uid"] == uid
    assert "creationTimestamp" not in metadata and "status" not in body
    assert body["spec"]["suspend"] is True
    template = body["spec"]["template"]
    assert template["metadata"]["labels"]["berth.dev/managed-job"] == str(job_id)
    [container] = template["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["resources"]["requests"]["cpu"] == "2"
    assert {"name": "BERTH_TASK_RUN", "value": "python train.py"} in container["env"]

    await cluster.admit(submitted, 1)
    await cluster.status("RUNNING", recoveries=0)
    await cluster.bus.publish(
        EvictionRequested(
            source="preemption",
            workload=submitted.workload,
            cluster_queue="cq",
            generation=1,
            reason="Preempted",
            detail="InClusterQueue",
        )
    )
    await cluster.status("RECOVERING", recoveries=1)
    await cluster.admit(submitted, 2)
    await cluster.status("RUNNING", recoveries=1)
    await cluster.ask("cancel", {"id": job_id})
    await cluster.status("CANCELLED")

    name = f"{JOBS_PATH}/train-1"
    annotations = "berth.dev/admitted-generation", "berth.dev/evicted-generation"
    assert [
        (method, path, _summary(body, annotations)) for method, path, body in cluster.writes()[1:]
    ] == [
        ("PATCH", name, {"suspend": False, "berth.dev/admitted-generation": "1"}),
        ("PATCH", name, {"suspend": True, "berth.dev/evicted-generation": "1"}),
        ("PATCH", name, {"restored": True}),  # the pod template's original scheduling fields
        ("PATCH", name, {"suspend": False, "berth.dev/admitted-generation": "2"}),
        (
            "DELETE",
            name,
            {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"uid": uid},
                "propagationPolicy": "Background",
            },
        ),
    ]
    deleted = await cluster.wait_for(lambda e: isinstance(e, WorkloadDeleted))
    assert deleted.workload.uid == uid


def _summary(body: dict[str, Any], annotations: tuple[str, ...]) -> dict[str, Any]:
    """What a write changes, in a line: suspend, our annotations, or a template restore."""
    if body.get("kind") == "DeleteOptions":
        return body
    found = (body.get("metadata") or {}).get("annotations") or {}
    summary: dict[str, Any] = {k: found[k] for k in annotations if k in found}
    if "suspend" in (body.get("spec") or {}):
        summary["suspend"] = body["spec"]["suspend"]
    if found.get("berth.dev/pod-set-info", "") is None:
        summary["restored"] = True
    return summary


async def test_kube_managed_job_disrupted_pod_is_a_recovery(cluster: Cluster) -> None:
    """A managed pod the scheduler preempts evicts its Job (Preempted): recovery counts it and
    the pod carries the managed-job label because the watcher put it on the template."""
    await cluster.launch()
    submitted = await cluster.wait_for(_submitted("train-1"))
    assert isinstance(submitted, WorkloadSubmitted)
    await cluster.admit(submitted, 1)
    await cluster.status("RUNNING")
    job = cluster.api.objects[JOBS_KEY, "ns", "train-1"]
    pod = _pod(job, "train-1-abcde")
    pod["status"] = {
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
        ]
    }
    await _post(cluster, "/api/v1/namespaces/ns/pods", pod)
    evicted = await cluster.wait_for(lambda e: isinstance(e, WorkloadEvicted))
    assert isinstance(evicted, WorkloadEvicted)
    assert (evicted.reason, evicted.generation) == ("Preempted", 1)
    assert "DeletionByTaintManager" in evicted.message
    await cluster.status("RECOVERING", recoveries=1)
    assert cluster.api.objects[JOBS_KEY, "ns", "train-1"]["spec"]["suspend"] is True


async def test_kube_managed_job_failure_is_retried_with_its_exit_code(cluster: Cluster) -> None:
    """A failed Job reports its pod's exit code; with max_restarts_on_errors 1 recovery creates
    a second attempt (a new Job, ``-r1``); the second failure is FAILED."""
    task = TASK.replace("cpus: 2", "cpus: 2\n  job_recovery: {max_restarts_on_errors: 1}")
    await cluster.launch(task)
    submitted = await cluster.wait_for(_submitted("train-1"))
    assert isinstance(submitted, WorkloadSubmitted)
    await cluster.admit(submitted, 1)
    await cluster.status("RUNNING")
    await _fail(cluster, "train-1", exit_code=3)
    finished = await cluster.wait_for(lambda e: isinstance(e, WorkloadFinished))
    assert isinstance(finished, WorkloadFinished)
    assert (finished.succeeded, finished.exit_code) == (False, 3)
    retry = await cluster.wait_for(_submitted("train-1-r1"))
    assert isinstance(retry, WorkloadSubmitted)
    await cluster.status("RECOVERING", recoveries=1)
    posts = [path for method, path, _ in cluster.writes() if method == "POST"]
    assert posts.count(JOBS_PATH) == 2
    assert cluster.api.objects[JOBS_KEY, "ns", "train-1-r1"]["spec"]["suspend"] is True
    await cluster.admit(retry, 1)
    await _fail(cluster, "train-1-r1", exit_code=1)
    failed = await cluster.status("FAILED")
    assert failed.recoveries == 1


async def test_kube_managed_job_logs_are_read_from_the_pods(cluster: Cluster) -> None:
    """`berth jobs logs` asks the watcher; on a cluster it reads the Job's pod's log through
    the API server and follows by offset."""
    await cluster.launch()
    submitted = await cluster.wait_for(_submitted("train-1"))
    assert isinstance(submitted, WorkloadSubmitted)
    job = cluster.api.objects[JOBS_KEY, "ns", "train-1"]
    cluster.api.objects[PODS_KEY, "ns", "train-1-abcde"] = _pod(job, "train-1-abcde")
    log_path = "/api/v1/namespaces/ns/pods/train-1-abcde/log"
    cluster.api[f"get {log_path}"] << b"epoch 1\nepoch 2\n"

    async def ask(offsets: dict[str, int]) -> dict[str, Any]:
        request = {"namespace": "ns", "name": "train-1", "offsets": offsets}
        reply = await cluster.bus.nc.request(
            "berth.api.watcher.logs", msgspec.json.encode(request), timeout=5
        )
        result: dict[str, Any] = msgspec.json.decode(reply.data)
        return result

    first = await ask({})
    assert first == {
        "files": [{"file": "train-1-abcde", "data": "epoch 1\nepoch 2\n", "offset": 16}]
    }
    again = await ask({"train-1-abcde": 8})
    assert again["files"][0] == {"file": "train-1-abcde", "data": "epoch 2\n", "offset": 16}
    [request] = [r for r in cluster.api if r.url.path == log_path][-1:]
    assert request.url.query["container"] == "task"
    assert request.url.query["limitBytes"] == str(8 + 256 * 1024)


def _plain(value: Any) -> Any:
    """kmock's stored objects are mapping views; the API speaks plain JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _pod(stored: Any, name: str) -> dict[str, Any]:
    """A pod as the Job controller makes it: the template's labels, the Job as controller."""
    job = _plain(stored)
    labels = dict(job["spec"]["template"]["metadata"]["labels"])
    labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"pod-{name}",
            "labels": labels,
            "ownerReferences": [
                {
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": job["spec"]["template"]["spec"],
    }


async def _fail(cluster: Cluster, name: str, *, exit_code: int) -> None:
    """The pod exits non-zero, then the Job controller marks the Job Failed."""
    job = cluster.api.objects[JOBS_KEY, "ns", name]
    pod = _pod(job, f"{name}-pod")
    terminated = {"terminated": {"exitCode": exit_code, "reason": "Error"}}
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"name": "task", "state": terminated}],
    }
    await _post(cluster, "/api/v1/namespaces/ns/pods", pod)
    await asyncio.sleep(0.3)  # the pod's watch event first, as the Job controller orders them
    failed = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    }
    await _request(cluster, "PATCH", f"{JOBS_PATH}/{name}", {"status": failed})


async def _post(cluster: Cluster, path: str, body: dict[str, Any]) -> None:
    await _request(cluster, "POST", path, body)


async def _request(cluster: Cluster, method: str, path: str, body: dict[str, Any]) -> None:
    headers = {"Content-Type": "application/merge-patch+json"}
    async with aiohttp.ClientSession() as session:
        url = str(cluster.api.url).rstrip("/") + path
        async with session.request(method, url, json=body, headers=headers) as response:
            assert response.status < 300, await response.text()


async def test_kube_submit_and_remove_commands_go_through_the_api_server(
    cluster: Cluster,
) -> None:
    """`berth submit`'s SubmitWorkload creates the Job suspended (the CLI's placeholder-free
    object keeps its image); `berth delete workload`'s RemoveWorkload, which names no uid,
    deletes it by name. Not a managed job: no managed-job label anywhere."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "plain",
            "namespace": "ns",
            "uid": "cli-uid",
            "creationTimestamp": "2025-01-01T00:00:00+00:00",
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }
    ref = WorkloadRef("ns", "plain", "cli-uid")
    await cluster.bus.publish(SubmitWorkload(source="cli", workload=ref, object=job))
    submitted = await cluster.wait_for(_submitted("plain"))
    assert isinstance(submitted, WorkloadSubmitted) and submitted.queue_name == "team-a"
    await cluster.bus.publish(RemoveWorkload(source="cli", workload=WorkloadRef("ns", "plain", "")))
    await cluster.wait_for(lambda e: isinstance(e, WorkloadDeleted))
    [(post, _, body), (delete, path, options)] = cluster.writes()
    assert (post, delete, path) == ("POST", "DELETE", f"{JOBS_PATH}/plain")
    assert body["spec"]["suspend"] is True
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    assert "metadata" not in body["spec"]["template"]
    assert options["preconditions"] == {"uid": "cli-uid"}
    assert options["propagationPolicy"] == "Background"
