"""Workloads held by scheduling gates on their pods, as Kueue's pod integration holds them.

Two cases, both admitted whole or not at all:

- *gated kinds* (Deployment, StatefulSet, LeaderWorkerSet): the object is the workload and
  its pod templates carry the ``kueue.x-k8s.io/admission`` gate (:mod:`.creating`,
  :mod:`.webhook`), so its controller's pods are born gated. Admission records the flavors
  on the object (:mod:`.patching`) and :meth:`Gating.release` removes the gate from each of
  its pods, injecting the flavor's node labels and tolerations (a gated pod's scheduling
  fields may still be added to); a pod made later (a replacement) is released when it is
  seen (:meth:`Gating.pod_seen`). Eviction deletes its pods (:meth:`Gating.stop`); the
  controller makes them again, gated, and they wait for the next admission.
- *pod groups*: plain Pods labelled ``kueue.x-k8s.io/pod-group-name`` (each gated by the
  webhook). Once all ``total-count`` exist they are one ``PodGroup`` workload
  (:func:`shared.pod_groups.group_object`), kept here, not in the API: admitting it ungates
  every member, evicting it deletes every member; it finishes when all its pods have
  (succeeded if all succeeded), and is deleted when its pods are gone.

A pod's parent: a LeaderWorkerSet by its ``leaderworkerset.sigs.k8s.io/name`` label, a
StatefulSet by its controller, a Deployment by the controlling ReplicaSet's name
(``<deployment>-<pod-template-hash>``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from services.watcher import reporting
from services.watcher.kube.api import KubeClient
from services.watcher.kube.errors import KubeConflict, KubeNotFound
from services.watcher.kube.patching import (
    ADMISSION_ANNOTATION,
    ADMITTED_ANNOTATION,
    PODS,
    admit_plan,
    admitted_generation,
    converge,
    evict_plan,
    evicted_generation,
)
from services.watcher.kube.reading import Report, controller, gated
from shared.events import FlavorAssignment, WorkloadAdmitted
from shared.logging import get_logger
from shared.pod_groups import group_object, pod_group, pod_group_templates
from shared.workload_fields import WorkloadError
from shared.workloads import workload_spec

__all__ = ["Gating"]

log = get_logger("watcher.kube")

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

Obj = dict[str, Any]


def _group_of(pod: Obj) -> tuple[str, int] | None:
    if controller(pod) is not None:
        return None
    try:
        return pod_group(pod)
    except WorkloadError:
        return None


def belongs(pod: Obj, parent: Obj) -> bool:
    """Whether ``pod`` was made for the gated workload ``parent`` (see the module docstring)."""
    metadata = pod.get("metadata") or {}
    name = (parent.get("metadata") or {}).get("name")
    if metadata.get("namespace") != (parent.get("metadata") or {}).get("namespace"):
        return False
    labels = metadata.get("labels") or {}
    if parent.get("kind") == "LeaderWorkerSet":
        return labels.get(LWS_NAME_LABEL) == name
    owner = controller(pod) or {}
    if parent.get("kind") == "StatefulSet":
        return owner.get("kind") == "StatefulSet" and owner.get("name") == name
    hash_label = labels.get("pod-template-hash")
    return bool(
        parent.get("kind") == "Deployment"
        and owner.get("kind") == "ReplicaSet"
        and hash_label
        and owner.get("name") == f"{name}-{hash_label}"
    )


def _pod_set(pod: Obj, parent: Obj) -> str:
    """The parent's pod set a pod stands for (a LeaderWorkerSet's leader is worker 0)."""
    if parent.get("kind") != "LeaderWorkerSet":
        return "main"
    template = ((parent.get("spec") or {}).get("leaderWorkerTemplate")) or {}
    if template.get("leaderTemplate") is None:
        return "main"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return "leader" if labels.get(LWS_WORKER_INDEX_LABEL, "0") == "0" else "worker"


def _as_main(assignment: FlavorAssignment | None) -> list[FlavorAssignment]:
    """A pod set's assignment, renamed for a Pod (whose one pod set is ``main``)."""
    return [] if assignment is None else [msgspec.structs.replace(assignment, pod_set="main")]


class Gating:
    def __init__(self, client: KubeClient, groups: dict[str, Obj]) -> None:
        self.client = client
        self.members: dict[tuple[str, str], dict[str, Obj]] = {}  # (ns, group) -> uid -> pod
        self.groups = groups  # PodGroup uid -> PodGroup (formed); Tracked.groups
        self.reported: set[tuple[str, str, int]] = set()

    # --- pods, as observation sees them ---------------------------------------------------

    async def pod_seen(self, pod: Obj, workloads: dict[str, Obj]) -> list[Report] | None:
        """Reports for a pod this module handles; None for any other pod."""
        group = _group_of(pod)
        if group is not None:
            return self._member(pod, *group)
        owner = controller(pod)
        if (
            not gated(pod)
            or owner is None
            or owner.get("kind") not in ("ReplicaSet", "StatefulSet")
        ):
            return None
        parent = next((w for w in workloads.values() if belongs(pod, w)), None)
        if parent is None or admitted_generation(parent) <= evicted_generation(parent):
            return None  # not ours, or not admitted: it stays gated
        await self._ungate(pod, parent, admitted_generation(parent))
        return []

    def forget(self, pod: Obj) -> list[Report]:
        """A deleted pod: a group whose pods are all gone is deleted."""
        group = _group_of(pod)
        if group is None:
            return []
        namespace = str(pod["metadata"].get("namespace") or "default")
        members = self.members.get((namespace, group[0]), {})
        members.pop(str(pod["metadata"].get("uid")), None)
        if members:
            return []
        self.members.pop((namespace, group[0]), None)
        formed = [g for g in self.groups.values() if _key(g) == (namespace, group[0])]
        for obj in formed:
            del self.groups[str(obj["metadata"]["uid"])]
            log.info("workload_deleted", workload=f"{namespace}/{group[0]}", kind="PodGroup")
        return [reporting.deleted(reporting.ref_of(obj)) for obj in formed]

    def _member(self, pod: Obj, name: str, total: int) -> list[Report]:
        namespace = str(pod["metadata"].get("namespace") or "default")
        members = self.members.setdefault((namespace, name), {})
        members[str(pod["metadata"].get("uid"))] = pod
        formed = next((g for g in self.groups.values() if _key(g) == (namespace, name)), None)
        if formed is not None:
            return self._finished(formed)
        if len(members) < total:
            return []
        chosen = sorted(members.values(), key=lambda p: str(p["metadata"]["name"]))[:total]
        group = group_object(namespace, name, chosen)
        generations = [admitted_generation(p) for p in chosen]
        if max(generations):  # admitted before a restart of ours: carry on from there
            group["metadata"]["annotations"][ADMITTED_ANNOTATION] = str(max(generations))
        self.groups[str(group["metadata"]["uid"])] = group
        log.info("workload_submitted", workload=f"{namespace}/{name}", kind="PodGroup")
        return [reporting.submitted(group, workload_spec(group)), *self._finished(group)]

    def _finished(self, group: Obj) -> list[Report]:
        generation = admitted_generation(group)
        phases = [(p.get("status") or {}).get("phase") for p in self._pods(group)]
        if not generation or not phases or any(p not in ("Succeeded", "Failed") for p in phases):
            return []
        uid = str(group["metadata"]["uid"])
        if ("finished", uid, generation) in self.reported:
            return []
        self.reported.add(("finished", uid, generation))
        succeeded = all(phase == "Succeeded" for phase in phases)
        message = "" if succeeded else f"{phases.count('Failed')} of its pods failed"
        ref = reporting.ref_of(group)
        return [reporting.finished(ref, generation, succeeded=succeeded, message=message)]

    def _pods(self, group: Obj) -> list[Obj]:
        """The group's pods as last seen (its members, newest state)."""
        known = self.members.get(_key(group), {})
        uids = [str(p["metadata"].get("uid")) for p in group["spec"]["pods"]]
        return [known[uid] for uid in uids if uid in known]

    # --- decisions ----------------------------------------------------------------------

    async def admit_group(self, group: Obj, event: WorkloadAdmitted) -> list[Report]:
        """Ungate every pod of the group with its shape's flavor; Started once all are."""
        if admitted_generation(group) >= event.generation:
            return []
        by_set = {a.pod_set: a for a in event.assignments}
        for pod in self._pods(group):
            shape = pod_group_templates({}, {"pods": [pod]})[0].name  # its pod set: its shape
            await converge(
                self.client,
                PODS,
                reporting.ref_of(pod),
                admit_plan(event.generation, _as_main(by_set.get(shape))),
            )
        group["metadata"]["annotations"][ADMITTED_ANNOTATION] = str(event.generation)
        log.info("workload_started", workload=reporting.ref_of(group).key, kind="PodGroup")
        return [reporting.started(reporting.ref_of(group), event.generation)]

    async def evict_group(
        self, group: Obj, generation: int, *, reason: str, message: str
    ) -> list[Report]:
        """Delete every pod of the group (a Pod cannot be suspended)."""
        if admitted_generation(group) != generation:
            return []
        for pod in self._pods(group):
            await converge(self.client, PODS, reporting.ref_of(pod), evict_plan(generation))
        log.info("workload_evicted", workload=reporting.ref_of(group).key, reason=reason)
        return [
            reporting.evicted(reporting.ref_of(group), generation, reason=reason, message=message)
        ]

    async def release(self, parent: Obj) -> None:
        """Ungate the gated pods of an admitted gated-kind workload."""
        generation = admitted_generation(parent)
        for pod in await self._children(parent):
            if gated(pod):
                await self._ungate(pod, parent, generation)

    async def stop(self, parent: Obj, generation: int) -> None:
        """Delete the pods of an evicted gated-kind workload; its controller makes them
        again, gated."""
        for pod in await self._children(parent):
            metadata = pod["metadata"]
            try:
                await self.client.delete(
                    PODS,
                    namespace=str(metadata.get("namespace")),
                    name=str(metadata["name"]),
                    preconditions={"uid": str(metadata.get("uid"))},
                )
            except (KubeNotFound, KubeConflict) as error:  # gone, or replaced: not ours to stop
                log.info("pod_delete_skipped", pod=metadata["name"], reason=str(error))
        log.info(
            "workload_pods_deleted", workload=reporting.ref_of(parent).key, generation=generation
        )

    def named(self, namespace: str, name: str) -> Obj | None:
        """The formed group of that name (a `berth delete workload` names no uid)."""
        return next((g for g in self.groups.values() if _key(g) == (namespace, name)), None)

    def pods_of(self, group: Obj) -> list[Obj]:
        return self._pods(group)

    async def _children(self, parent: Obj) -> list[Obj]:
        namespace = str(parent["metadata"].get("namespace") or "default")
        pods, _ = await self.client.list(PODS, namespace=namespace)
        return [pod for pod in pods if belongs(pod, parent)]

    async def _ungate(self, pod: Obj, parent: Obj, generation: int) -> None:
        text = ((parent.get("metadata") or {}).get("annotations") or {}).get(ADMISSION_ANNOTATION)
        flavors = json.loads(text) if text else {}
        found = flavors.get(_pod_set(pod, parent))
        assignment = msgspec.convert(found, FlavorAssignment) if found else None
        await converge(
            self.client, PODS, reporting.ref_of(pod), admit_plan(generation, _as_main(assignment))
        )


def _key(group: Obj) -> tuple[str, str]:
    return str(group["metadata"].get("namespace")), str(group["metadata"]["name"])
