"""The workload kinds beyond Job, Pod and RayJob, as the Kubernetes backend handles them.

Everything comes from the one table, :data:`shared.workload_kinds.KINDS`: each kind's API
resource, how it is held until admitted (its suspend field, or scheduling gates on its pods),
and where its pod templates are. Job, Pod and RayJob keep their own code in
:mod:`.patching` and :mod:`.reading`; these functions serve every other kind.

- suspended kinds (JobSet, RayCluster, AppWrapper, the Kubeflow jobs): created with the
  suspend field true, admission sets it false and injects the flavor into each pod template,
  eviction sets it true and restores them (as for a Job);
- gated kinds (Deployment, StatefulSet, LeaderWorkerSet): their pod templates carry
  Kueue's admission gate, so every pod their controller makes is born gated; the object
  itself is never changed but for Berth's annotations (changing a template would roll the
  pods), and :mod:`.gating` removes the gate from its pods at admission and deletes them at
  eviction.

Finished, as Kueue reads it: a JobSet's ``Completed`` or ``Failed`` condition, a Kubeflow
job's ``Succeeded`` or ``Failed``, an AppWrapper's ``status.phase``; RayClusters and the
serving kinds run until deleted.
"""

from __future__ import annotations

import copy
from typing import Any

from services.watcher.kube.api import Resource
from shared.workload_fields import WorkloadError
from shared.workload_kinds import KINDS

__all__ = [
    "GATED",
    "OTHER_RESOURCES",
    "finish_rule",
    "gate_kind",
    "is_suspended",
    "merge",
    "suspend_patch",
    "templates",
    "templates_patch",
    "update_pod_spec",
]

_OWN_CODE = ("Job", "Pod", "RayJob")  # patching.py and reading.py handle these themselves

OTHER_RESOURCES: dict[str, Resource] = {
    name: Resource(kind.group, sorted(kind.api_versions)[0].split("/")[-1], kind.plural, name)
    for name, kind in KINDS.items()
    if kind.submittable and name not in _OWN_CODE
}
# Kinds whose pods (made by their controller) are gated; a Pod is gated itself.
GATED = frozenset(n for n, k in KINDS.items() if k.hold == "gates" and n in OTHER_RESOURCES)

Obj = dict[str, Any]


def gate_kind(kind: Any) -> bool:
    return isinstance(kind, str) and kind in GATED


def _suspend_path(obj: Obj) -> tuple[str, ...]:
    entry = KINDS.get(str(obj.get("kind")))
    return entry.suspend_path if entry is not None else ("spec", "suspend")


def is_suspended(obj: Obj) -> bool:
    value: Any = obj
    for step in _suspend_path(obj):
        value = value.get(step) if isinstance(value, dict) else None
    return bool(value)


def suspend_patch(obj: Obj, value: bool) -> Obj:
    """The ``spec`` part of a merge patch that sets the kind's suspend field."""
    path = _suspend_path(obj)[1:]  # under spec
    patch: Obj = {path[-1]: value}
    for step in reversed(path[:-1]):
        patch = {step: patch}
    return patch


def merge(base: Obj, extra: Obj) -> Obj:
    """Two merge patches as one (``extra`` wins on a clash)."""
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def templates(obj: Obj) -> list[tuple[str, tuple[str | int, ...]]]:
    """(pod set name, path to its pod spec) of each pod template; none if unreadable."""
    entry = KINDS.get(str(obj.get("kind")))
    spec = obj.get("spec")
    if entry is None or not isinstance(spec, dict):
        return []
    try:
        return [(t.name, t.path) for t in entry.templates(obj, spec)]
    except WorkloadError:
        return []


def _at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def templates_patch(obj: Obj, specs: dict[str, Obj]) -> Obj:
    """The ``spec`` part of a merge patch giving each pod spec the fields in ``specs`` (by pod
    set name; a None value removes the field, a mapping is merged with None removing a key).

    Generic over any kind: the whole spec is changed in a copy, and the patch is the
    difference. Lists (replicated jobs, components) are sent whole, as a merge patch must;
    the resourceVersion in the patch guards the read they came from.
    """
    before = obj.get("spec") or {}
    after = copy.deepcopy(before)
    wrapper = {"spec": after}
    for name, path in templates(obj):
        update_pod_spec(_at(wrapper, path), specs.get(name, {}))
    return _difference(before, after)


def update_pod_spec(pod_spec: Obj, fields: Obj) -> None:
    """Give ``pod_spec`` the ``fields``, in place: a None value removes the field, a mapping is
    merged into the field's (a None in it removes that key), anything else replaces it."""
    for key, value in fields.items():
        if value is None:
            pod_spec.pop(key, None)
        elif isinstance(value, dict):
            merged = {**(pod_spec.get(key) or {}), **value}
            pod_spec[key] = {k: v for k, v in merged.items() if v is not None}
        else:
            pod_spec[key] = value


def _difference(before: Obj, after: Obj) -> Obj:
    """RFC 7386: a merge patch turning ``before`` into ``after``."""
    patch: Obj = {key: None for key in before if key not in after}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            nested = _difference(old, value)
            if nested:
                patch[key] = nested
        elif value != old or key not in before:
            patch[key] = value
    return patch


def finish_rule(kind: str, obj: Obj) -> tuple[bool, str] | None:
    """(succeeded, message) once a workload of another kind has run to its end."""
    status = obj.get("status") or {}
    if kind == "AppWrapper":
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            return phase == "Succeeded", str(phase)
        return None
    done = {"JobSet": ("Completed", "Failed")}.get(kind, ("Succeeded", "Failed"))
    if kind not in OTHER_RESOURCES or kind in GATED or kind == "RayCluster":
        return None  # runs until deleted
    for item in status.get("conditions") or []:
        if item.get("status") == "True" and item.get("type") in done:
            return item.get("type") == done[0], str(item.get("message") or "")
    return None
