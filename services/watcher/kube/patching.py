"""What admitting and evicting a workload changes on its object, and how it is written.

All writes go through :func:`converge`: read the object, ask a *plan* for the next step, write
that step conditionally (``metadata.resourceVersion`` in the merge-patch body, or delete
preconditions), repeat until the plan says "nothing left". A 409 means someone wrote first: we
read again and decide again, never re-send blindly. Because a plan looks only at the object,
a redelivered decision finds its work done and writes nothing.

Bookkeeping lives in annotations on the object itself, so a restarted watcher knows it too:

- ``berth.dev/admitted-generation``: the admission generation applied to the object;
- ``berth.dev/evicted-generation``: the generation that was stopped;
- ``berth.dev/pod-set-info``: each pod template's original nodeSelector and tolerations,
  written at admission and removed when eviction restores them (Kueue does the same);
- ``berth.dev/original-parallelism``: a partially admitted Job's own ``spec.parallelism``,
  restored with the templates.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import KubeConflict, KubeNotFound
from services.watcher.kube.kinds import (
    gate_kind,
    is_suspended,
    merge,
    suspend_patch,
    templates,
    templates_patch,
    update_pod_spec,
)
from shared.events import FlavorAssignment, WorkloadRef

__all__ = [
    "ADMISSION_ANNOTATION",
    "ADMISSION_GATE",
    "ADMITTED_ANNOTATION",
    "EVICTED_ANNOTATION",
    "FINISHED_ANNOTATION",
    "JOBS",
    "PODS",
    "POD_SET_INFO_ANNOTATION",
    "RAYJOBS",
    "Delete",
    "Patch",
    "admit_plan",
    "admitted_generation",
    "converge",
    "evict_plan",
    "evicted_generation",
    "mark_finished_plan",
    "suspend_plan",
]

JOBS = Resource("batch", "v1", "jobs", "Job")
PODS = Resource("", "v1", "pods", "Pod")
RAYJOBS = Resource("ray.io", "v1", "rayjobs", "RayJob")

ADMISSION_GATE = "kueue.x-k8s.io/admission"
ADMITTED_ANNOTATION = "berth.dev/admitted-generation"
EVICTED_ANNOTATION = "berth.dev/evicted-generation"
FINISHED_ANNOTATION = "berth.dev/finished-generation"
POD_SET_INFO_ANNOTATION = "berth.dev/pod-set-info"
ADMISSION_ANNOTATION = "berth.dev/admission"  # a gated kind's flavors, for its pods
PARALLELISM_ANNOTATION = "berth.dev/original-parallelism"

MAX_STEPS = 8  # eviction of a Job takes three writes; the rest is room for conflicts

Obj = dict[str, Any]


@dataclass(frozen=True)
class Patch:
    """A merge patch (``body`` already carries the expected resourceVersion)."""

    body: Obj
    subresource: str = ""


@dataclass(frozen=True)
class Delete:
    """Delete the object if it is still the one we read."""

    preconditions: dict[str, str]


Plan = Callable[[Obj], Patch | Delete | None]


async def converge(
    client: KubeClient, resource: Resource, ref: WorkloadRef, plan: Plan
) -> Obj | None:
    """Apply ``plan`` step by step until it returns None; returns the final object.

    Returns None when the object is gone (or replaced by another of the same name), which a
    deletion step also ends with. Raises :class:`KubeConflict` if conflicts never settle.
    """
    for _ in range(MAX_STEPS):
        try:
            obj = await client.get(resource, namespace=ref.namespace, name=ref.name)
        except KubeNotFound:
            return None
        if (obj.get("metadata") or {}).get("uid") != ref.uid:
            return None
        step = plan(obj)
        if step is None:
            return obj
        try:
            if isinstance(step, Delete):
                await client.delete(
                    resource,
                    namespace=ref.namespace,
                    name=ref.name,
                    preconditions=step.preconditions,
                )
                return None
            await client.patch(
                resource,
                namespace=ref.namespace,
                name=ref.name,
                body=step.body,
                subresource=step.subresource,
            )
        except KubeConflict:
            continue  # someone wrote in between: read again, decide again
        except KubeNotFound:
            return None
    raise KubeConflict(f"{resource} {ref.key}: no stable state after {MAX_STEPS} writes")


# --- reading our bookkeeping ------------------------------------------------------------------


def _annotations(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _int_annotation(obj: Obj, key: str) -> int:
    try:
        return int(_annotations(obj).get(key, "0"))
    except ValueError:
        return 0


def admitted_generation(obj: Obj) -> int:
    return _int_annotation(obj, ADMITTED_ANNOTATION)


def evicted_generation(obj: Obj) -> int:
    return _int_annotation(obj, EVICTED_ANNOTATION)


def finished_generation(obj: Obj) -> int:
    return _int_annotation(obj, FINISHED_ANNOTATION)


def _metadata(obj: Obj, annotations: dict[str, str | None] | None = None) -> Obj:
    """The patch's metadata: the resourceVersion we expect, plus annotation changes."""
    metadata: Obj = {}
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if version:
        metadata["resourceVersion"] = version
    if annotations:
        metadata["annotations"] = annotations
    return metadata


# --- pod templates ----------------------------------------------------------------------------


def pod_templates(obj: Obj) -> list[tuple[str, Obj]]:
    """(pod set name, pod spec) for every pod template, named as shared.workloads names them."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind not in ("Job", "Pod", "RayJob"):  # every other kind: kinds.py, from the table
        found = []
        for name, path in templates(obj):
            pod_spec: Any = obj
            for step in path:
                pod_spec = pod_spec[step]
            found.append((name, pod_spec))
        return found
    if kind == "Job":
        return [("main", ((spec.get("template") or {}).get("spec")) or {})]
    if kind == "Pod":
        return [("main", spec)]
    cluster = spec.get("rayClusterSpec") or {}
    head = ((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    result = [("head", head)]
    for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
        name = str(group.get("groupName") or f"workers-{index}")
        result.append((name, ((group.get("template") or {}).get("spec")) or {}))
    return result


def _scheduling(pod_spec: Obj) -> Obj:
    return {
        "nodeSelector": pod_spec.get("nodeSelector"),
        "tolerations": pod_spec.get("tolerations"),
    }


def _injected(original: Obj, assignment: FlavorAssignment | None) -> Obj:
    """The original scheduling fields plus the flavor's (the flavor wins on a clashing key)."""
    node_selector = dict(original.get("nodeSelector") or {})
    tolerations = list(original.get("tolerations") or [])
    if assignment is not None:
        node_selector.update(assignment.node_labels)
        for toleration in msgspec.to_builtins(assignment.tolerations):
            if toleration not in tolerations:
                tolerations.append(toleration)
    return {"nodeSelector": node_selector or None, "tolerations": tolerations or None}


def _restored(current: Obj, original: Obj) -> Obj:
    """A merge patch taking a pod spec's scheduling fields back to ``original``.

    Merge patches merge maps key by key, so keys we added are removed with explicit nulls.
    """
    wanted = original.get("nodeSelector")
    if wanted:
        selector: Obj | None = {
            key: None for key in (current.get("nodeSelector") or {}) if key not in wanted
        }
        assert selector is not None
        selector.update(wanted)
    else:
        selector = None
    return {"nodeSelector": selector, "tolerations": original.get("tolerations")}


def _templates_patch(obj: Obj, specs: dict[str, Obj]) -> Obj:
    """A spec patch giving each pod set's pod spec the fields in ``specs`` (by pod set name).

    A RayJob's worker groups are a list, which a merge patch can only replace whole: the list
    is rebuilt from the object we read, and the resourceVersion guards that read.
    """
    kind = obj.get("kind")
    if kind == "Job":
        return {"template": {"spec": specs["main"]}}
    if kind == "Pod":
        return specs["main"]
    if kind != "RayJob":
        return templates_patch(obj, specs)
    cluster = (obj.get("spec") or {}).get("rayClusterSpec") or {}
    groups = copy.deepcopy(cluster.get("workerGroupSpecs") or [])
    for index, group in enumerate(groups):
        name = str(group.get("groupName") or f"workers-{index}")
        update_pod_spec(group.setdefault("template", {}).setdefault("spec", {}), specs[name])
    patch: Obj = {"headGroupSpec": {"template": {"spec": specs["head"]}}}
    if groups:
        patch["workerGroupSpecs"] = groups
    return {"rayClusterSpec": patch}


def _is_suspended(obj: Obj) -> bool:
    return is_suspended(obj)  # spec.suspend, or the kind's own field (kinds.py)


# --- plans ------------------------------------------------------------------------------------


def suspend_plan(obj: Obj) -> Patch | None:
    """A new Job or RayJob created running: suspend it until admission says otherwise (a
    kind held by its pods' gates has nothing to suspend)."""
    if _is_suspended(obj) or admitted_generation(obj) > 0 or gate_kind(obj.get("kind")):
        return None
    return Patch({"metadata": _metadata(obj), "spec": suspend_patch(obj, True)})


def admit_plan(generation: int, assignments: Sequence[FlavorAssignment]) -> Plan:
    """Start the workload on its flavors: unsuspend (Job, RayJob) or ungate (Pod), inject."""
    by_pod_set = {assignment.pod_set: assignment for assignment in assignments}

    def plan(obj: Obj) -> Patch | None:
        if admitted_generation(obj) >= generation or evicted_generation(obj) >= generation:
            return None  # done already (a redelivery), or overtaken by a newer decision
        annotations = _annotations(obj)
        # Originals from an earlier admission whose restore never ran win: they are the truth.
        info_text = annotations.get(POD_SET_INFO_ANNOTATION)
        originals: dict[str, Obj] = (
            json.loads(info_text)
            if info_text
            else {name: _scheduling(spec) for name, spec in pod_templates(obj)}
        )
        specs = {
            name: _injected(originals.get(name, {}), by_pod_set.get(name))
            for name, _ in pod_templates(obj)
        }
        new_annotations: dict[str, str | None] = {ADMITTED_ANNOTATION: str(generation)}
        if gate_kind(obj.get("kind")):
            # Never its templates (that would roll its pods): gating.py ungates the pods with
            # the flavor recorded here.
            flavors = {a.pod_set: msgspec.to_builtins(a) for a in assignments}
            new_annotations[ADMISSION_ANNOTATION] = json.dumps(flavors, sort_keys=True)
            return Patch({"metadata": _metadata(obj, new_annotations)})
        if obj.get("kind") == "Pod":
            # A Pod cannot be suspended; its gate is its suspend. Nothing to restore later:
            # evicting a Pod deletes it.
            gates = (obj.get("spec") or {}).get("schedulingGates") or []
            kept = [gate for gate in gates if gate.get("name") != ADMISSION_GATE]
            spec = {**specs["main"], "schedulingGates": kept or None}
            return Patch({"metadata": _metadata(obj, new_annotations), "spec": spec})
        new_annotations[POD_SET_INFO_ANNOTATION] = json.dumps(originals, sort_keys=True)
        spec = merge(suspend_patch(obj, False), _templates_patch(obj, specs))
        if obj.get("kind") == "Job":
            spec = merge(spec, _partial_parallelism(obj, by_pod_set.get("main"), new_annotations))
        return Patch({"metadata": _metadata(obj, new_annotations), "spec": spec})

    return plan


def _partial_parallelism(
    obj: Obj, assignment: FlavorAssignment | None, annotations: dict[str, str | None]
) -> Obj:
    """A Job admitted with fewer pods than it asked for runs ``count`` at a time: Kueue sets
    ``spec.parallelism`` to the admitted count. The Job's own value is kept in an annotation
    (an earlier one whose restore never ran wins) for eviction to put back."""
    spec = obj.get("spec") or {}
    kept = _annotations(obj).get(PARALLELISM_ANNOTATION)
    own = int(kept) if kept else int(spec.get("parallelism") or 1)
    completions = spec.get("completions")
    asked = own if completions is None else min(own, int(completions))
    if assignment is None or assignment.count >= asked:
        if not kept:
            return {}
        annotations[PARALLELISM_ANNOTATION] = None  # admitted whole: its own value again
        return {"parallelism": own}
    annotations[PARALLELISM_ANNOTATION] = str(own)
    return {"parallelism": assignment.count}


def evict_plan(generation: int) -> Plan:
    """Stop the workload admitted at ``generation``.

    Job/RayJob, one step per call: suspend (and record the eviction); for a Job clear
    ``status.startTime`` (Kubernetes lets a Job's template change only while it is suspended
    with no startTime, exactly Kueue's sequence); then restore the pod templates.
    Pod: delete it, if it is still the pod we read.
    """

    def plan(obj: Obj) -> Patch | Delete | None:
        if admitted_generation(obj) != generation:
            return None  # never started at this generation, or a newer admission since
        if obj.get("kind") == "Pod":
            metadata = obj.get("metadata") or {}
            preconditions = {"uid": str(metadata.get("uid"))}
            if metadata.get("resourceVersion"):
                preconditions["resourceVersion"] = str(metadata["resourceVersion"])
            return Delete(preconditions)
        if gate_kind(obj.get("kind")):  # its pods are deleted by gating.py
            if evicted_generation(obj) >= generation:
                return None
            return Patch({"metadata": _metadata(obj, {EVICTED_ANNOTATION: str(generation)})})
        if not _is_suspended(obj) or evicted_generation(obj) < generation:
            return Patch(
                {
                    "metadata": _metadata(obj, {EVICTED_ANNOTATION: str(generation)}),
                    "spec": suspend_patch(obj, True),
                }
            )
        if obj.get("kind") == "Job" and (obj.get("status") or {}).get("startTime"):
            return Patch({"metadata": _metadata(obj), "status": {"startTime": None}}, "status")
        info_text = _annotations(obj).get(POD_SET_INFO_ANNOTATION)
        if info_text:
            originals: dict[str, Obj] = json.loads(info_text)
            specs = {
                name: _restored(spec, originals.get(name, {})) for name, spec in pod_templates(obj)
            }
            restored: dict[str, str | None] = {POD_SET_INFO_ANNOTATION: None}
            spec = _templates_patch(obj, specs)
            kept = _annotations(obj).get(PARALLELISM_ANNOTATION)
            if kept and obj.get("kind") == "Job":
                restored[PARALLELISM_ANNOTATION] = None
                spec = merge(spec, {"parallelism": int(kept)})
            return Patch({"metadata": _metadata(obj, restored), "spec": spec})
        return None

    return plan


def mark_finished_plan(generation: int) -> Plan:
    """Remember that the finish was reported, so a re-list does not report it again."""

    def plan(obj: Obj) -> Patch | None:
        if finished_generation(obj) >= generation and FINISHED_ANNOTATION in _annotations(obj):
            return None
        return Patch({"metadata": _metadata(obj, {FINISHED_ANNOTATION: str(generation)})})

    return plan
