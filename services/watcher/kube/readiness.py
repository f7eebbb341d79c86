"""When a workload's pods are ready on Kubernetes (Kueue's PodsReady, for waitForPodsReady),
read from the objects the watcher already watches, as Kueue's job integrations read it, and
what the watcher reports of it (:class:`Readiness`, only while waitForPodsReady is enabled:
services/watcher/pods_ready_gate.py): the first readiness of an admission, then each loss of
readiness (recoveryTimeout counts from it) and each recovery.

Every kind the Kubernetes backend admits is read (:func:`pods_ready`); a pod group from its
member pods (:func:`group_ready`). What Kueue's rule for a kind sees is all that is seen: a
Kubeflow job or MPIJob is ready while its ``Running`` condition is True, so a pod that fails
and is restarted there is a loss of readiness only if the operator drops that condition
(docs/admission-checks.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.watcher import reporting
from services.watcher.kube.patching import admitted_generation, evicted_generation
from services.watcher.pods_ready_gate import PodsReadyGate, as_it_stands
from shared.events import WorkloadPodsReady, WorkloadRef, now
from shared.logging import get_logger
from shared.pod_groups import pod_group
from shared.workload_fields import WorkloadError

if TYPE_CHECKING:
    from services.watcher.kube.gating import Gating

__all__ = ["Readiness", "group_ready", "pods_ready"]

log = get_logger("watcher.kube")

Obj = dict[str, Any]

# Kinds whose readiness is a True condition of their status (Kueue: the training operator's
# JobRunning for the Kubeflow jobs and MPIJob, AppWrapper's PodsReady).
_CONDITION = {
    "PyTorchJob": "Running",
    "TFJob": "Running",
    "XGBoostJob": "Running",
    "PaddleJob": "Running",
    "JAXJob": "Running",
    "MPIJob": "Running",
    "AppWrapper": "PodsReady",
}
# Kinds whose controller counts its ready pods (replicas; a LeaderWorkerSet's ready groups).
_REPLICATED = ("Deployment", "StatefulSet", "LeaderWorkerSet")
RAY_READY = "ready"  # ray.io's ClusterState Ready


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _condition_true(status: Obj, kind: str) -> bool:
    return any(
        isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def pods_ready(kind: str, obj: Obj) -> bool | None:
    """Whether the workload's pods are ready, Kueue's rule per job integration; None for a
    Pod of a group (its group decides: :func:`group_ready`) or a kind Berth does not know.

    - a Job (``Job.PodsReady``): ready + succeeded pods (counted or not yet) reach its pod
      count, ``parallelism`` or ``completions`` if that is smaller;
    - a Pod (not of a group): its ``Ready`` condition is True;
    - a JobSet: ready + succeeded jobs of its replicated jobs equal their replicas;
    - a RayJob: its cluster's state (``status.rayClusterStatus.state``) is ``ready``; a
      RayCluster: its ``status.state``;
    - the Kubeflow jobs and MPIJob: condition ``Running`` True; an AppWrapper: ``PodsReady``;
    - a Deployment, StatefulSet or LeaderWorkerSet (pods, or groups, Berth ungates):
      ``status.readyReplicas`` reaches ``spec.replicas`` (default 1), all of them ready as
      Kueue's pod groups require.
    """
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    if kind == "Job":
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
            return None  # a group's readiness is the whole group's (group_ready)
        return _condition_true(status, "Ready")
    if kind == "JobSet":
        replicas = sum(_int(r.get("replicas"), 1) for r in spec.get("replicatedJobs") or [])
        ready = sum(
            _int(s.get("ready")) + _int(s.get("succeeded"))
            for s in status.get("replicatedJobsStatus") or []
        )
        return ready == replicas
    if kind == "RayJob":
        return (status.get("rayClusterStatus") or {}).get("state") == RAY_READY
    if kind == "RayCluster":
        return status.get("state") == RAY_READY
    if kind in _CONDITION:
        return _condition_true(status, _CONDITION[kind])
    if kind in _REPLICATED:
        return _int(status.get("readyReplicas")) >= _int(spec.get("replicas"), 1)
    return None


def group_ready(pods: list[Obj], total: int) -> bool:
    """A pod group's readiness (Kueue's pod integration for a group): all ``total`` of its
    pods exist and each one's ``Ready`` condition is True."""
    return len(pods) >= total and all(
        _condition_true(pod.get("status") or {}, "Ready") for pod in pods
    )


class Readiness:
    """What the watcher saw of each running admission's readiness: uid -> (workload,
    generation, ready as last seen). Only transitions are reported, so an object seen again
    and again (every status change of a Job) reports nothing new; while reports are off
    (``gate``) they are only seen, and sent as they stand once on (:meth:`current`)."""

    def __init__(self) -> None:
        self.reported: dict[str, tuple[WorkloadRef, int, bool]] = {}
        # Whether reports are sent: while not, only ``reported`` changes (pods_ready_gate.py).
        self.gate = PodsReadyGate()

    def observe(
        self, ref: WorkloadRef, generation: int, ready: bool | None, *, queue: str
    ) -> list[WorkloadPodsReady]:
        """The reports for an admitted generation seen ``ready`` (None: cannot tell, nothing):
        its first readiness; after that, a loss of readiness and a recovery, each once. A
        generation never ready reports nothing while not ready (the admission's clock runs)."""
        if ready is None or generation <= 0:
            return []
        before = self.reported.get(ref.uid)
        if before is None or before[1] != generation:
            if not ready:
                return []
            self.reported[ref.uid] = (ref, generation, True)
            log.info("pods_ready", workload=ref.key, queue=queue, generation=generation)
            return [reporting.pods_ready(ref, generation)] if self.gate.open else []
        if before[2] == ready:
            return []
        self.reported[ref.uid] = (ref, generation, ready)
        log.info(
            "pods_ready" if ready else "pods_not_ready",
            workload=ref.key,
            queue=queue,
            generation=generation,
            reason="recovered" if ready else "pods that were ready are not any more",
        )
        if not self.gate.open:
            return []  # seen only: sent as it stands once reports are on (current)
        return [reporting.pods_ready(ref, generation, ready=ready, first=False)]

    def group(self, pod: Obj, groups: Gating) -> list[WorkloadPodsReady]:
        """The reports for the formed, admitted pod group that ``pod`` (just seen) is of:
        its readiness is all its pods' (:func:`group_ready`)."""
        try:
            found = pod_group(pod)
        except WorkloadError:
            return []
        if found is None:
            return []
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        group = groups.named(namespace, found[0])
        if group is None:
            return []
        if admitted_generation(group) <= evicted_generation(group):
            self.forget(str(group["metadata"]["uid"]))  # evicted: no readiness to send
            return []
        ready = group_ready(groups.pods_of(group), found[1])
        queue = str((group["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name", ""))
        ref = reporting.ref_of(group)
        return self.observe(ref, admitted_generation(group), ready, queue=queue)

    def forget(self, uid: str) -> None:
        self.reported.pop(uid, None)

    def current(self) -> list[WorkloadPodsReady]:
        """Each running admission's readiness as it stands (:func:`as_it_stands`), sent when
        reports are turned on (services/watcher/pods_ready_gate.py)."""
        at = now()
        return [
            report
            for ref, generation, ready in self.reported.values()
            for report in as_it_stands(ref, generation, ready, at)
        ]
