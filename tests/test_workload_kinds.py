"""Each workload kind's pod sets, as Kueue computes them (shared/workload_kinds.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.pod_groups import group_object, pod_group
from shared.workload_kinds import KINDS, resource_name
from shared.workloads import WorkloadError, workload_spec


def _pod(cpu: str = "1", **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **extra}


def _template(cpu: str = "1") -> dict[str, Any]:
    return {"spec": _pod(cpu)}


def _obj(api: str, kind: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "w", **metadata}, "spec": spec}


def _replicas(replicas: int | None, cpu: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": _template(cpu)}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


CASES: list[tuple[str, dict[str, Any], list[tuple[str, int, int | None]]]] = [
    (
        "a Job: min(parallelism, completions) pods",
        _obj("batch/v1", "Job", {"parallelism": 4, "completions": 3, "template": _template()}),
        [("main", 3, None)],
    ),
    (
        "a Job with Kueue's job-min-parallelism: partial admission down to it",
        _obj(
            "batch/v1",
            "Job",
            {"parallelism": 5, "template": _template()},
            annotations={"kueue.x-k8s.io/job-min-parallelism": "2"},
        ),
        [("main", 5, 2)],
    ),
    ("a Pod: one pod", _obj("v1", "Pod", _pod()), [("main", 1, None)]),
    (
        "a JobSet: one pod set per replicatedJob, replicas x parallelism",
        _obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 3,
                        "template": {"spec": {"parallelism": 2, "template": _template()}},
                    },
                    {"name": "driver", "template": {"spec": {"template": _template("2")}}},
                ]
            },
        ),
        [("workers", 6, None), ("driver", 1, None)],
    ),
    (
        "a PyTorchJob: Master then Worker, lower-cased",
        _obj(
            "kubeflow.org/v1",
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Worker": _replicas(3), "Master": _replicas(1)}},
        ),
        [("master", 1, None), ("worker", 3, None)],
    ),
    (
        "a TFJob: Kueue's order Chief, Master, PS, Worker, Eval; replicas default 1",
        _obj(
            "kubeflow.org/v1",
            "TFJob",
            {
                "tfReplicaSpecs": {
                    "Worker": _replicas(2),
                    "PS": _replicas(None),
                    "Chief": _replicas(1),
                }
            },
        ),
        [("chief", 1, None), ("ps", 1, None), ("worker", 2, None)],
    ),
    (
        "an XGBoostJob",
        _obj(
            "kubeflow.org/v1",
            "XGBoostJob",
            {"xgbReplicaSpecs": {"Master": _replicas(1), "Worker": _replicas(2)}},
        ),
        [("master", 1, None), ("worker", 2, None)],
    ),
    (
        "a PaddleJob",
        _obj("kubeflow.org/v1", "PaddleJob", {"paddleReplicaSpecs": {"Worker": _replicas(2)}}),
        [("worker", 2, None)],
    ),
    (
        "a JAXJob",
        _obj("kubeflow.org/v1", "JAXJob", {"jaxReplicaSpecs": {"Worker": _replicas(4)}}),
        [("worker", 4, None)],
    ),
    (
        "an MPIJob (v2beta1): Launcher then Worker",
        _obj(
            "kubeflow.org/v2beta1",
            "MPIJob",
            {"mpiReplicaSpecs": {"Worker": _replicas(2), "Launcher": _replicas(1)}},
        ),
        [("launcher", 1, None), ("worker", 2, None)],
    ),
    (
        "a RayCluster: head, then worker groups of replicas x numOfHosts, minReplicas too",
        _obj(
            "ray.io/v1",
            "RayCluster",
            {
                "headGroupSpec": {"template": _template()},
                "workerGroupSpecs": [
                    {
                        "groupName": "g",
                        "replicas": 2,
                        "minReplicas": 1,
                        "numOfHosts": 2,
                        "template": _template(),
                    },
                    {"groupName": "idle", "replicas": 0, "template": _template()},
                ],
            },
        ),
        [("head", 1, None), ("g", 4, 2)],
    ),
    (
        "a RayJob: its rayClusterSpec as a RayCluster",
        _obj(
            "ray.io/v1",
            "RayJob",
            {
                "entrypoint": "python x.py",
                "rayClusterSpec": {
                    "headGroupSpec": {"template": _template()},
                    "workerGroupSpecs": [
                        {"groupName": "gpu", "replicas": 2, "template": _template()}
                    ],
                },
            },
        ),
        [("head", 1, None), ("gpu", 2, None)],
    ),
    (
        "a LeaderWorkerSet with a leader: leader x replicas, worker x replicas x (size - 1)",
        _obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {
                "replicas": 2,
                "leaderWorkerTemplate": {
                    "size": 3,
                    "leaderTemplate": _template(),
                    "workerTemplate": _template(),
                },
            },
        ),
        [("leader", 2, None), ("worker", 4, None)],
    ),
    (
        "a LeaderWorkerSet without a leader: main x replicas x size",
        _obj(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {"leaderWorkerTemplate": {"size": 2, "workerTemplate": _template()}},
        ),
        [("main", 2, None)],
    ),
    (
        "a Deployment: one pod group of replicas pods",
        _obj("apps/v1", "Deployment", {"replicas": 3, "template": _template("100m")}),
        [("main", 3, None)],
    ),
    (
        "a StatefulSet: one pod group of replicas pods (default 1)",
        _obj("apps/v1", "StatefulSet", {"template": _template()}),
        [("main", 1, None)],
    ),
    (
        "an AppWrapper with declared podSets: <name>-<index>, replicas each",
        _obj(
            "workload.codeflare.dev/v1beta2",
            "AppWrapper",
            {
                "components": [
                    {
                        "podSets": [{"path": "template.spec.template", "replicas": 3}],
                        "template": {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "spec": {"template": _template()},
                        },
                    }
                ]
            },
        ),
        [("w-0", 3, None)],
    ),
    (
        "an AppWrapper of a PyTorchJob without podSets: its kind's pod sets, renamed",
        _obj(
            "workload.codeflare.dev/v1beta2",
            "AppWrapper",
            {
                "components": [
                    {
                        "template": {
                            "apiVersion": "kubeflow.org/v1",
                            "kind": "PyTorchJob",
                            "spec": {
                                "pytorchReplicaSpecs": {
                                    "Master": _replicas(1),
                                    "Worker": _replicas(2),
                                }
                            },
                        }
                    }
                ]
            },
        ),
        [("w-0", 1, None), ("w-1", 2, None)],
    ),
]


@pytest.mark.parametrize(("reason", "obj", "expected"), CASES, ids=[c[0] for c in CASES])
def test_pod_sets_per_kind(reason: str, obj: dict[str, Any], expected: list[Any]) -> None:
    """Each kind's pod sets: names, counts and partial-admission minimums (see the id)."""
    sets = workload_spec(obj).pod_sets
    assert [(s.name, s.count, s.min_count) for s in sets] == expected, reason


def test_every_kind_has_a_case_and_a_stated_mapping() -> None:
    """Every submittable kind is tested above and its mapping function says its rule."""
    tested = {obj["kind"] for _, obj, _ in CASES}
    for name, kind in KINDS.items():
        assert kind.templates.__doc__, name
        if kind.submittable:
            assert name in tested, name


def test_pod_set_paths_point_at_the_pod_specs() -> None:
    """A template's path leads from the object's root to its pod spec (what kube patches)."""
    for _, obj, _ in CASES:
        for template in workload_spec(obj).templates:
            found: Any = obj
            for step in template.path:
                found = found[step]
            assert found is template.spec, (obj["kind"], template.path)


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "a replica type the kind does not have",
        _obj("kubeflow.org/v1", "PyTorchJob", {"pytorchReplicaSpecs": {"Chief": _replicas(1)}}),
        "`spec.pytorchReplicaSpecs.Chief` is not a replica type of PyTorchJob (known: Master, Worker)",
    ),
    (
        "a JobSet without replicated jobs",
        _obj("jobset.x-k8s.io/v1alpha2", "JobSet", {}),
        "`spec.replicatedJobs` must list at least one replicated job",
    ),
    (
        "a JobSet whose job has no pod template",
        _obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"replicatedJobs": [{"name": "a", "template": {"spec": {}}}]},
        ),
        "`spec.replicatedJobs[0].template.spec.template.spec` is missing",
    ),
    (
        "two replicated jobs of one name",
        _obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {
                "replicatedJobs": [{"name": "a", "template": {"spec": {"template": _template()}}}]
                * 2
            },
        ),
        "`spec.replicatedJobs[1].name` 'a' must be a unique, non-empty string",
    ),
    (
        "a JobSet in an apiVersion that does not have it",
        _obj("jobset.x-k8s.io/v1", "JobSet", {}),
        "JobSet does not exist in apiVersion 'jobset.x-k8s.io/v1' (use jobset.x-k8s.io/v1alpha2)",
    ),
    (
        "an MPIJob in kubeflow.org/v1 (Kueue takes v2beta1)",
        _obj("kubeflow.org/v1", "MPIJob", {}),
        "MPIJob does not exist in apiVersion 'kubeflow.org/v1'",
    ),
    (
        "an AppWrapper component of an unknown kind without podSets",
        _obj(
            "workload.codeflare.dev/v1beta2",
            "AppWrapper",
            {"components": [{"template": {"kind": "Service"}}]},
        ),
        "`spec.components[0].podSets` is needed: Berth cannot find the pods of a 'Service'",
    ),
    (
        "an AppWrapper podSet path that leads nowhere",
        _obj(
            "workload.codeflare.dev/v1beta2",
            "AppWrapper",
            {
                "components": [
                    {"podSets": [{"path": "template.spec.nope"}], "template": {"spec": {}}}
                ]
            },
        ),
        "`spec.components[0].podSets[0].path` leads nowhere (no 'nope')",
    ),
    (
        "a Deployment of 0 replicas holds nothing to admit",
        _obj("apps/v1", "Deployment", {"replicas": 0, "template": _template()}),
        "Deployment has no pods to run",
    ),
    (
        "a bad quantity deep inside a JobSet names its path",
        _obj(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {
                "replicatedJobs": [
                    {"name": "a", "template": {"spec": {"template": _template("lots")}}}
                ]
            },
        ),
        "`spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.requests.cpu`",
    ),
    (
        "a job-min-parallelism not below the parallelism",
        _obj(
            "batch/v1",
            "Job",
            {"parallelism": 2, "template": _template()},
            annotations={"kueue.x-k8s.io/job-min-parallelism": "2"},
        ),
        "`metadata.annotations.kueue.x-k8s.io/job-min-parallelism` must be a whole number from 1 to 1",
    ),
    (
        "a PodGroup is built by the watcher, not a kind with a spec of its own",
        _obj("berth.dev/v1", "PodGroup", {}),
        "`spec.pods` must list the group's pods",
    ),
]


@pytest.mark.parametrize(("reason", "obj", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_objects_name_the_field(reason: str, obj: dict[str, Any], message: str) -> None:
    """A malformed object of a known kind is refused in one line naming the field."""
    with pytest.raises(WorkloadError) as caught:
        workload_spec(obj)
    assert message in str(caught.value), reason
    assert "\n" not in str(caught.value)


def _member(name: str, cpu: str, uid: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": uid,
            "creationTimestamp": f"2026-01-01T00:00:0{uid}Z",
            "labels": {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/pod-group-name": "g"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3", **annotations},
        },
        "spec": _pod(cpu),
    }


def test_a_pod_group_is_one_workload_with_a_pod_set_per_shape() -> None:
    """Three pods, two shapes: two pod sets named by shape hash, counts 2 and 1; the group
    workload is named after the group, its uid fixed by its members, its labels the first's."""
    members = [_member("b", "1", "2"), _member("a", "1", "1"), _member("c", "3", "3")]
    assert pod_group(members[0]) == ("g", 3)
    group = group_object("team", "g", members)
    assert (
        group["metadata"]["name"] == "g"
        and group["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    )
    assert group["metadata"]["creationTimestamp"] == "2026-01-01T00:00:01Z"
    assert group == group_object("team", "g", list(reversed(members)))
    spec = workload_spec(group)
    assert spec.queue_name == "q"
    assert sorted(s.count for s in spec.pod_sets) == [1, 2]
    assert all(len(s.name) == 8 for s in spec.pod_sets)
    assert sum(s.requests["cpu"] * s.count for s in spec.pod_sets) == 5000


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({}, "`metadata.annotations.kueue.x-k8s.io/pod-group-total-count` is missing"),
        ({"kueue.x-k8s.io/pod-group-total-count": "0"}, "must be a positive whole number, got '0'"),
        (
            {"kueue.x-k8s.io/pod-group-total-count": "two"},
            "must be a positive whole number, got 'two'",
        ),
    ],
)
def test_a_pod_group_needs_its_size(annotations: dict[str, str], message: str) -> None:
    """A grouped Pod without a valid total count is refused, as Kueue's webhook refuses it."""
    pod = _member("a", "1", "1")
    pod["metadata"]["annotations"] = annotations
    with pytest.raises(WorkloadError, match=message):
        pod_group(pod)


def test_resource_names_are_kubectls() -> None:
    """What `berth submit` prints for each kind, as kubectl does."""
    assert [resource_name(k) for k in ("Job", "Pod", "JobSet", "PyTorchJob", "Deployment")] == [
        "job.batch",
        "pod",
        "jobset.jobset.x-k8s.io",
        "pytorchjob.kubeflow.org",
        "deployment.apps",
    ]
