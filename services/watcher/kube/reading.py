"""Reading what an object's status says: who controls it, did it finish, was it disrupted.

Pure functions over the API's JSON, shared by observation (:mod:`.backend`) and the verbs
that act on objects (:mod:`.acting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.watcher.kube.kinds import finish_rule
from services.watcher.kube.patching import ADMISSION_GATE
from shared.events import Event, WorkloadRef
from shared.workloads import MANAGED_JOB_LABEL

__all__ = [
    "DISRUPTION_REASONS",
    "FinishMark",
    "Report",
    "condition",
    "controller",
    "disruption_reason",
    "failed_exit_code",
    "finish_outcome",
    "gated",
    "managed_failure",
    "owning_workload",
]

# DisruptionTarget reasons that mean "Kubernetes took the pod away", not "the job failed":
# scheduler preemption, node loss (taint manager, pod GC of a vanished node), node shutdown.
DISRUPTION_REASONS = frozenset(
    {"PreemptionByScheduler", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"}
)

Obj = dict[str, Any]


@dataclass(frozen=True)
class FinishMark:
    """To do after publishing: annotate the object so a re-list does not report it again."""

    kind: str
    ref: WorkloadRef
    generation: int


Report = Event | FinishMark


def controller(obj: Obj) -> Obj | None:
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return dict(owner)
    return None


def gated(pod: Obj) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == ADMISSION_GATE for gate in gates)


def condition(obj: Obj, kind: str) -> Obj | None:
    """The object's condition of type ``kind`` if it is True, else None."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind and item.get("status") == "True":
            return dict(item)
    return None


def disruption_reason(pod: Obj) -> str | None:
    """Why Kubernetes took the pod away (scheduler preemption, node loss), or None."""
    found = condition(pod, "DisruptionTarget")
    if found is None or found.get("reason") not in DISRUPTION_REASONS:
        return None
    return str(found["reason"])


def failed_exit_code(pod: Obj) -> int | None:
    """The first non-zero exit code among the pod's terminated containers, or None.

    Why: a Job's Failed condition says only "BackoffLimitExceeded"; recovery needs the code
    (a failed `setup:` exits 86 and is FAILED_SETUP, not a retryable failure).
    """
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        terminated = (status.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if isinstance(code, int) and code != 0:
            return code
    return None


def managed_failure(pod: Obj) -> tuple[str, int] | None:
    """(owning Job's uid, exit code) of a managed job's failed pod, for the Job's finish
    report; None for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    code = failed_exit_code(pod) if MANAGED_JOB_LABEL in labels else None
    owner = controller(pod) if code is not None else None
    if code is None or owner is None or owner.get("kind") != "Job":
        return None
    return str(owner.get("uid")), code


def finish_outcome(kind: str, obj: Obj) -> tuple[bool, str] | None:
    """(succeeded, message) once the workload has run to its end; None while it has not."""
    status = obj.get("status") or {}
    if kind == "Job":
        for condition_type, succeeded in (("Complete", True), ("Failed", False)):
            found = condition(obj, condition_type)
            if found is not None:
                return succeeded, str(found.get("message") or "")
        return None
    if kind == "Pod":
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            return phase == "Succeeded", str(status.get("message") or "")
        return None
    if kind != "RayJob":
        return finish_rule(kind, obj)  # every other kind (kinds.py)
    job_status = status.get("jobStatus")
    if job_status in ("SUCCEEDED", "FAILED"):
        return job_status == "SUCCEEDED", str(status.get("message") or "")
    return None


def owning_workload(pod: Obj, workloads: dict[str, Obj]) -> Obj | None:
    """The tracked workload (uid -> object) a pod belongs to: itself (a Pod workload), its
    controlling Job, or the RayJob whose RayCluster controls it."""
    owner = controller(pod)
    if owner is None:
        return workloads.get(str(pod["metadata"].get("uid")))
    if owner.get("kind") == "Job":
        return workloads.get(str(owner.get("uid")))
    if owner.get("kind") == "RayCluster":
        namespace = pod["metadata"].get("namespace")
        for obj in workloads.values():
            status = obj.get("status") or {}
            if (
                obj.get("kind") == "RayJob"
                and obj["metadata"].get("namespace") == namespace
                and status.get("rayClusterName") == owner.get("name")
            ):
                return obj
    return None
