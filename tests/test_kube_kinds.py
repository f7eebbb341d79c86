"""The Kubernetes backend for every other kind: held as Kueue holds it (a suspend field, or
scheduling gates on the pods), released and stopped the same way; kmock as the API server."""

from __future__ import annotations

import copy
from typing import Any

import kmock as km
import pytest

from services.watcher.kube.creating import manifest
from services.watcher.kube.patching import (
    ADMISSION_GATE,
    Delete,
    Patch,
    admit_plan,
    evict_plan,
    suspend_plan,
)
from services.watcher.kube.reading import finish_outcome
from services.watcher.kube.webhook import mutations
from shared.events import (
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
)
from tests.test_kube_backend import Harness, harness, start, stop  # noqa: F401

_POD: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
_LABELS = {"kueue.x-k8s.io/queue-name": "q"}


def _meta(name: str = "w") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "labels": dict(_LABELS),
    }


def jobset() -> dict[str, Any]:
    job = {"parallelism": 2, "template": {"spec": copy.deepcopy(_POD)}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(),
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": job}},
                {"name": "driver", "template": {"spec": copy.deepcopy(job)}},
            ]
        },
    }


def pytorchjob() -> dict[str, Any]:
    replica = {"replicas": 1, "template": {"spec": copy.deepcopy(_POD)}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _meta(),
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": copy.deepcopy(replica)}},
    }


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(),
        "spec": {"replicas": 2, "template": {"spec": copy.deepcopy(_POD)}},
    }


def apply_patch(obj: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(obj) if isinstance(obj, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_patch(result.get(key), value)
    return result


def converge_locally(obj: dict[str, Any], plan: Any) -> dict[str, Any] | None:
    for _ in range(8):
        step = plan(obj)
        if step is None:
            return obj
        if isinstance(step, Delete):
            return None
        assert isinstance(step, Patch) and not step.subresource, step
        obj = apply_patch(obj, step.body)
    raise AssertionError("no stable state")


def assignment(pod_set: str) -> FlavorAssignment:
    return FlavorAssignment(
        pod_set=pod_set, count=1, flavors={"cpu": "spot"}, usage={}, node_labels={"pool": "spot"}
    )


HELD: list[tuple[str, dict[str, Any], list[tuple[str, ...]], str]] = [
    ("a JobSet by spec.suspend", jobset(), [("spec", "suspend")], "suspend"),
    (
        "a Kubeflow job by spec.runPolicy.suspend",
        pytorchjob(),
        [("spec", "runPolicy", "suspend")],
        "suspend",
    ),
    (
        "a Deployment by a gate on its pod template",
        deployment(),
        [("spec", "template", "spec", "schedulingGates")],
        "gate",
    ),
]


@pytest.mark.parametrize(("reason", "obj", "paths", "how"), HELD, ids=[h[0] for h in HELD])
def test_created_and_webhooked_held(
    reason: str, obj: dict[str, Any], paths: list[Any], how: str
) -> None:
    """What Berth creates, and what the webhook makes of a user's object, is held (see id)."""
    body = manifest(obj, requested_uid="r", image="busybox")
    for path in paths:
        value: Any = body
        for step in path:
            value = value[step]
        assert value == ([{"name": ADMISSION_GATE}] if how == "gate" else True), reason
    operations = mutations(copy.deepcopy(obj))
    assert len(operations) == 1 and operations[0]["op"] == "add", operations
    mutated = apply_json_patch(copy.deepcopy(obj), operations)
    assert suspend_plan(mutated) is None  # nothing left to suspend


def apply_json_patch(obj: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    for operation in operations:
        *parents, last = operation["path"].strip("/").split("/")
        target: Any = obj
        for step in parents:
            target = target[int(step)] if isinstance(target, list) else target[step]
        if last == "-":
            target.append(operation["value"])
        else:
            target[last] = operation["value"]
    return obj


def test_jobset_admission_unsuspends_and_injects_every_replicated_job() -> None:
    """Admission: spec.suspend false, each replicated job's template gets its pod set's
    flavor; eviction: suspended again and the templates restored (no status step: only a
    Job has a startTime to clear)."""
    obj = jobset()
    obj["spec"]["suspend"] = True
    admitted = converge_locally(obj, admit_plan(1, [assignment("workers"), assignment("driver")]))
    assert admitted is not None and admitted["spec"]["suspend"] is False
    for replicated in admitted["spec"]["replicatedJobs"]:
        assert replicated["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
            "pool": "spot"
        }
    evicted = converge_locally(admitted, evict_plan(1))
    assert evicted is not None and evicted["spec"]["suspend"] is True
    assert evicted["spec"]["replicatedJobs"] == obj["spec"]["replicatedJobs"]


def test_kubeflow_admission_uses_run_policy() -> None:
    """A PyTorchJob is released through spec.runPolicy.suspend, per replica type's flavor."""
    obj = manifest(pytorchjob(), requested_uid="r", image="x")
    admitted = converge_locally(obj, admit_plan(1, [assignment("master")]))
    assert admitted is not None and admitted["spec"]["runPolicy"] == {"suspend": False}
    specs = admitted["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"pool": "spot"}
    assert "nodeSelector" not in specs["Worker"]["template"]["spec"]
    evicted = converge_locally(admitted, evict_plan(1))
    assert evicted is not None and evicted["spec"]["runPolicy"] == {"suspend": True}


def test_a_gated_kind_is_never_rolled() -> None:
    """A Deployment's admission and eviction change only Berth's annotations, never its
    template (which would roll its pods): gating.py acts on the pods."""
    obj = manifest(deployment(), requested_uid="r", image="x")
    admitted = converge_locally(obj, admit_plan(1, [assignment("main")]))
    assert admitted is not None and admitted["spec"] == obj["spec"]
    assert '"pool": "spot"' in admitted["metadata"]["annotations"]["berth.dev/admission"]
    evicted = converge_locally(admitted, evict_plan(1))
    assert evicted is not None and evicted["spec"] == obj["spec"]
    assert evicted["metadata"]["annotations"]["berth.dev/evicted-generation"] == "1"


FINISHED: list[tuple[str, str, dict[str, Any], tuple[bool, str] | None]] = [
    (
        "a JobSet's Completed condition",
        "JobSet",
        {"conditions": [{"type": "Completed", "status": "True"}]},
        (True, ""),
    ),
    (
        "a JobSet's Failed condition",
        "JobSet",
        {"conditions": [{"type": "Failed", "status": "True", "message": "x"}]},
        (False, "x"),
    ),
    (
        "a Kubeflow job's Succeeded condition",
        "PyTorchJob",
        {"conditions": [{"type": "Succeeded", "status": "True"}]},
        (True, ""),
    ),
    ("an AppWrapper's phase", "AppWrapper", {"phase": "Failed"}, (False, "Failed")),
    ("a RayCluster runs until deleted", "RayCluster", {"state": "ready"}, None),
    (
        "a Deployment runs until deleted",
        "Deployment",
        {"conditions": [{"type": "Available", "status": "True"}]},
        None,
    ),
]


@pytest.mark.parametrize(
    ("reason", "kind", "status", "outcome"), FINISHED, ids=[f[0] for f in FINISHED]
)
def test_finish_as_kueue_reads_it(
    reason: str, kind: str, status: dict[str, Any], outcome: Any
) -> None:
    """When each kind has run to its end (see the id)."""
    assert finish_outcome(kind, {"kind": kind, "status": status}) == outcome, reason


JOBSETS_KEY = km.resource("jobset.x-k8s.io/v1alpha2/jobsets")
PODS_KEY = km.resource("v1/pods")


async def test_a_jobset_on_kmock(harness: Harness) -> None:  # noqa: F811
    """A running JobSet is suspended and reported with a pod set per replicated job;
    admitted it runs, evicted it is suspended, Completed it is finished."""
    harness.kmock.objects[JOBSETS_KEY, "ns", "w"] = jobset()
    task = await start(harness)
    submitted = await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    assert isinstance(submitted, WorkloadSubmitted) and submitted.kind == "JobSet"
    assert [(p.name, p.count) for p in submitted.pod_sets] == [("workers", 4), ("driver", 2)]
    assert harness.kmock.objects[JOBSETS_KEY, "ns", "w"]["spec"]["suspend"] is True
    ref = submitted.workload
    await harness.bus.publish(_admitted(ref, [assignment("workers"), assignment("driver")]))
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    assert harness.kmock.objects[JOBSETS_KEY, "ns", "w"]["spec"]["suspend"] is False
    await harness.bus.publish(_evict(ref))
    await harness.wait_for(lambda e: isinstance(e, WorkloadEvicted))
    assert harness.kmock.objects[JOBSETS_KEY, "ns", "w"]["spec"]["suspend"] is True
    await harness.api(
        "PATCH",
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/w",
        {"status": {"conditions": [{"type": "Completed", "status": "True"}]}},
    )
    finished = await harness.wait_for(lambda e: isinstance(e, WorkloadFinished))
    assert isinstance(finished, WorkloadFinished) and finished.succeeded
    await stop(harness, task)


def _member(name: str, cpu: str) -> dict[str, Any]:
    metadata = _meta(name)
    metadata["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    metadata["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    spec = copy.deepcopy(_POD)
    spec["containers"][0]["resources"]["requests"]["cpu"] = cpu
    spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


async def test_a_pod_group_on_kmock(harness: Harness) -> None:  # noqa: F811
    """Two gated Pods of one group are one workload `g`: admitted, both are ungated with
    their shape's flavor; evicted, both are deleted, and the group with them."""
    harness.kmock.objects[PODS_KEY, "ns", "g-0"] = _member("g-0", "1")
    harness.kmock.objects[PODS_KEY, "ns", "g-1"] = _member("g-1", "2")
    task = await start(harness)
    submitted = await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    assert isinstance(submitted, WorkloadSubmitted)
    assert submitted.kind == "PodGroup" and submitted.workload.name == "g"
    assert sorted(p.count for p in submitted.pod_sets) == [1, 1]
    assert not [
        e for e in harness.events if isinstance(e, WorkloadSubmitted) and e.workload.name != "g"
    ]
    ref = submitted.workload
    await harness.bus.publish(_admitted(ref, [assignment(p.name) for p in submitted.pod_sets]))
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    for name in ("g-0", "g-1"):
        pod = harness.kmock.objects[PODS_KEY, "ns", name]
        assert not pod["spec"].get("schedulingGates") and pod["spec"]["nodeSelector"] == {
            "pool": "spot"
        }
    await harness.bus.publish(_evict(ref))
    await harness.wait_for(lambda e: isinstance(e, WorkloadEvicted))
    deleted = await harness.wait_for(lambda e: isinstance(e, WorkloadDeleted))
    assert deleted.workload.name == "g"
    await stop(harness, task)


async def test_a_deployment_on_kmock(harness: Harness) -> None:  # noqa: F811
    """A Deployment's gated pod (its ReplicaSet's) is ungated at admission and deleted at
    eviction; the Deployment itself keeps its template."""
    obj = manifest(deployment(), requested_uid="r", image="x")
    obj["metadata"]["uid"] = "uid-w"
    harness.kmock.objects[km.resource("apps/v1/deployments"), "ns", "w"] = obj
    pod = _member("w-abc-1", "1")
    del pod["metadata"]["annotations"], pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
    pod["metadata"]["labels"]["pod-template-hash"] = "abc"
    pod["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "name": "w-abc", "uid": "rs", "controller": True}
    ]
    harness.kmock.objects[PODS_KEY, "ns", "w-abc-1"] = pod
    task = await start(harness)
    submitted = await harness.wait_for(lambda e: isinstance(e, WorkloadSubmitted))
    assert isinstance(submitted, WorkloadSubmitted) and submitted.kind == "Deployment"
    await harness.bus.publish(_admitted(submitted.workload, [assignment("main")]))
    await harness.wait_for(lambda e: isinstance(e, WorkloadStarted))
    ungated = harness.kmock.objects[PODS_KEY, "ns", "w-abc-1"]
    assert not ungated["spec"].get("schedulingGates")
    assert ungated["spec"]["nodeSelector"] == {"pool": "spot"}
    await harness.bus.publish(_evict(submitted.workload))
    await harness.wait_for(lambda e: isinstance(e, WorkloadEvicted))
    deletes = [r.url.path for r in harness.kmock if r.method == "DELETE"]
    assert deletes == ["/api/v1/namespaces/ns/pods/w-abc-1"]
    deployment_now = harness.kmock.objects[km.resource("apps/v1/deployments"), "ns", "w"]
    assert deployment_now["spec"] == obj["spec"]  # never rolled
    await stop(harness, task)


def _admitted(ref: WorkloadRef, assignments: list[FlavorAssignment]) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        source="admission",
        workload=ref,
        cluster_queue="cq",
        local_queue="q",
        priority=0,
        assignments=assignments,
        generation=1,
    )


def _evict(ref: WorkloadRef) -> EvictionRequested:
    return EvictionRequested(
        source="preemption", workload=ref, cluster_queue="cq", generation=1, reason="Preempted"
    )
