"""The Kueue objects and simulated Jobs the live-stack benchmarks build their worlds from.

One CPU-only ResourceFlavor ``rf``; each benchmark says only what differs (quota, cohort,
borrowing limit, preemption policy, priority class).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from shared.workloads import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, SIMULATED_RUNTIME_ANNOTATION

__all__ = ["FLAVOR", "V1", "cpu_cluster_queue", "queue_namespace", "simulated_job"]

V1 = "kueue.x-k8s.io/v1beta1"
FLAVOR: dict[str, Any] = {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "rf"}}


def cpu_cluster_queue(
    name: str,
    nominal_cpu: int,
    *,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    preemption: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with ``nominal_cpu`` CPUs of flavor ``rf`` for every namespace."""
    quota: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal_cpu}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "rf", "resources": [quota]}]}
        ],
    }
    if cohort:
        spec["cohort"] = cohort
    if preemption:
        spec["preemption"] = preemption
    return {"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def queue_namespace(name: str) -> list[dict[str, Any]]:
    """A Namespace and a LocalQueue in it, both named after the ClusterQueue they feed."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        {
            "apiVersion": V1,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": name},
            "spec": {"clusterQueue": name},
        },
    ]


def simulated_job(
    name: str,
    namespace: str,
    runtime_ms: int,
    *,
    cpu: str = "1",
    priority_class: str | None = None,
    priority: int | None = None,
    labels: dict[str, str] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A one-pod Job queued in its namespace's LocalQueue that the local backend "runs" for
    ``runtime_ms`` without starting a process; ``priority`` is set on the pod directly (as
    Kueue's scheduler benchmark does), ``labels`` are added to the queue's."""
    job_labels = {QUEUE_NAME_LABEL: namespace}
    if priority_class:
        job_labels[PRIORITY_CLASS_LABEL] = priority_class
    job_labels.update(labels or {})
    pod: dict[str, Any] = {} if priority is None else {"priority": priority}
    pod["containers"] = [
        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
    ]
    pod["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "creationTimestamp": datetime.now(UTC).isoformat(),
            "labels": job_labels,
            "annotations": {SIMULATED_RUNTIME_ANNOTATION: f"{runtime_ms}ms"},
        },
        "spec": {"template": {"spec": pod}},
    }
