"""Builders for the scheduler's tests (services.admission.scheduler): Kueue's objects
(flavors, resource groups, ClusterQueues, LocalQueues, priority classes, namespaces),
queued workloads, a scheduler holding them, and readers of its decisions."""

from __future__ import annotations

from typing import Any

from services.admission.scheduler import Admission, Inadmissible, QueuedWorkload, Scheduler
from shared.config import ConfigObject, parse_object
from shared.events import PodSet, WorkloadRef
from shared.quantities import parse_quantity

V1 = "kueue.x-k8s.io/v1beta1"


def flavor(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def group(resources: list[str], *flavors: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A resource group; each flavor maps resource -> nominal or (nominal, borrowing, lending)."""
    result = []
    for name, quotas in flavors:
        items = []
        for resource in resources:
            value = quotas.get(resource, 0)
            nominal, borrowing, lending = value if isinstance(value, tuple) else (value, None, None)
            item: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
            if borrowing is not None:
                item["borrowingLimit"] = borrowing
            if lending is not None:
                item["lendingLimit"] = lending
            items.append(item)
        result.append({"name": name, "resources": items})
    return {"coveredResources": resources, "flavors": result}


def cq(name: str, *groups: dict[str, Any], **spec: Any) -> dict[str, Any]:
    spec.setdefault("namespaceSelector", {})
    spec["resourceGroups"] = list(groups)
    return {"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def lq(name: str, cluster_queue: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue, **spec},
    }


def wpc(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def pc(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def config(*documents: dict[str, Any]) -> list[ConfigObject]:
    return [parse_object(document) for document in documents]


def wl(
    name: str,
    queue: str = "user-queue",
    namespace: str = "default",
    t: float = 0.0,
    count: int = 1,
    pod_sets: list[PodSet] | None = None,
    **requests_and_priority: Any,
) -> QueuedWorkload:
    priority_fields = {
        key: requests_and_priority.pop(key)
        for key in ("priority_class", "priority_class_name", "priority")
        if key in requests_and_priority
    }
    requests = {key: parse_quantity(v) for key, v in requests_and_priority.items()}
    return QueuedWorkload(
        ref=WorkloadRef(namespace=namespace, name=name, uid=f"uid-{name}"),
        local_queue=queue,
        pod_sets=pod_sets or [PodSet(name="main", count=count, requests=requests)],
        queue_time=t,
        **priority_fields,
    )


def ref(name: str, namespace: str = "default") -> WorkloadRef:
    return WorkloadRef(namespace=namespace, name=name, uid=f"uid-{name}")


def admitted(decisions: list[Admission | Inadmissible]) -> list[str]:
    return [d.ref.name for d in decisions if isinstance(d, Admission)]


def pending(decisions: list[Admission | Inadmissible]) -> dict[str, Inadmissible]:
    return {d.ref.name: d for d in decisions if isinstance(d, Inadmissible)}


def simple(cpu: Any = 4, strategy: str = "BestEffortFIFO", **spec: Any) -> list[ConfigObject]:
    return config(
        flavor("default-flavor"),
        cq(
            "cq",
            group(["cpu", "memory"], ("default-flavor", {"cpu": cpu, "memory": "64Gi"})),
            queueingStrategy=strategy,
            **spec,
        ),
        lq("user-queue", "cq"),
    )


def scheduler(objects: list[ConfigObject], *workloads: QueuedWorkload) -> Scheduler:
    s = Scheduler()
    s.set_config(objects)
    for w in workloads:
        s.submit(w)
    return s
