"""The Kueue objects and simulated Jobs the live-stack benchmarks build their worlds from.

One CPU-only ResourceFlavor ``rf``; each benchmark says only what differs (quota, cohort,
borrowing limit, preemption policy, priority class).
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec

from shared.workloads import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, SIMULATED_RUNTIME_ANNOTATION

__all__ = [
    "FLAVOR",
    "V1",
    "SimulatedJobs",
    "cpu_cluster_queue",
    "creation_timestamp",
    "queue_namespace",
    "simulated_job",
    "uuid4_strings",
]

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


def creation_timestamp() -> str:
    """A Job's creationTimestamp: now, in ISO 8601 with microseconds and the UTC offset."""
    return datetime.now(UTC).isoformat()


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
            "creationTimestamp": creation_timestamp(),
            "labels": job_labels,
            "annotations": {SIMULATED_RUNTIME_ANNOTATION: f"{runtime_ms}ms"},
        },
        "spec": {"template": {"spec": pod}},
    }


class SimulatedJobs:
    """Many :func:`simulated_job` of one namespace and shape, encoded: byte for byte what
    ``msgspec.json.encode(simulated_job(name, namespace, ..., uid=uid))`` gives with that
    creationTimestamp. The shape is encoded once with stand-ins that each Job's name, uid
    and creationTimestamp replace, so a generator's cost per create is a client's (the
    request's bytes), not building, stamping and encoding a dict: on a shared machine its
    CPU is the stack's loss. The spliced values need no JSON escaping (a name of
    ``[a-z0-9.-]``, a uuid, an ISO time), which :meth:`encode` does not check."""

    _STAND_INS = ("\x01name\x01", "\x01uid\x01", "\x01created\x01")

    def __init__(
        self,
        namespace: str,
        runtime_ms: int,
        *,
        cpu: str = "1",
        priority_class: str | None = None,
        priority: int | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.namespace = namespace
        name, uid, created = self._STAND_INS
        shape = simulated_job(
            name,
            namespace,
            runtime_ms,
            cpu=cpu,
            priority_class=priority_class,
            priority=priority,
            labels=labels,
            uid=uid,
        )
        shape["metadata"]["creationTimestamp"] = created
        text = msgspec.json.encode(shape).decode()
        pieces: list[str] = []
        for stand_in in (msgspec.json.encode(s).decode()[1:-1] for s in self._STAND_INS):
            before, found, text = text.partition(stand_in)
            if not found or stand_in in text:
                raise ValueError(f"{stand_in!r} is not once in the encoded shape")
            pieces.append(before)
        self._pieces = (*pieces, text)

    def encode(self, name: str, uid: str, created: str) -> bytes:
        """The Job ``name`` with this ``uid`` and creationTimestamp ``created``, encoded."""
        head, after_name, after_uid, tail = self._pieces
        return "".join((head, name, after_name, uid, after_uid, created, tail)).encode()


def uuid4_strings(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs written as ``str(uuid.uuid4())`` writes them, from
    one read of the system's randomness rather than one (and a UUID object) per UUID."""
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = bytes(b & 0x0F | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes(b & 0x3F | 0x80 for b in raw[8::16])  # the RFC 4122 variant
    h = raw.hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-{h[i + 12 : i + 16]}-{h[i + 16 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, 32 * count, 32)
    ]
