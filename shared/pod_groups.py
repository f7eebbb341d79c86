"""Kueue's pod groups: plain Pods that are one workload, admitted whole or not at all.

A Pod labelled ``kueue.x-k8s.io/pod-group-name`` and annotated
``kueue.x-k8s.io/pod-group-total-count`` belongs to a group of that many pods
(:func:`pod_group`). The group is a workload once all its pods exist: a ``PodGroup`` object
(:func:`group_object`, kind ``PodGroup`` in ``berth.dev/v1``, built by the watcher, never
submitted) named after the group, whose pod sets are its pods by shape
(:func:`pod_group_templates`). Admission admits all its pod sets or none, so a group that
does not fit whole waits whole.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from shared.workload_fields import PodTemplate, WorkloadError, list_field, mapping, show

__all__ = [
    "POD_GROUP_API",
    "POD_GROUP_KIND",
    "POD_GROUP_NAME_LABEL",
    "POD_GROUP_TOTAL_ANNOTATION",
    "group_object",
    "pod_group",
    "pod_group_templates",
]

POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
POD_GROUP_KIND = "PodGroup"
POD_GROUP_API = "berth.dev/v1"
_GROUP_UIDS = uuid.UUID("0b6c2f3e-61a4-4c1e-9a52-5d8f0e7c2b11")


def pod_group_templates(obj: dict[str, Any], spec: dict[str, Any]) -> list[PodTemplate]:
    """Berth's ``PodGroup`` (a pod group's workload): one pod set per pod shape, named by the
    first 8 hex digits of the shape's SHA-256 as Kueue names them, of as many pods as have
    that shape; sorted by name. The shape is what admission looks at: the containers'
    requests and ports, node selector, affinity, tolerations, priority, overhead..."""
    pods = list_field(spec.get("pods"), "spec.pods")
    if not pods:
        raise WorkloadError("`spec.pods` must list the group's pods")
    by_shape: dict[str, PodTemplate] = {}
    for index, pod in enumerate(pods):
        pod_spec = mapping(pod, f"spec.pods[{index}]").get("spec")
        if not isinstance(pod_spec, dict):
            raise WorkloadError(f"`spec.pods[{index}].spec` is missing")
        shape = _role_hash(pod_spec)
        known = by_shape.get(shape)
        count = known.count + 1 if known else 1
        path = known.path if known else ("spec", "pods", index, "spec")
        by_shape[shape] = PodTemplate(shape, count, pod_spec, path)
    return [by_shape[name] for name in sorted(by_shape)]


def _role_hash(pod_spec: dict[str, Any]) -> str:
    def containers(items: Any) -> list[dict[str, Any]]:
        return [
            {
                "resources": {"requests": (c.get("resources") or {}).get("requests")},
                "ports": c.get("ports"),
            }
            for c in (items or [])
            if isinstance(c, dict)
        ]

    shape = {
        "initContainers": containers(pod_spec.get("initContainers")),
        "containers": containers(pod_spec.get("containers")),
        **{
            key: pod_spec.get(key)
            for key in (
                "nodeSelector",
                "affinity",
                "tolerations",
                "runtimeClassName",
                "priority",
                "topologySpreadConstraints",
                "overhead",
                "resourceClaims",
            )
        },
    }
    text = json.dumps({"spec": shape}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def pod_group(obj: dict[str, Any]) -> tuple[str, int] | None:
    """(group name, total count) of a Pod in a Kueue pod group; None for any other object.

    The label names the group, the annotation its size (a positive whole number); a Pod with
    the label and without a valid annotation is refused, as Kueue's webhook refuses it.
    """
    if not isinstance(obj, dict) or obj.get("kind") != "Pod":
        return None
    metadata = mapping(obj.get("metadata"), "metadata")
    group = mapping(metadata.get("labels"), "metadata.labels").get(POD_GROUP_NAME_LABEL)
    if group is None:
        return None
    if not isinstance(group, str):
        raise WorkloadError(f"`metadata.labels.{POD_GROUP_NAME_LABEL}` must be a string")
    annotations = mapping(metadata.get("annotations"), "metadata.annotations")
    total = annotations.get(POD_GROUP_TOTAL_ANNOTATION)
    path = f"metadata.annotations.{POD_GROUP_TOTAL_ANNOTATION}"
    if total is None:
        raise WorkloadError(f"`{path}` is missing: a pod group needs its size")
    if not isinstance(total, str) or not total.isdigit() or int(total) < 1:
        raise WorkloadError(f"`{path}` must be a positive whole number, got {show(total)}")
    return str(group), int(total)


def group_object(namespace: str, name: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``PodGroup`` standing for a complete pod group: named after the group, its uid
    derived from its members' (the same pods, the same group), labels and annotations from
    its first member (queue, priority class, simulated runtime), created with its oldest."""
    ordered = sorted(members, key=lambda pod: str(pod["metadata"]["name"]))
    first = ordered[0]["metadata"]
    uids = ",".join(sorted(str(pod["metadata"].get("uid")) for pod in ordered))
    created = sorted(str(p["metadata"].get("creationTimestamp") or "") for p in ordered)[0]
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": str(uuid.uuid5(_GROUP_UIDS, f"{namespace}/{name}/{uids}")),
        "labels": dict(first.get("labels") or {}),
        "annotations": dict(first.get("annotations") or {}),
    }
    if created:
        metadata["creationTimestamp"] = created
    return {
        "apiVersion": POD_GROUP_API,
        "kind": POD_GROUP_KIND,
        "metadata": metadata,
        "spec": {"pods": ordered},
    }
