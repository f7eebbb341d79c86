"""From a Kubernetes object (Job, Pod, RayJob) to what admission needs: pod sets and labels.

Pod requests are computed as Kubernetes does: per resource, the larger of the sum over the
containers and the largest init container, plus the pod overhead; a resource with a limit but
no request requests its limit. A Job's pod set has ``min(parallelism, completions)`` pods; a
RayJob has a head pod set and one per worker group.
"""

from __future__ import annotations

from typing import Any

from shared.events import PodSet
from shared.quantities import QuantityError, parse_quantity

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "SIMULATED_RUNTIME_ANNOTATION",
    "WorkloadError",
    "WorkloadSpec",
    "pod_requests",
    "workload_key",
    "workload_spec",
]

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
SIMULATED_RUNTIME_ANNOTATION = "berth.dev/simulated-runtime"
MANAGED_JOB_LABEL = "berth.dev/managed-job"

# kind -> accepted apiVersions
WORKLOAD_KINDS = {"Job": {"batch/v1"}, "Pod": {"v1"}, "RayJob": {"ray.io/v1", "ray.io/v1alpha1"}}


def workload_key(namespace: str, name: str) -> str:
    """The key of a workload object in the local backend's objects bucket."""
    return f"{namespace}.{name}"


class WorkloadError(ValueError):
    """An object that cannot become a workload; the message names the field."""


class WorkloadSpec:
    """What the watcher reports about a workload object."""

    def __init__(
        self,
        *,
        kind: str,
        pod_sets: list[PodSet],
        queue_name: str,
        priority_class: str,
        priority_class_name: str,
        priority: int | None,
        pod_specs: dict[str, dict[str, Any]],
    ) -> None:
        self.kind = kind
        self.pod_sets = pod_sets
        self.queue_name = queue_name
        self.priority_class = priority_class
        self.priority_class_name = priority_class_name
        self.priority = priority
        self.pod_specs = pod_specs  # pod set name -> pod spec (what the local backend runs)


def _quantities(values: Any, path: str) -> dict[str, int]:
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise WorkloadError(f"`{path}` must be a mapping of resource to quantity")
    result: dict[str, int] = {}
    for resource, value in values.items():
        try:
            result[str(resource)] = parse_quantity(value)
        except QuantityError as error:
            raise WorkloadError(f"`{path}.{resource}`: {error}") from error
    return result


def _container_requests(container: Any, path: str) -> dict[str, int]:
    if not isinstance(container, dict):
        raise WorkloadError(f"`{path}` must be a mapping")
    resources = container.get("resources") or {}
    requests = _quantities(resources.get("requests"), f"{path}.resources.requests")
    limits = _quantities(resources.get("limits"), f"{path}.resources.limits")
    for resource, limit in limits.items():
        requests.setdefault(resource, limit)  # Kubernetes defaults a request to its limit
    return requests


def pod_requests(pod_spec: dict[str, Any], path: str) -> dict[str, int]:
    """One pod's effective requests, in milli-units, as the Kubernetes scheduler counts them."""
    containers = pod_spec.get("containers")
    if not containers or not isinstance(containers, list):
        raise WorkloadError(f"`{path}.containers` must list at least one container")
    total: dict[str, int] = {}
    for index, container in enumerate(containers):
        for resource, value in _container_requests(
            container, f"{path}.containers[{index}]"
        ).items():
            total[resource] = total.get(resource, 0) + value
    for index, container in enumerate(pod_spec.get("initContainers") or []):
        init = _container_requests(container, f"{path}.initContainers[{index}]")
        for resource, value in init.items():
            total[resource] = max(total.get(resource, 0), value)
    for resource, value in _quantities(pod_spec.get("overhead"), f"{path}.overhead").items():
        total[resource] = total.get(resource, 0) + value
    return total


def _int_field(value: Any, path: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WorkloadError(f"`{path}` must be a non-negative integer, got {value!r}")
    return value


def workload_spec(obj: dict[str, Any]) -> WorkloadSpec:
    """Read a Job, Pod or RayJob mapping; raises :class:`WorkloadError` naming the field."""
    kind = obj.get("kind")
    if kind not in WORKLOAD_KINDS:
        raise WorkloadError(
            f"unknown kind {kind!r} for a workload"
            " (submit a batch/v1 Job, v1 Pod or ray.io/v1 RayJob)"
        )
    if obj.get("apiVersion") not in WORKLOAD_KINDS[kind]:
        raise WorkloadError(
            f"{kind} does not exist in apiVersion {obj.get('apiVersion')!r}"
            f" (use {' or '.join(sorted(WORKLOAD_KINDS[kind]))})"
        )
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    spec = obj.get("spec") or {}
    pod_specs: dict[str, dict[str, Any]] = {}
    pod_sets: list[PodSet] = []
    if kind == "Job":
        template = (spec.get("template") or {}).get("spec")
        if not isinstance(template, dict):
            raise WorkloadError("`spec.template.spec` is missing")
        parallelism = _int_field(spec.get("parallelism"), "spec.parallelism", 1)
        completions = spec.get("completions")
        if completions is not None:
            parallelism = min(parallelism, _int_field(completions, "spec.completions", 1))
        requests = pod_requests(template, "spec.template.spec")
        pod_sets.append(PodSet(name="main", count=parallelism, requests=requests))
        pod_specs["main"] = template
    elif kind == "Pod":
        requests = pod_requests(spec, "spec")
        pod_sets.append(PodSet(name="main", count=1, requests=requests))
        pod_specs["main"] = spec
    else:
        cluster = spec.get("rayClusterSpec")
        if not isinstance(cluster, dict):
            raise WorkloadError("`spec.rayClusterSpec` is missing")
        head = ((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec")
        if not isinstance(head, dict):
            raise WorkloadError("`spec.rayClusterSpec.headGroupSpec.template.spec` is missing")
        pod_sets.append(
            PodSet(
                name="head",
                count=1,
                requests=pod_requests(head, "spec.rayClusterSpec.headGroupSpec.template.spec"),
            )
        )
        pod_specs["head"] = head
        for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
            path = f"spec.rayClusterSpec.workerGroupSpecs[{index}]"
            template = ((group or {}).get("template") or {}).get("spec")
            if not isinstance(template, dict):
                raise WorkloadError(f"`{path}.template.spec` is missing")
            replicas = _int_field(group.get("replicas"), f"{path}.replicas", 1)
            min_replicas = group.get("minReplicas")
            name = str(group.get("groupName") or f"workers-{index}")
            pod_sets.append(
                PodSet(
                    name=name,
                    count=replicas,
                    requests=pod_requests(template, f"{path}.template.spec"),
                    min_count=None
                    if min_replicas is None
                    else _int_field(min_replicas, f"{path}.minReplicas", 0),
                )
            )
            pod_specs[name] = template
    first_pod = next(iter(pod_specs.values()))
    priority = first_pod.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise WorkloadError(f"`priority` must be an integer, got {priority!r}")
    return WorkloadSpec(
        kind=kind,
        pod_sets=pod_sets,
        queue_name=str(
            labels.get(QUEUE_NAME_LABEL)
            or (metadata.get("annotations") or {}).get(QUEUE_NAME_LABEL)
            or ""
        ),
        priority_class=str(labels.get(PRIORITY_CLASS_LABEL) or ""),
        priority_class_name=str(first_pod.get("priorityClassName") or ""),
        priority=priority,
        pod_specs=pod_specs,
    )
