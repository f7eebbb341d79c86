"""Admission and eviction patches against kmock: exact bodies, conditional writes, idempotence."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import kmock as km
import pytest

from services.watcher.kube.api import KubeClient
from services.watcher.kube.errors import KubeConflict
from services.watcher.kube.patching import (
    ADMISSION_GATE,
    JOBS,
    PODS,
    RAYJOBS,
    admit_plan,
    converge,
    evict_plan,
)
from shared.events import FlavorAssignment, Toleration, WorkloadRef

ASSIGNMENT = FlavorAssignment(
    pod_set="main",
    count=1,
    flavors={"cpu": "spot"},
    usage={"cpu": 1000},
    node_labels={"cloud/pool": "spot"},
    tolerations=[Toleration(key="spot", operator="Exists", effect="NoSchedule")],
)


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "nodeSelector": {"disk": "ssd"},
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
            **spec,
        },
    }


REF = WorkloadRef(namespace="ns", name="j1", uid="u1")


@pytest.fixture
async def client(kmock: kmock.KubernetesEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient.for_host(str(kmock.url).rstrip("/")) as api:
        yield api


def patches(handler: kmock.RawHandler) -> list[tuple[str, Any]]:
    return [(req.url.path, req.data) for req in handler if req.method == "PATCH"]


async def test_admit_job_sends_one_conditional_patch(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """Admitting a suspended Job unsuspends it and injects the flavor, stating the expected RV."""
    kmock.objects[JOBS_KEY, "ns", "j1"] = job()
    final = await converge(client, JOBS, REF, admit_plan(1, [ASSIGNMENT]))
    assert patches(kmock) == [
        (
            "/apis/batch/v1/namespaces/ns/jobs/j1",
            {
                "metadata": {
                    "resourceVersion": "7",
                    "annotations": {
                        "berth.dev/admitted-generation": "1",
                        "berth.dev/pod-set-info": json.dumps(
                            {"main": {"nodeSelector": {"disk": "ssd"}, "tolerations": None}},
                            sort_keys=True,
                        ),
                    },
                },
                "spec": {
                    "suspend": False,
                    "template": {
                        "spec": {
                            "nodeSelector": {"disk": "ssd", "cloud/pool": "spot"},
                            "tolerations": [
                                {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
                            ],
                        }
                    },
                },
            },
        )
    ]
    assert final is not None and final["spec"]["suspend"] is False
    assert [req.headers["Content-Type"] for req in kmock if req.method == "PATCH"] == [
        "application/merge-patch+json"
    ]


async def test_redelivered_admission_does_not_patch(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A second delivery of the same admission reads the object, finds it done, writes nothing."""
    kmock.objects[JOBS_KEY, "ns", "j1"] = job()
    await converge(client, JOBS, REF, admit_plan(1, [ASSIGNMENT]))
    await converge(client, JOBS, REF, admit_plan(1, [ASSIGNMENT]))
    assert len(patches(kmock)) == 1


async def test_evict_job_suspends_clears_start_time_and_restores(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """Eviction suspends, clears status.startTime via /status, then restores the template."""
    kmock.objects[JOBS_KEY, "ns", "j1"] = job()
    await converge(client, JOBS, REF, admit_plan(1, [ASSIGNMENT]))
    await client.patch(
        JOBS, namespace="ns", name="j1", body={"status": {"startTime": "2025-01-01T00:00:00Z"}}
    )
    final = await converge(client, JOBS, REF, evict_plan(1))
    sent = patches(kmock)[2:]
    assert [path for path, _ in sent] == [
        "/apis/batch/v1/namespaces/ns/jobs/j1",
        "/apis/batch/v1/namespaces/ns/jobs/j1/status",
        "/apis/batch/v1/namespaces/ns/jobs/j1",
    ]
    assert sent[0][1]["spec"] == {"suspend": True}
    assert sent[0][1]["metadata"]["annotations"] == {"berth.dev/evicted-generation": "1"}
    assert sent[1][1]["status"] == {"startTime": None}
    assert sent[2][1]["spec"] == {
        "template": {
            "spec": {"nodeSelector": {"cloud/pool": None, "disk": "ssd"}, "tolerations": None}
        }
    }
    assert final is not None
    assert final["spec"]["template"] == job()["spec"]["template"]
    assert final["spec"]["suspend"] is True
    assert "berth.dev/pod-set-info" not in final["metadata"]["annotations"]
    # A redelivered eviction finds nothing left to do.
    await converge(client, JOBS, REF, evict_plan(1))
    assert len(patches(kmock)) == 5


async def test_pod_admission_removes_gate_and_eviction_deletes(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A Pod is ungated (other gates kept) and injected; evicting it deletes it conditionally."""
    kmock.objects[PODS_KEY, "ns", "p1"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "ns", "uid": "pu", "resourceVersion": "3"},
        "spec": {
            "schedulingGates": [{"name": ADMISSION_GATE}, {"name": "other"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    ref = WorkloadRef(namespace="ns", name="p1", uid="pu")
    final = await converge(client, PODS, ref, admit_plan(2, [ASSIGNMENT]))
    [(_, body)] = patches(kmock)
    assert body["spec"] == {
        "nodeSelector": {"cloud/pool": "spot"},
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
        "schedulingGates": [{"name": "other"}],
    }
    assert final is not None
    assert await converge(client, PODS, ref, evict_plan(2)) is None
    [delete] = [req for req in kmock if req.method == "DELETE"]
    assert delete.data["preconditions"] == {"uid": "pu", "resourceVersion": "3"}


async def test_rayjob_admission_injects_every_group(
    kmock: kmock.KubernetesEmulator, client: KubeClient
) -> None:
    """A RayJob's head and each worker group get their own pod set's flavor."""
    pod = {"containers": [{"name": "c", "image": "ray"}]}
    kmock.objects[RAY_KEY, "ns", "r1"] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r1", "namespace": "ns", "uid": "ru", "resourceVersion": "1"},
        "spec": {
            "suspend": True,
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": copy.deepcopy(pod)}},
                "workerGroupSpecs": [
                    {"groupName": "gpu", "replicas": 2, "template": {"spec": copy.deepcopy(pod)}}
                ],
            },
        },
    }
    gpu = FlavorAssignment(
        pod_set="gpu", count=2, flavors={}, usage={}, node_labels={"gpu": "a100"}
    )
    ref = WorkloadRef(namespace="ns", name="r1", uid="ru")
    final = await converge(client, RAYJOBS, ref, admit_plan(1, [gpu]))
    assert final is not None
    cluster = final["spec"]["rayClusterSpec"]
    assert cluster["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert "nodeSelector" not in cluster["headGroupSpec"]["template"]["spec"]
    assert final["spec"]["suspend"] is False
    await converge(client, RAYJOBS, ref, evict_plan(1))  # suspend
    final = await converge(client, RAYJOBS, ref, evict_plan(1))
    assert final is not None
    assert final["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"] == pod


@pytest.mark.kmock(cls=kmock.RawHandler)
async def test_conflict_is_retried_after_rereading(kmock: kmock.RawHandler) -> None:
    """kmock has no resourceVersion checks: a scripted 409 proves we re-read and re-decide."""
    state = {"obj": job()}
    conflicts = [True]

    def get(_: kmock.Request) -> dict[str, Any]:
        return state["obj"]

    def patch(request: kmock.Request) -> Any:
        if conflicts and conflicts.pop():
            # Someone else wrote meanwhile: the object moved on to resourceVersion 8.
            state["obj"] = job()
            state["obj"]["metadata"]["resourceVersion"] = "8"
            return km.Response(status=409, payload={"kind": "Status", "code": 409})
        state["obj"]["metadata"]["annotations"] = request.data["metadata"]["annotations"]
        return state["obj"]

    kmock["get /apis/batch/v1/namespaces/ns/jobs/j1"] << get
    kmock["patch /apis/batch/v1/namespaces/ns/jobs/j1"] << patch
    async with KubeClient.for_host(str(kmock.url).rstrip("/")) as client:
        await converge(client, JOBS, REF, admit_plan(1, [ASSIGNMENT]))
    sent = [req.data["metadata"]["resourceVersion"] for req in kmock if req.method == "PATCH"]
    assert sent == ["7", "8"]
    assert len([req for req in kmock if req.method == "GET"]) == 3


@pytest.mark.kmock(cls=kmock.RawHandler)
async def test_endless_conflicts_give_up(kmock: kmock.RawHandler) -> None:
    """A write that conflicts every time fails with KubeConflict rather than looping forever."""
    kmock["get /apis/batch/v1/namespaces/ns/jobs/j1"] << (lambda: job())
    kmock["patch /apis/batch/v1/namespaces/ns/jobs/j1"] << (
        lambda: km.Response(status=409, payload={"kind": "Status", "code": 409})
    )
    async with KubeClient.for_host(str(kmock.url).rstrip("/")) as client:
        with pytest.raises(KubeConflict):
            await converge(client, JOBS, REF, admit_plan(1, [ASSIGNMENT]))


JOBS_KEY = kmock.resource("batch/v1/jobs")
PODS_KEY = kmock.resource("v1/pods")
RAY_KEY = kmock.resource("ray.io/v1/rayjobs")
