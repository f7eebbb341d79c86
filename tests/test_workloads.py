"""Pod sets computed from Jobs, Pods and RayJobs as Kubernetes counts requests."""

import pytest

from shared.workloads import WorkloadError, check_identity, workload_spec


def _job(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j",
            "labels": {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": "high"},
        },
        "spec": spec,
    }


def test_seed_004_team_a_job_requests_cpu_and_gpus() -> None:
    """A limit without a request counts as the request (nvidia.com/gpu: 2 from limits)."""
    job = _job(
        template={
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "command": ["sleep", "1"],
                        "resources": {"requests": {"cpu": "7"}, "limits": {"nvidia.com/gpu": 2}},
                    }
                ]
            }
        }
    )
    spec = workload_spec(job)
    assert spec.queue_name == "q" and spec.priority_class == "high"
    assert spec.pod_sets[0].requests == {"cpu": 7000, "nvidia.com/gpu": 2000}
    assert spec.pod_sets[0].count == 1


def test_init_containers_and_overhead() -> None:
    """Per resource: max(sum of containers, largest init container) plus the pod overhead."""
    job = _job(
        parallelism=3,
        completions=2,
        template={
            "spec": {
                "containers": [
                    {"resources": {"requests": {"cpu": "1"}}},
                    {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                ],
                "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
                "overhead": {"cpu": "100m"},
            }
        },
    )
    pod_set = workload_spec(job).pod_sets[0]
    assert pod_set.count == 2  # min(parallelism, completions)
    assert pod_set.requests == {"cpu": 2100, "memory": 2**30 * 1000}


def test_rayjob_has_head_and_worker_pod_sets() -> None:
    """A RayJob is a head pod set plus one per worker group, with replicas and minReplicas."""
    pod = {"containers": [{"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}]}
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"generateName": "dev-"},
        "spec": {
            "entrypoint": "python x.py",
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": pod}},
                "workerGroupSpecs": [
                    {"groupName": "gpu", "replicas": 2, "minReplicas": 1, "template": {"spec": pod}}
                ],
            },
        },
    }
    sets = workload_spec(ray).pod_sets
    assert [(s.name, s.count, s.min_count) for s in sets] == [("head", 1, None), ("gpu", 2, 1)]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            _job(template={"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}),
            "`spec.template.spec.containers[0].resources.requests.cpu`: invalid quantity 'lots'",
        ),
        (_job(), "`spec.template.spec` is missing"),
        (
            _job(parallelism=-1, template={"spec": {"containers": [{}]}}),
            "`spec.parallelism` must be a non-negative integer",
        ),
        ({"apiVersion": "batch/v1", "kind": "CronJob"}, "unknown kind 'CronJob'"),
        ({"apiVersion": "batch/v2", "kind": "Job"}, "Job does not exist in apiVersion 'batch/v2'"),
    ],
)
def test_bad_workloads_name_the_field(obj: dict[str, object], message: str) -> None:
    """A workload that cannot be read is refused with the field at fault."""
    with pytest.raises(WorkloadError) as caught:
        workload_spec(obj)
    assert message in str(caught.value)


def _pod(**container: object) -> dict[str, object]:
    return {"spec": {"containers": [{"name": "c", **container}]}}


@pytest.mark.parametrize(
    ("obj", "message", "why"),
    [
        (_job(parallelism=0, template=_pod()), "`spec.parallelism` is 0", "a Job of no pods is never admitted"),
        (_job(template=_pod(resources={"requests": {"cpu": -1}})), "quantity -1 is negative", "a negative YAML number"),
        (_job(template=_pod(resources={"requests": {"cpu": 0.5}})), None, "0.5 cpu as a YAML number is fine"),
        (_job(template=_pod(resources={"requests": {"bad name": "1"}})), "'bad name' is not a resource name", "a resource name is a qualified name"),
        (_job(template=_pod(resources=[])), "`spec.template.spec.containers[0].resources` must be a mapping", "resources as a list"),
        (_job(template={"spec": {"containers": [{}], "initContainers": 3}}), "`spec.template.spec.initContainers` must be a list", "init containers not a list"),
        (_job(template={"spec": {"containers": [{}], "priority": 2**40}}), "must be a 32-bit integer", "priority beyond int32"),
        (_job(template=[1]), "`spec.template` must be a mapping", "template as a list"),
        ({"apiVersion": "batch/v1", "kind": "Job", "metadata": [], "spec": {}}, "`metadata` must be a mapping", "metadata as a list"),
        ({"apiVersion": "batch/v1", "kind": ["Job"]}, "unknown kind ['Job']", "an unhashable kind"),
        ({**_job(template=_pod()), "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "Team A"}}}, "'Team A': a valid label must be", "a queue label that is no label value"),
        ({**_job(template=_pod()), "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "Team_A"}}}, "kueue.x-k8s.io/queue-name 'Team_A' is not a valid name", "a label value that can name no LocalQueue"),
        ({**_job(template=_pod()), "metadata": {"labels": ["a"]}}, "`metadata.labels` must be a mapping", "labels as a list"),
        ("not a mapping", "a workload must be a mapping", "a string where an object belongs"),
    ],
)
def test_malformed_workloads_raise_only_workload_error(obj: object, message: str | None, why: str) -> None:
    if message is None:
        workload_spec(obj)  # type: ignore[arg-type]
        return
    with pytest.raises(WorkloadError) as caught:
        workload_spec(obj)  # type: ignore[arg-type]
    assert message in str(caught.value), why


def test_a_rayjob_worker_group_of_no_replicas_holds_no_quota() -> None:
    pod = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": pod}},
                "workerGroupSpecs": [{"groupName": "idle", "replicas": 0, "template": {"spec": pod}}],
            }
        },
    }
    assert [s.name for s in workload_spec(ray).pod_sets] == ["head"]


IDENTITY = {"name": "j", "namespace": "ns", "uid": "u-1", "creationTimestamp": "2025-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("metadata", "message", "why"),
    [
        (IDENTITY, None, "a valid identity"),
        ({**IDENTITY, "namespace": None}, None, "no namespace means default"),
        ({**IDENTITY, "name": "/tmp/x"}, 'metadata.name "/tmp/x" is not a valid name', "a path as a name"),
        ({**IDENTITY, "name": "../../etc"}, "is not a valid name", "a relative path"),
        ({**IDENTITY, "name": "a" * 254}, "must be no more than 253 characters", "too long"),
        ({**IDENTITY, "namespace": "a.b"}, 'metadata.namespace "a.b" is not a valid namespace', "a dot in a namespace"),
        ({**IDENTITY, "uid": None}, "metadata.uid None is not a valid uid", "no uid"),
        ({**IDENTITY, "creationTimestamp": "yesterday"}, "is not an RFC 3339 time", "a bad time"),
        ({**IDENTITY, "creationTimestamp": "2025-01-01T00:00:00"}, "is not an RFC 3339 time", "a time without zone"),
    ],
)
def test_check_identity(metadata: dict[str, object], message: str | None, why: str) -> None:
    obj = {"metadata": metadata}
    if message is None:
        ref = check_identity(obj)
        assert (ref.name, ref.uid) == ("j", "u-1"), why
        return
    with pytest.raises(WorkloadError, match=message):
        check_identity(obj)
