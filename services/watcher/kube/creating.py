"""Creating and deleting workload objects on request (recovery's attempts, ``berth submit``).

The object a command carries was built for any backend (see ``shared/tasks.py`` and
``services/recovery/lifecycle.py``); :func:`manifest` makes it what the API server needs:

- created held: a Job or RayJob with ``spec.suspend: true`` (a Kubeflow job its
  ``spec.runPolicy.suspend``), a Pod with Kueue's admission scheduling gate, a Deployment's,
  StatefulSet's or LeaderWorkerSet's pod templates with it, so nothing runs before admission
  (the webhook would do the same, but we do not rely on it for objects we create ourselves);
- the Kueue labels: ``kueue.x-k8s.io/queue-name`` (``default`` when the object names none:
  recovery and the CLI only send such an object where that LocalQueue exists) and
  ``kueue.x-k8s.io/priority-class`` as given;
- the managed-job label copied onto the pod templates, so a pod the scheduler or a lost node
  disrupts is recognised as a managed job's (Job pods carry the template's labels only);
- an image for every container that has none, or the task placeholder ``berth/task``: the
  environment variable ``BERTH_DEFAULT_IMAGE``, else :data:`DEFAULT_IMAGE`;
- the requester's uid kept as an annotation: an API server assigns its own uid (it ignores
  the one in the body), and the annotation is how a repeated create or a later delete
  recognises the object as the one it asked for.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import KubeConflict, KubeNotFound
from services.watcher.kube.kinds import gate_kind, merge, suspend_patch
from services.watcher.kube.kinds import templates as kind_templates
from services.watcher.kube.patching import ADMISSION_GATE, pod_templates
from shared.events import WorkloadRef
from shared.logging import get_logger
from shared.tasks import TASK_IMAGE
from shared.workloads import MANAGED_JOB_LABEL, QUEUE_NAME_LABEL

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_IMAGE_ENV",
    "REQUESTED_UID_ANNOTATION",
    "create_object",
    "delete_object",
    "manifest",
]

log = get_logger("watcher.kube")

DEFAULT_IMAGE_ENV = "BERTH_DEFAULT_IMAGE"
# Has bash (the task wrapper prefers it, as SkyPilot runs scripts under bash) and a package
# manager for a task's `setup:`; small enough to pull quickly.
DEFAULT_IMAGE = "ubuntu:24.04"
REQUESTED_UID_ANNOTATION = "berth.dev/requested-uid"
# Fields the API server owns: sending them is refused (status, resourceVersion) or ignored.
_SERVER_FIELDS = ("resourceVersion", "creationTimestamp", "generation", "managedFields")

Obj = dict[str, Any]


def default_image(environ: Mapping[str, str] | None = None) -> str:
    """The image for containers that name none (or the task placeholder)."""
    return (environ if environ is not None else os.environ).get(DEFAULT_IMAGE_ENV) or DEFAULT_IMAGE


def manifest(obj: Obj, *, requested_uid: str, image: str) -> Obj:
    """The object to POST for a create command (see the module docstring for each rule)."""
    result = copy.deepcopy(obj)
    result.pop("status", None)
    metadata = result.setdefault("metadata", {})
    for field in _SERVER_FIELDS:
        metadata.pop(field, None)
    labels = metadata.setdefault("labels", {})
    annotations = metadata.setdefault("annotations", {})
    if not labels.get(QUEUE_NAME_LABEL) and not annotations.get(QUEUE_NAME_LABEL):
        labels[QUEUE_NAME_LABEL] = "default"
    annotations[REQUESTED_UID_ANNOTATION] = requested_uid
    spec = result.setdefault("spec", {})
    if result.get("kind") == "Pod":
        gates = spec.setdefault("schedulingGates", [])
        if not any(gate.get("name") == ADMISSION_GATE for gate in gates):
            gates.append({"name": ADMISSION_GATE})
    elif gate_kind(result.get("kind")):  # its controller's pods are born gated (kinds.py)
        for _, pod_spec in pod_templates(result):
            gates = pod_spec.setdefault("schedulingGates", [])
            if not any(gate.get("name") == ADMISSION_GATE for gate in gates):
                gates.append({"name": ADMISSION_GATE})
    else:
        result["spec"] = merge(spec, suspend_patch(result, True))
    for _, pod_spec in pod_templates(result):
        for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
            if not container.get("image") or container["image"] == TASK_IMAGE:
                container["image"] = image
    _label_templates(result, {k: v for k, v in labels.items() if k == MANAGED_JOB_LABEL})
    return result


def _label_templates(obj: Obj, labels: dict[str, str]) -> None:
    """Add ``labels`` to every pod template's metadata (a Pod is its own template)."""
    if not labels:
        return
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Job":
        templates = [spec.setdefault("template", {})]
    elif obj.get("kind") == "RayJob":
        cluster = spec.setdefault("rayClusterSpec", {})
        templates = [cluster.setdefault("headGroupSpec", {}).setdefault("template", {})]
        templates += [g.setdefault("template", {}) for g in cluster.get("workerGroupSpecs") or []]
    elif obj.get("kind") != "Pod":  # every other kind, from the table (kinds.py)
        templates = []
        for _, path in kind_templates(obj):
            parent: Any = obj
            for step in path[:-1]:
                parent = parent[step]
            templates.append(parent)
    else:
        return  # a Pod: its own labels are its pod's labels
    for template in templates:
        metadata = template.setdefault("metadata", {})
        metadata["labels"] = {**(metadata.get("labels") or {}), **labels}


def _requested_by(obj: Obj, ref: WorkloadRef) -> bool:
    """Whether ``obj`` is the object ``ref`` names: by the cluster's uid, or the uid the
    requester gave at creation (kept as an annotation); an empty uid names any object."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return not ref.uid or ref.uid in (
        metadata.get("uid"),
        annotations.get(REQUESTED_UID_ANNOTATION),
    )


async def create_object(
    client: KubeClient, resource: Resource, ref: WorkloadRef, body: Obj
) -> bool:
    """POST ``body``; True when the object exists as requested (created now, or by an
    earlier delivery of the same command), False when another object holds the name.

    A refusal (400/403/422) propagates as :class:`~.errors.KubeRefused` for the caller to
    log; a transient error propagates for the batch to be handled again.
    """
    try:
        await client.create(resource, namespace=ref.namespace, body=body)
        return True
    except KubeConflict:
        try:
            existing = await client.get(resource, namespace=ref.namespace, name=ref.name)
        except KubeNotFound:
            raise KubeConflict(f"{resource} {ref.key}: exists and vanished; try again") from None
        return _requested_by(existing, ref)


async def delete_object(client: KubeClient, resource: Resource, ref: WorkloadRef) -> bool:
    """Delete the object ``ref`` names, its pods in the background; True if we deleted it,
    False if it was gone already or is another object of the same name (left alone).

    Conditional on the uid we read: a same-named object created in between is never hit.
    """
    for _ in range(3):
        try:
            obj = await client.get(resource, namespace=ref.namespace, name=ref.name)
        except KubeNotFound:
            return False
        if not _requested_by(obj, ref):
            return False
        try:
            await client.delete(
                resource,
                namespace=ref.namespace,
                name=ref.name,
                preconditions={"uid": str(obj["metadata"]["uid"])},
                propagation_policy="Background",
            )
            return True
        except KubeNotFound:
            return False
        except KubeConflict:
            continue  # replaced in between: read again
    raise KubeConflict(f"{resource} {ref.key}: replaced while it was being deleted")
