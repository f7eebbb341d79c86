"""The watcher's behaviour contract, one suite for both backends (issue 16).

Every test runs twice: against the local backend (real processes, a real nats-server) and
against the Kubernetes backend (kmock as the API server, the same nats-server). The steps go
through the :class:`~services.watcher.backend.Backend` verbs, the assertions through the
facts on the bus; where a test needs to see the "cluster" itself (does the workload run? does
it exist?) it asks the :class:`Cluster` adapter, which answers in each backend's terms:

============  ==========================================  =====================================
question      local                                       kubernetes (kmock)
============  ==========================================  =====================================
exists        an object in ``berth-objects``              the Job answers a GET
runs          its process is alive (pids in berth-status)  unsuspended, not Complete/Failed
finish it     its process exits 0 (a flag file)           the Job gets a Complete condition
settled       its status is marked reported               its finished-generation annotation
============  ==========================================  =====================================

Every verb is awaited, and a verb that reports publishes before it returns; a restarted
backend publishes what its first list finds before it is ready. So "exactly once" is read
off the whole stream at those points, never after a sleep.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import kmock
import kmock as km
import msgspec
import pytest

from bench.eventlog import read_events
from services.watcher.backend import Backend
from services.watcher.kube.api import KubeClient
from services.watcher.kube.backend import KubernetesBackend
from services.watcher.kube.mirroring import CONFIG_RESOURCES
from services.watcher.kube.watching import WatchSettings
from services.watcher.local.backend import LocalBackend
from shared.bus import OBJECTS_BUCKET, STATUS_BUCKET, Bus
from shared.events import (
    DeleteWorkload,
    EvictionRequested,
    FlavorAssignment,
    SubmitWorkload,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPodsReady,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
)
from shared.service import Runtime
from shared.workloads import workload_key
from tests.conftest import bus_auth
from tests.pods_ready_facts import enable_pods_ready

FAST = WatchSettings(server_timeout=5, inactivity_timeout=2, backoff_initial=0.01, absent_retry=30)
JOBS = "/apis/batch/v1/namespaces/ns/jobs"
REF = WorkloadRef(namespace="ns", name="contract", uid="u-contract")
QUEUE = "team-a"


class Cluster:
    """One backend under test, restartable, and what the test may ask of its cluster."""

    def __init__(self, kind: str, nats_url: str, data_dir: Path, flag: Path) -> None:
        self.kind = kind
        self.nats_url = nats_url
        self.data_dir = data_dir
        self.flag = flag  # the local process runs until it exists
        self.api: kmock.KubernetesEmulator | None = None
        self.backend: Backend | None = None
        self.bus: Bus | None = None
        self.runtime: Runtime | None = None
        self.task: asyncio.Task[None] | None = None
        self.client: KubeClient | None = None

    # --- the backend's life ---------------------------------------------------------------

    async def start(self) -> Backend:
        """A new backend (as a restarted watcher would be), observing, once it is ready."""
        self.bus = await Bus.connect(self.nats_url, source="watcher", auth=bus_auth(self.nats_url))
        await self.bus.ensure_stream()
        self.runtime = Runtime(name="watcher", bus=self.bus, data_dir=str(self.data_dir))
        if self.kind == "local":
            self.backend = LocalBackend(self.runtime, stop_grace=1)
        else:
            assert self.api is not None
            self.client = KubeClient.for_host(str(self.api.url).rstrip("/"))
            # kmock cannot serve /api/v1/namespaces (see tests/test_kube_backend.py).
            config = {k: v for k, v in CONFIG_RESOURCES.items() if k != "Namespace"}
            self.backend = KubernetesBackend(
                self.runtime, client=self.client, settings=FAST, config_resources=config
            )
        self.task = asyncio.create_task(self.backend.observe())
        ready = asyncio.create_task(self.runtime.ready.wait())
        async with asyncio.timeout(20):
            await asyncio.wait({self.task, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self.task.done():
            self.task.result()  # raises what stopped it
        return self.backend

    async def stop(self) -> None:
        if self.runtime is None or self.task is None or self.bus is None:
            return
        self.runtime.stopping.set()
        self.bus.interrupt_waits()
        await asyncio.wait_for(asyncio.gather(self.task, return_exceptions=True), 15)
        await self.runtime.cancel_tasks(grace=2)
        if self.client is not None:
            await self.client.close()
        await self.bus.close()
        self.runtime = self.task = self.bus = self.client = None

    # --- what the test asks of the cluster -------------------------------------------------

    async def exists(self, ref: WorkloadRef) -> bool:
        if self.kind == "local":
            return await self._status_or_object(OBJECTS_BUCKET, ref) is not None
        return await self._get_job(ref) is not None

    async def runs(self, ref: WorkloadRef) -> bool:
        if self.kind == "local":
            status = await self._status_or_object(STATUS_BUCKET, ref) or {}
            pids = status.get("pids") or []
            return status.get("phase") == "Running" and any(_alive(pid) for pid in pids)
        job = await self._get_job(ref)
        if job is None or job["spec"].get("suspend") is not False:
            return False
        conditions = (job.get("status") or {}).get("conditions") or []
        return not any(c.get("type") in ("Complete", "Failed") for c in conditions)

    async def finish(self, ref: WorkloadRef) -> None:
        """Make the admitted run end well."""
        if self.kind == "local":
            self.flag.touch()
            return
        await self._api("PATCH", f"{JOBS}/{ref.name}", _complete())

    async def ready(self, ref: WorkloadRef) -> None:
        """Make every pod of the admitted run ready (local: they are, once started)."""
        if self.kind == "kube":
            await self._api("PATCH", f"{JOBS}/{ref.name}", {"status": {"ready": 2}})

    async def lose_pod(self, ref: WorkloadRef) -> None:
        """One pod of a ready two-pod run fails while the other runs (local: its process
        exits 3; kube: the Job's ready count drops)."""
        if self.kind == "local":
            self.flag.with_name("fail.flag").touch()
            return
        await self._api("PATCH", f"{JOBS}/{ref.name}", {"status": {"ready": 1, "failed": 1}})

    async def settled(self, ref: WorkloadRef) -> bool:
        """The backend recorded that it reported the finish (what a restart reads)."""
        if self.kind == "local":
            status = await self._status_or_object(STATUS_BUCKET, ref) or {}
            return status.get("reported") is True
        job = await self._get_job(ref) or {}
        annotations = (job.get("metadata") or {}).get("annotations") or {}
        return annotations.get("berth.dev/finished-generation") == "1"

    async def _status_or_object(self, bucket: str, ref: WorkloadRef) -> dict[str, Any] | None:
        bus = await Bus.connect(self.nats_url, source="test", auth=bus_auth(self.nats_url))
        try:
            kv = await bus.kv(bucket)
            try:
                entry = await kv.get(workload_key(ref.namespace, ref.name))
            except Exception:  # no such key (deleted, or never written)
                return None
            return None if not entry.value else dict(msgspec.json.decode(entry.value))
        finally:
            await bus.close()

    async def _get_job(self, ref: WorkloadRef) -> dict[str, Any] | None:
        assert self.api is not None
        url = str(self.api.url).rstrip("/") + f"{JOBS}/{ref.name}"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            if response.status == 404:
                return None
            assert response.status == 200, await response.text()
            return dict(await response.json())

    async def _api(self, method: str, path: str, body: Any) -> None:
        assert self.api is not None
        headers = {"Content-Type": "application/merge-patch+json"}
        url = str(self.api.url).rstrip("/") + path
        async with aiohttp.ClientSession() as session:
            async with session.request(method, url, json=body, headers=headers) as response:
                assert response.status < 300, await response.text()


def _unrelated(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": "unrelated", "namespace": "other", "uid": uid}}


def _complete() -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False


def job(flag: Path, pods: int = 1) -> dict[str, Any]:
    """One Job both backends take: the local one runs its command until ``flag`` exists;
    with two pods, pod 1 exits 3 once ``fail.flag`` (next to ``flag``) exists."""
    loop = f"while [ ! -e {flag} ]; do sleep 0.05; done"
    if pods == 2:
        fail = flag.with_name("fail.flag")
        loop = (
            f'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then while [ ! -e {fail} ]; do sleep 0.05;'
            f" done; exit 3; fi; {loop}"
        )
    container = {
        "name": "c",
        "image": "busybox",
        "command": ["sh", "-c", loop],
        "resources": {"requests": {"cpu": "100m"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": REF.name,
            "namespace": REF.namespace,
            "uid": REF.uid,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": {"containers": [container], "restartPolicy": "Never"}},
        },
    }


ADMITTED = WorkloadAdmitted(
    source="admission",
    workload=REF,
    cluster_queue="cq",
    local_queue=QUEUE,
    priority=0,
    assignments=[FlavorAssignment(pod_set="main", count=1, flavors={"cpu": "f"}, usage={})],
    generation=1,
)
TWO_PODS = msgspec.structs.replace(
    ADMITTED,
    assignments=[FlavorAssignment(pod_set="main", count=2, flavors={"cpu": "f"}, usage={})],
)
EVICTION = EvictionRequested(
    source="preemption", workload=REF, cluster_queue="cq", generation=1, reason="Preempted"
)


Fact = TypeVar(
    "Fact",
    WorkloadSubmitted,
    WorkloadStarted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadDeleted,
    WorkloadPodsReady,
)


async def facts(nats_url: str, kind: type[Fact]) -> list[Fact]:
    """Every fact of this type about the workload stored on the stream so far."""
    events = await read_events(nats_url, auth=bus_auth(nats_url))
    return [e for e in events if isinstance(e, kind) and e.workload.uid == REF.uid]


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll an async check until it holds (a generous limit: a loaded machine)."""
    for _ in range(400):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within 20 s: {what}")


@pytest.fixture(params=["local", "kube"])
async def cluster(
    request: pytest.FixtureRequest, kmock: kmock.KubernetesEmulator, nats_url: str, tmp_path: Path
) -> AsyncIterator[Cluster]:
    under_test = Cluster(request.param, nats_url, tmp_path / "data", tmp_path / "finish.flag")
    if request.param == "kube":
        under_test.api = kmock
        # kmock lists a resource only once it holds an object of it: without these, the
        # watches would find "no such resource" and look again only after a while.
        kmock.objects[km.resource("batch/v1/jobs"), "other", "unrelated"] = _unrelated("y")
        kmock.objects[km.resource("v1/pods"), "other", "unrelated"] = _unrelated("x")
    yield under_test
    under_test.flag.touch()  # a local process still running ends with the test
    await under_test.stop()


async def created_and_admitted(cluster: Cluster) -> Backend:
    backend = await cluster.start()
    await backend.create(SubmitWorkload(source="cli", workload=REF, object=job(cluster.flag)))
    await until(lambda: _submitted(cluster.nats_url), "reported submitted")
    await backend.admit(ADMITTED)
    return backend


async def _submitted(nats_url: str) -> bool:
    return bool(await facts(nats_url, WorkloadSubmitted))


# --- the contract ------------------------------------------------------------------------------


async def test_contract_create_is_observed_and_reported_submitted_not_started(
    cluster: Cluster,
) -> None:
    """create: the object exists, the watch reports it submitted once with its queue; it is
    held (not running) until admission says so."""
    backend = await cluster.start()
    command = SubmitWorkload(source="cli", workload=REF, object=job(cluster.flag))
    await backend.create(command)
    await backend.create(command)  # a redelivered command: nothing new
    await until(lambda: _submitted(cluster.nats_url), "reported submitted")
    assert await cluster.exists(REF)
    [submitted] = await facts(cluster.nats_url, WorkloadSubmitted)
    assert (submitted.workload, submitted.queue_name) == (REF, QUEUE)
    assert [p.name for p in submitted.pod_sets] == ["main"]
    assert not await cluster.runs(REF)
    assert await facts(cluster.nats_url, WorkloadStarted) == []


async def test_contract_admit_starts_it_once(cluster: Cluster) -> None:
    """admit: it runs (local: its process; kube: the Job unsuspended) and is reported
    started once, a redelivered admission changing nothing."""
    backend = await created_and_admitted(cluster)
    await until(lambda: cluster.runs(REF), "runs after admission")
    await backend.admit(ADMITTED)  # redelivered
    started = await facts(cluster.nats_url, WorkloadStarted)
    assert [(e.workload, e.generation) for e in started] == [(REF, 1)]
    assert await cluster.runs(REF)


async def test_contract_evict_stops_it_and_reports_the_generation(cluster: Cluster) -> None:
    """evict: it stops (local: the process is gone; kube: the Job suspended again) and the
    eviction of that generation is reported with its reason."""
    backend = await created_and_admitted(cluster)
    await until(lambda: cluster.runs(REF), "runs after admission")
    await backend.evict(EVICTION)
    assert not await cluster.runs(REF)
    [evicted] = await facts(cluster.nats_url, WorkloadEvicted)
    assert (evicted.generation, evicted.reason) == (1, "Preempted")
    assert await cluster.exists(REF)  # evicted is not deleted: admission queues it again
    assert await facts(cluster.nats_url, WorkloadFinished) == []


async def test_contract_delete_removes_it_and_reports_it_deleted(cluster: Cluster) -> None:
    """delete: the object goes (and what ran of it stops); the watch reports it deleted."""
    backend = await created_and_admitted(cluster)
    await until(lambda: cluster.runs(REF), "runs after admission")
    await backend.delete(DeleteWorkload(source="recovery", workload=REF))

    async def deleted() -> bool:
        return bool(await facts(cluster.nats_url, WorkloadDeleted))

    await until(deleted, "reported deleted")
    assert not await cluster.exists(REF)
    assert not await cluster.runs(REF)


async def test_contract_a_finished_run_is_reported_finished_once(cluster: Cluster) -> None:
    """A run that ends well is reported Finished (succeeded, its generation) once: not again
    by a redelivered admission, nor by the next watcher's first list once the finish is
    recorded (issue 15: a finish recorded but never reported held its quota for good)."""
    backend = await created_and_admitted(cluster)
    await until(lambda: cluster.runs(REF), "runs after admission")
    await cluster.finish(REF)

    async def finished() -> bool:
        return bool(await facts(cluster.nats_url, WorkloadFinished))

    await until(finished, "reported finished")
    await until(lambda: cluster.settled(REF), "the finish recorded")
    await backend.admit(ADMITTED)  # redelivered after the finish: starts nothing
    await cluster.stop()
    await cluster.start()  # a new watcher lists what is there: ready once it reported it
    reports = await facts(cluster.nats_url, WorkloadFinished)
    assert [(e.generation, e.succeeded) for e in reports] == [(1, True)]
    assert len(await facts(cluster.nats_url, WorkloadStarted)) == 1
    assert not await cluster.runs(REF)


async def test_the_local_backend_never_writes_into_an_object_it_read(cluster: Cluster) -> None:
    """Not the contract, the local backend's own premise: equal objects share one spec
    mapping (services/watcher/local/spec_memo.py), which is sound only if nothing writes
    into an object once read. Through a whole run (admitted, started as processes, ready,
    finished, recorded), what the backend holds is still what the bucket stores."""
    if cluster.kind != "local":
        pytest.skip("the local backend's objects")
    backend = await created_and_admitted(cluster)
    assert isinstance(backend, LocalBackend)
    await until(lambda: cluster.runs(REF), "runs after admission")
    await cluster.finish(REF)
    await until(lambda: cluster.settled(REF), "the finish recorded")
    stored = await cluster._status_or_object(OBJECTS_BUCKET, REF)
    assert backend.objects[workload_key(REF.namespace, REF.name)] == stored


async def test_contract_a_ready_run_that_loses_a_pod_is_reported_not_ready(
    cluster: Cluster,
) -> None:
    """waitForPodsReady: a run whose pods are all ready is reported PodsReady once; then a pod
    that fails while the other runs (local: its process exits 3; kube: the Job's ready count
    drops) is reported PodsReady ``ready: false`` once, same generation; the run goes on.
    The setting is turned on once the watcher runs: it follows it (pods_ready_gate.py)."""
    backend = await cluster.start()
    assert cluster.bus is not None
    await enable_pods_ready(cluster.bus)
    command = SubmitWorkload(source="cli", workload=REF, object=job(cluster.flag, pods=2))
    await backend.create(command)
    await until(lambda: _submitted(cluster.nats_url), "reported submitted")
    await backend.admit(TWO_PODS)
    await until(lambda: cluster.runs(REF), "runs after admission")
    await cluster.ready(REF)

    async def readiness(expected: list[bool]) -> bool:
        reports = await facts(cluster.nats_url, WorkloadPodsReady)
        assert all(e.generation == 1 for e in reports), reports
        return [e.ready for e in reports] == expected

    await until(lambda: readiness([True]), "reported ready")
    await cluster.lose_pod(REF)
    await until(lambda: readiness([True, False]), "reported not ready")
    assert await cluster.runs(REF), "one pod failing does not end the run"
