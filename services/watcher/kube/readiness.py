"""When a workload's pods are ready on Kubernetes (Kueue's PodsReady, for waitForPodsReady),
read from the objects the watcher already watches, as Kueue's job integrations read it.

Only batch/v1 Jobs and single Pods so far; for every other kind (pod groups, JobSets, the
Kubeflow jobs, RayJobs...) :func:`pods_ready` says None: unknown, so nothing is reported
and waitForPodsReady must stay off for them (docs/admission-checks.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["pods_ready"]

Obj = dict[str, Any]


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def pods_ready(kind: str, obj: Obj) -> bool | None:
    """Whether the workload's pods are ready, or None when Berth cannot tell for this kind.

    - a Job (Kueue's ``Job.PodsReady``): ready + succeeded pods (counted or not yet) reach
      its pod count, ``parallelism`` or ``completions`` if that is smaller;
    - a Pod (not of a group): its ``Ready`` condition is True.
    """
    status = obj.get("status") or {}
    if kind == "Job":
        spec = obj.get("spec") or {}
        count = _int(spec.get("parallelism"), 1)
        completions = spec.get("completions")
        if isinstance(completions, int) and completions < count:
            count = completions
        uncounted = (status.get("uncountedTerminatedPods") or {}).get("succeeded") or []
        done = _int(status.get("ready")) + _int(status.get("succeeded")) + len(uncounted)
        return done >= count
    if kind == "Pod":
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if "kueue.x-k8s.io/pod-group-name" in labels:
            return None  # a group's readiness is the whole group's: not read yet
        for condition in status.get("conditions") or []:
            if isinstance(condition, dict) and condition.get("type") == "Ready":
                return condition.get("status") == "True"
        return False
    return None
