"""From a Kubernetes object (Job, Pod, RayJob) to what admission needs: pod sets and labels.

Pod requests are computed as Kubernetes does: per resource, the larger of the sum over the
containers and the largest init container, plus the pod overhead; a resource with a limit but
no request requests its limit. A Job's pod set has ``min(parallelism, completions)`` pods; a
RayJob has a head pod set and one per worker group.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.events import PodSet, WorkloadRef
from shared.names import (
    InvalidName,
    check_name,
    check_namespace,
    check_uid,
    name_problem,
)
from shared.quantities import QuantityError, parse_quantity

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "SIMULATED_RUNTIME_ANNOTATION",
    "WorkloadError",
    "WorkloadSpec",
    "check_identity",
    "pod_requests",
    "workload_key",
    "workload_spec",
]

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
SIMULATED_RUNTIME_ANNOTATION = "berth.dev/simulated-runtime"
MANAGED_JOB_LABEL = "berth.dev/managed-job"

_INT32_MAX = 2**31 - 1
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


def _mapping(value: Any, path: str) -> dict[str, Any]:
    """A mapping field (absent: empty); anything else is refused naming the field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WorkloadError(f"`{path}` must be a mapping, got {_show(value)}")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WorkloadError(f"`{path}` must be a list, got {_show(value)}")
    return value


def _strings(value: Any, path: str) -> dict[str, str]:
    """A mapping of strings to strings (labels, annotations)."""
    result: dict[str, str] = {}
    for key, item in _mapping(value, path).items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise WorkloadError(f"`{path}.{key}` must be a string, got {_show(item)}")
        result[key] = item
    return result


def _quantities(values: Any, path: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for resource, value in _mapping(values, path).items():
        problem = name_problem(resource, "label-key")
        if problem is not None:
            raise WorkloadError(f"`{path}`: {_show(resource)} is not a resource name: {problem}")
        try:
            result[resource] = parse_quantity(value)
        except QuantityError as error:
            raise WorkloadError(f"`{path}.{resource}`: {error}") from error
    return result


def _container_requests(container: Any, path: str) -> dict[str, int]:
    if not isinstance(container, dict):
        raise WorkloadError(f"`{path}` must be a mapping")
    resources = _mapping(container.get("resources"), f"{path}.resources")
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
    init_containers = _list(pod_spec.get("initContainers"), f"{path}.initContainers")
    for index, container in enumerate(init_containers):
        init = _container_requests(container, f"{path}.initContainers[{index}]")
        for resource, value in init.items():
            total[resource] = max(total.get(resource, 0), value)
    for resource, value in _quantities(pod_spec.get("overhead"), f"{path}.overhead").items():
        total[resource] = total.get(resource, 0) + value
    return total


def _int_field(value: Any, path: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise WorkloadError(f"`{path}` must be a non-negative integer, got {_show(value)}")
    return value


def _pod_spec(parent: Any, path: str) -> dict[str, Any]:
    """``<parent>.template.spec``, which must be a mapping."""
    template = _mapping(parent, path).get("template")
    spec = _mapping(template, f"{path}.template").get("spec")
    if not isinstance(spec, dict):
        raise WorkloadError(f"`{path}.template.spec` is missing" if path else "`template.spec`")
    return spec


def workload_spec(obj: dict[str, Any]) -> WorkloadSpec:
    """Read a Job, Pod or RayJob mapping; raises :class:`WorkloadError` naming the field,
    and nothing else whatever the mapping holds."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"a workload must be a mapping, got {_show(obj)}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in WORKLOAD_KINDS:
        raise WorkloadError(
            f"unknown kind {_show(kind)} for a workload"
            " (submit a batch/v1 Job, v1 Pod or ray.io/v1 RayJob)"
        )
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or api_version not in WORKLOAD_KINDS[kind]:
        raise WorkloadError(
            f"{kind} does not exist in apiVersion {_show(api_version)}"
            f" (use {' or '.join(sorted(WORKLOAD_KINDS[kind]))})"
        )
    metadata = _mapping(obj.get("metadata"), "metadata")
    labels = _strings(metadata.get("labels"), "metadata.labels")
    annotations = _strings(metadata.get("annotations"), "metadata.annotations")
    _check_labels(labels)
    spec = _mapping(obj.get("spec"), "spec")
    pod_specs: dict[str, dict[str, Any]] = {}
    pod_sets: list[PodSet] = []
    if kind == "Job":
        template = _pod_spec(spec, "spec")
        parallelism = _int_field(spec.get("parallelism"), "spec.parallelism", 1)
        completions = spec.get("completions")
        if completions is not None:
            parallelism = min(parallelism, _int_field(completions, "spec.completions", 1))
        if parallelism == 0:
            raise WorkloadError("`spec.parallelism` is 0: Berth admits Jobs of at least one pod")
        requests = pod_requests(template, "spec.template.spec")
        pod_sets.append(PodSet(name="main", count=parallelism, requests=requests))
        pod_specs["main"] = template
    elif kind == "Pod":
        requests = pod_requests(spec, "spec")
        pod_sets.append(PodSet(name="main", count=1, requests=requests))
        pod_specs["main"] = spec
    else:
        _ray_pod_sets(spec, pod_sets, pod_specs)
    first_pod = next(iter(pod_specs.values()))
    priority = first_pod.get("priority")
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not -_INT32_MAX - 1 <= priority <= _INT32_MAX
    ):
        raise WorkloadError(f"`priority` must be a 32-bit integer, got {_show(priority)}")
    priority_class_name = first_pod.get("priorityClassName") or ""
    if priority_class_name and (problem := name_problem(priority_class_name)) is not None:
        raise WorkloadError(f"`priorityClassName` {_show(priority_class_name)}: {problem}")
    queue_name = labels.get(QUEUE_NAME_LABEL) or annotations.get(QUEUE_NAME_LABEL) or ""
    for field, value in (
        ("queue-name", queue_name),
        ("priority-class", labels.get(PRIORITY_CLASS_LABEL)),
    ):
        if value and (problem := name_problem(value)) is not None:
            raise WorkloadError(
                f"kueue.x-k8s.io/{field} {_show(value)} is not a valid name: {problem}"
            )
    return WorkloadSpec(
        kind=kind,
        pod_sets=pod_sets,
        queue_name=queue_name,
        priority_class=labels.get(PRIORITY_CLASS_LABEL) or "",
        priority_class_name=str(priority_class_name),
        priority=priority,
        pod_specs=pod_specs,
    )


def _ray_pod_sets(
    spec: dict[str, Any], pod_sets: list[PodSet], pod_specs: dict[str, dict[str, Any]]
) -> None:
    """A head pod set, and one per worker group that has replicas (none: it holds no quota)."""
    cluster = spec.get("rayClusterSpec")
    if not isinstance(cluster, dict):
        raise WorkloadError("`spec.rayClusterSpec` is missing")
    head_path = "spec.rayClusterSpec.headGroupSpec"
    head = _pod_spec(cluster.get("headGroupSpec"), head_path)
    pod_sets.append(
        PodSet(name="head", count=1, requests=pod_requests(head, f"{head_path}.template.spec"))
    )
    pod_specs["head"] = head
    groups = _list(cluster.get("workerGroupSpecs"), "spec.rayClusterSpec.workerGroupSpecs")
    for index, group in enumerate(groups):
        path = f"spec.rayClusterSpec.workerGroupSpecs[{index}]"
        template = _pod_spec(group, path)
        replicas = _int_field(group.get("replicas"), f"{path}.replicas", 1)
        min_replicas = group.get("minReplicas")
        min_count = (
            None if min_replicas is None else _int_field(min_replicas, f"{path}.minReplicas", 0)
        )
        if min_count is not None and min_count > replicas:
            raise WorkloadError(f"`{path}.minReplicas` ({min_count}) exceeds replicas ({replicas})")
        name = group.get("groupName") or f"workers-{index}"
        if not isinstance(name, str) or name in pod_specs:
            raise WorkloadError(f"`{path}.groupName` {_show(name)} must be a unique string")
        requests = pod_requests(template, f"{path}.template.spec")
        pod_specs[name] = template
        if replicas:
            pod_sets.append(
                PodSet(name=name, count=replicas, requests=requests, min_count=min_count)
            )


def _check_labels(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        problem = name_problem(key, "label-key") or name_problem(value, "label-value")
        if problem is not None:
            raise WorkloadError(f"`metadata.labels.{key}` {_show(value)}: {problem}")


def check_identity(obj: dict[str, Any], *, uid: bool = True) -> WorkloadRef:
    """The object's identity, checked as Kubernetes would: ``metadata.name`` a DNS-1123
    subdomain, ``metadata.namespace`` (default: ``default``) a DNS-1123 label, ``metadata.uid``
    safe in event ids (with ``uid``), ``metadata.creationTimestamp`` an RFC 3339 time.
    Raises :class:`WorkloadError` naming the field; nothing derived from the name (a bucket
    key, a log path) can then leave its place."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"an object must be a mapping, got {_show(obj)}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise WorkloadError(f"`metadata` must be a mapping, got {_show(metadata)}")
    namespace = metadata.get("namespace") or "default"
    try:
        name = check_name(metadata.get("name"))
        check_namespace(namespace)
        uid_value = check_uid(metadata.get("uid")) if uid else ""
    except InvalidName as error:
        raise WorkloadError(str(error)) from None
    created = metadata.get("creationTimestamp")
    if created is not None and not _is_time(created):
        raise WorkloadError(f"metadata.creationTimestamp {_show(created)} is not an RFC 3339 time")
    return WorkloadRef(namespace=namespace, name=name, uid=uid_value)


def _is_time(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
