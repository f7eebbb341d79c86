"""From a workload object (a Job, a Pod, a JobSet, a PyTorchJob...) to what admission
needs: pod sets and labels.

Where each kind keeps its pod templates, and how many pods each stands for, is the table in
:mod:`shared.workload_kinds`. Pod requests are computed as Kubernetes does: per resource, the
larger of the sum over the containers and the largest init container, plus the pod overhead;
a resource with a limit but no request requests its limit.
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
from shared.workload_fields import (
    INT32_MAX,
    PodTemplate,
    WorkloadError,
    list_field,
    mapping,
    path_text,
    strings,
)
from shared.workload_fields import show as _show
from shared.workload_kinds import KINDS, resource_name

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "SIMULATED_RUNTIME_ANNOTATION",
    "WORKLOAD_KINDS",
    "WorkloadError",
    "WorkloadSpec",
    "check_identity",
    "pod_requests",
    "resource_name",
    "workload_key",
    "workload_spec",
]

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
SIMULATED_RUNTIME_ANNOTATION = "berth.dev/simulated-runtime"
MANAGED_JOB_LABEL = "berth.dev/managed-job"

# kind -> accepted apiVersions, for the kinds a user submits (a PodGroup the watcher builds)
WORKLOAD_KINDS = {name: set(kind.api_versions) for name, kind in KINDS.items() if kind.submittable}


def workload_key(namespace: str, name: str) -> str:
    """The key of a workload object in the local backend's objects bucket."""
    return f"{namespace}.{name}"


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
        templates: list[PodTemplate] | None = None,
    ) -> None:
        self.kind = kind
        self.pod_sets = pod_sets
        self.queue_name = queue_name
        self.priority_class = priority_class
        self.priority_class_name = priority_class_name
        self.priority = priority
        self.pod_specs = pod_specs  # pod set name -> pod spec (what the local backend runs)
        self.templates = templates or []  # every pod template, with its path in the object


def _quantities(values: Any, path: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for resource, value in mapping(values, path).items():
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
    resources = mapping(container.get("resources"), f"{path}.resources")
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
    init_containers = list_field(pod_spec.get("initContainers"), f"{path}.initContainers")
    for index, container in enumerate(init_containers):
        init = _container_requests(container, f"{path}.initContainers[{index}]")
        for resource, value in init.items():
            total[resource] = max(total.get(resource, 0), value)
    for resource, value in _quantities(pod_spec.get("overhead"), f"{path}.overhead").items():
        total[resource] = total.get(resource, 0) + value
    return total


def workload_spec(obj: dict[str, Any]) -> WorkloadSpec:
    """Read a workload mapping of any kind in :data:`~shared.workload_kinds.KINDS`; raises
    :class:`WorkloadError` naming the field, and nothing else whatever the mapping holds."""
    if not isinstance(obj, dict):
        raise WorkloadError(f"a workload must be a mapping, got {_show(obj)}")
    kind = obj.get("kind")
    entry = KINDS.get(kind) if isinstance(kind, str) else None
    if entry is None:
        raise WorkloadError(
            f"unknown kind {_show(kind)} for a workload (Berth queues {', '.join(WORKLOAD_KINDS)})"
        )
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or api_version not in entry.api_versions:
        raise WorkloadError(
            f"{kind} does not exist in apiVersion {_show(api_version)}"
            f" (use {' or '.join(sorted(entry.api_versions))})"
        )
    metadata = mapping(obj.get("metadata"), "metadata")
    labels = strings(metadata.get("labels"), "metadata.labels")
    annotations = strings(metadata.get("annotations"), "metadata.annotations")
    _check_labels(labels)
    templates = entry.templates(obj, mapping(obj.get("spec"), "spec"))
    pod_specs: dict[str, dict[str, Any]] = {}
    pod_sets: list[PodSet] = []
    for template in templates:
        requests = pod_requests(template.spec, path_text(template.path))
        pod_specs[template.name] = template.spec
        if template.count:  # a pod set of no pods holds no quota (a Ray group of 0 replicas)
            pod_sets.append(
                PodSet(
                    name=template.name,
                    count=template.count,
                    requests=requests,
                    min_count=template.min_count,
                )
            )
    if not pod_sets:
        raise WorkloadError(f"{kind} has no pods to run: every pod set counts 0 pods")
    first_pod = templates[0].spec
    priority = first_pod.get("priority")
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not -INT32_MAX - 1 <= priority <= INT32_MAX
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
        kind=entry.kind,
        pod_sets=pod_sets,
        queue_name=queue_name,
        priority_class=labels.get(PRIORITY_CLASS_LABEL) or "",
        priority_class_name=str(priority_class_name),
        priority=priority,
        pod_specs=pod_specs,
        templates=templates,
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
