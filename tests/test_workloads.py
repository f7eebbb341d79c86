"""Pod sets computed from Jobs, Pods and RayJobs as Kubernetes counts requests."""

import pytest

from shared.workloads import WorkloadError, workload_spec


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
        ({"apiVersion": "apps/v1", "kind": "Deployment"}, "unknown kind 'Deployment'"),
        ({"apiVersion": "batch/v2", "kind": "Job"}, "Job does not exist in apiVersion 'batch/v2'"),
    ],
)
def test_bad_workloads_name_the_field(obj: dict[str, object], message: str) -> None:
    """A workload that cannot be read is refused with the field at fault."""
    with pytest.raises(WorkloadError) as caught:
        workload_spec(obj)
    assert message in str(caught.value)
