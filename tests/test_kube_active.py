"""Kueue's spec.active on the cluster's Workloads (services/watcher/kube/active.py): whose
change it is (the rule, table-driven), and end to end with kmock as the API server, a real
nats-server and the real admission service: `kubectl kueue stop workload` (spec.active
false on the Workload) evicts and deactivates the workload; spec.active true runs it again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kmock as km
import pytest

from services.admission.service import AdmissionService
from services.watcher.kube import active
from services.watcher.kube.active import (
    ACTIVE_ANNOTATION,
    ActiveFollower,
    active_patch,
    external_active,
)
from services.watcher.kube.api import KubeClient
from services.watcher.kube.kueue_status import WORKLOADS
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import encode_object, object_key, parse_object
from shared.events import (
    EvictionRequested,
    SetWorkloadActive,
    WorkloadEvicted,
    WorkloadStarted,
)
from shared.service import Runtime
from tests.conftest import bus_auth, captured_logs
from tests.test_kube_backend import (  # noqa: F401 - harness is a fixture
    FAST,
    JOBS_KEY,
    Harness,
    harness,
    labelled_job,
    start,
    stop,
)


def _workload(active: bool | None, written: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "job-j1-abcde", "namespace": "ns"}
    if written is not None:
        metadata["annotations"] = {ACTIVE_ANNOTATION: written}
    return {"metadata": metadata, "spec": {} if active is None else {"active": active}}


# (why, spec.active, the annotation Berth wrote, the change someone else made: None if none)
RULE = [
    ("Berth made it active; nobody changed it", None, "true", None),
    ("kueuectl stop workload: spec.active false over Berth's true", False, "true", False),
    ("kueuectl resume workload: spec.active true over Berth's false", True, "false", True),
    ("Berth wrote false, the Workload says false: in step", False, "false", None),
    ("spec.active removed over Berth's false: Kueue's default, true", None, "false", True),
    ("made before the annotation existed, stopped since: a stop", False, None, False),
    ("made before the annotation existed, never touched: in step", None, None, None),
]


@pytest.mark.parametrize(("why", "active", "written", "change"), RULE, ids=[r[0] for r in RULE])
def test_external_active(
    why: str, active: bool | None, written: str | None, change: bool | None
) -> None:
    """Whose spec.active it is: see the id of each case."""
    assert external_active(_workload(active, written)) == change, why


# (why, the Workload as last seen, Berth's active, whether the writer patches)
PATCHES = [
    (
        "Berth stops it: spec.active and the annotation written",
        _workload(None, "true"),
        False,
        True,
    ),
    ("Berth resumes it: written back", _workload(False, "false"), True, True),
    ("already written: nothing to patch", _workload(False, "false"), False, False),
    (
        "a user stopped it and Berth still says active: the user's change is reported by the"
        " follower, never overwritten",
        _workload(False, "true"),
        True,
        False,
    ),
    ("never seen (a restarted watcher): written", None, True, True),
]


@pytest.mark.parametrize(
    ("why", "observed", "active", "patches"), PATCHES, ids=[p[0] for p in PATCHES]
)
def test_active_patch(
    why: str, observed: dict[str, Any] | None, active: bool, patches: bool
) -> None:
    """The writer's patch carries the value and the annotation together, or is None."""
    patch = active_patch(observed, active)
    assert (patch is not None) == patches, why
    if patch is not None:
        assert patch["spec"]["active"] is active
        assert patch["metadata"]["annotations"][ACTIVE_ANNOTATION] == str(active).lower()
        patched = {**(observed or {}), **patch}
        assert external_active(patched) is None, "Berth's own write is never someone else's"


WORKLOADS_KEY = km.resource("kueue.x-k8s.io/v1beta2/workloads")
CONFIG = [
    {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "rf"}},
    {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "rf",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 8},
                                {"name": "memory", "nominalQuota": "64Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "team-a", "namespace": "ns"},
        "spec": {"clusterQueue": "cq"},
    },
]


async def _the_workload(cluster: Harness, written: str) -> dict[str, Any]:
    """The Workload the status writer made for j1, once its annotation says ``written``."""
    async with asyncio.timeout(10):
        while True:
            for (resource, namespace, _), obj in list(cluster.kmock.objects.items()):
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                if (resource, namespace) == (WORKLOADS_KEY, "ns") and annotations.get(
                    ACTIVE_ANNOTATION
                ) == written:
                    return dict(obj)
            await asyncio.sleep(0.05)


async def test_kubectl_kueue_stop_and_resume_on_the_workload(
    harness: Harness,  # noqa: F811
    nats_url: str,
    tmp_path: Path,
) -> None:
    """spec.active false patched on the Workload: the watcher publishes SetWorkloadActive,
    admission evicts (Deactivated) and the Job is suspended, and Berth writes its own
    spec.active back; true: admitted and started again. One command per change."""
    config = await harness.bus.kv(CONFIG_BUCKET)
    for document in CONFIG:
        obj = parse_object(document)
        await config.put(object_key(obj), encode_object(obj))
    harness.kmock.objects[WORKLOADS_KEY, "zz", "placeholder"] = {"metadata": {"name": "p"}}
    job = labelled_job()
    job["spec"]["suspend"] = True
    harness.kmock.objects[JOBS_KEY, "ns", "j1"] = job
    stream = Harness(harness.kmock, harness.bus, harness.runtime)  # every event, not only facts
    stream._subscription = await harness.bus.replay_subscription(["berth.>"])  # type: ignore[attr-defined]
    admission_bus = await Bus.connect(nats_url, source="admission", auth=bus_auth(nats_url))
    runtime = Runtime(name="admission", bus=admission_bus, data_dir=str(tmp_path / "admission"))
    admission = asyncio.create_task(AdmissionService(runtime).run())
    try:
        async with asyncio.timeout(10):
            await runtime.ready.wait()
        task = await start(harness)
        await stream.wait_for(lambda e: isinstance(e, WorkloadStarted) and e.generation == 1)
        workload = await _the_workload(harness, "true")
        path = (
            f"/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/{workload['metadata']['name']}"
        )

        await harness.api("PATCH", path, {"spec": {"active": False}})  # kubectl kueue stop
        eviction = await stream.wait_for(lambda e: isinstance(e, EvictionRequested))
        assert isinstance(eviction, EvictionRequested) and eviction.reason == "Deactivated"
        await stream.wait_for(lambda e: isinstance(e, WorkloadEvicted))
        assert harness.kmock.objects[JOBS_KEY, "ns", "j1"]["spec"]["suspend"] is True
        written = await _the_workload(harness, "false")  # Berth's own spec.active, written
        assert written["spec"]["active"] is False

        await harness.api("PATCH", path, {"spec": {"active": True}})  # kubectl kueue resume
        await stream.wait_for(lambda e: isinstance(e, WorkloadStarted) and e.generation == 2)
        await _the_workload(harness, "true")
        commands = [(e.source, e.active) for e in stream.events if isinstance(e, SetWorkloadActive)]
        assert commands == [("watcher", False), ("watcher", True)], commands
        await stop(harness, task)
    finally:
        runtime.stopping.set()
        async with asyncio.timeout(10):
            await admission
        await runtime.cancel_tasks(grace=1)
        await admission_bus.close()


WORKLOADS_IN_BATCH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/batch/workloads"
# (why, the API server's answer to listing Workloads, the permission said missing, GETs made)
REFUSALS = [
    (
        "no RBAC for Workloads there (e.g. every namespace managed without deploy/cluster-wide):"
        " said once, naming the permission, not retried; synced, so the watcher becomes ready",
        403,
        ["list, watch workloads.kueue.x-k8s.io in namespace batch"],
        1,
    ),
    (
        "Kueue's CRDs absent: nothing is missing; listed as absent (the probe, then the list)",
        404,
        [],
        2,
    ),
]


@pytest.mark.parametrize(
    ("why", "status", "missing", "gets"), REFUSALS, ids=[r[0][:40] for r in REFUSALS]
)
async def test_a_refused_workload_list_is_said_once_and_holds_nothing_up(
    kmock: km.KubernetesEmulator,
    watcher_bus: Bus,
    why: str,
    status: int,
    missing: list[str],
    gets: int,
) -> None:
    """The follower of spec.active, refused its list of Workloads, warns once with the
    permission it lacks and counts as synced instead of retrying for ever (which kept the
    whole watcher from becoming ready)."""
    kmock[WORKLOADS_IN_BATCH] << status << {"kind": "Status", "apiVersion": "v1", "code": status}
    client = KubeClient.for_host(str(kmock.url).rstrip("/"))
    synced = asyncio.Event()
    with captured_logs(active) as logs:
        follow = ActiveFollower(watcher_bus).follow(
            client, WORKLOADS, namespace="batch", settings=FAST, synced=synced
        )
        task = asyncio.create_task(follow)
        try:
            await asyncio.wait_for(synced.wait(), 10)  # never synced on the old code
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
    warned = [line["missing"] for line in logs if line["event"] == "workloads_not_followed"]
    assert warned == missing, why
    made = [r for r in kmock if r.method == "GET" and r.url.path == WORKLOADS_IN_BATCH]
    assert len(made) == gets, why
