"""The Kubernetes backend's verbs: admit, evict, create and delete workload objects.

Each verb writes through the API server and returns the reports to publish; it never
publishes itself, so the caller keeps one publishing path (and its finish marks). State
shared with observation (the newest object per uid, tombstones, what was reported) is
passed in as a :class:`Tracked`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from services.watcher import metrics, reporting
from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.creating import create_object, delete_object, manifest
from services.watcher.kube.gating import Gating
from services.watcher.kube.kinds import OTHER_RESOURCES, gate_kind
from services.watcher.kube.namespaces import ALL_NAMESPACES, ManagedNamespaces
from services.watcher.kube.patching import (
    JOBS,
    PODS,
    RAYJOBS,
    admit_plan,
    admitted_generation,
    converge,
    evict_plan,
    evicted_generation,
)
from services.watcher.kube.reading import Report, disruption_reason, owning_workload
from services.watcher.kube.task_secrets import prepare_cluster
from shared.bus import Bus
from shared.deadletter import DeadLetters, dead_letter_subject
from shared.events import (
    CreateWorkload,
    DeleteWorkload,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
    encode_event,
    subject_for,
)
from shared.logging import get_logger
from shared.pod_groups import POD_GROUP_KIND
from shared.workloads import MANAGED_JOB_LABEL

__all__ = ["WORKLOAD_RESOURCES", "KubeActions", "Tracked"]

log = get_logger("watcher.kube")

WORKLOAD_RESOURCES: dict[str, Resource] = {
    "Job": JOBS,
    "Pod": PODS,
    "RayJob": RAYJOBS,
    **OTHER_RESOURCES,  # JobSet, the Kubeflow jobs, Deployment...: kinds.py
}

Obj = dict[str, Any]


@dataclass
class Tracked:
    """What observation knows and the verbs read and update."""

    workloads: dict[str, Obj] = field(default_factory=dict)  # uid -> newest object
    tombstones: OrderedDict[str, Obj] = field(default_factory=OrderedDict)
    reported: set[tuple[str, str, int]] = field(default_factory=set)  # (what, uid, generation)
    groups: dict[str, Obj] = field(default_factory=dict)  # uid -> PodGroup (gating.py)

    def find(self, uid: str) -> Obj | None:
        """A workload we track, or remember as deleted (a late decision still finds its kind)."""
        return self.workloads.get(uid) or self.groups.get(uid) or self.tombstones.get(uid)


class KubeActions:
    def __init__(
        self,
        client: KubeClient,
        tracked: Tracked,
        *,
        image: str,
        namespaces: ManagedNamespaces = ALL_NAMESPACES,
        letters: DeadLetters | None = None,
        bus: Bus | None = None,
    ) -> None:
        self.client = client
        self.tracked = tracked
        self.image = image
        self.namespaces = namespaces
        self.letters = letters  # where a create refused for its namespace is kept
        self.gating = Gating(client, tracked.groups)  # pod groups, gated kinds' pods
        self.bus = bus  # where a managed job's secrets are read (task_secrets.py)

    async def admit(self, obj: Obj, event: WorkloadAdmitted) -> list[Report]:
        ref = event.workload
        if obj.get("kind") == POD_GROUP_KIND:
            return await self.gating.admit_group(obj, event)
        resource = WORKLOAD_RESOURCES[str(obj["kind"])]
        plan = admit_plan(event.generation, event.assignments)
        final = await converge(self.client, resource, ref, plan)
        if final is None:
            log.info("admitted_workload_gone", workload=ref.key, generation=event.generation)
            return []
        self.tracked.workloads[ref.uid] = final
        if admitted_generation(final) != event.generation or evicted_generation(final) >= (
            event.generation
        ):
            log.info("admission_overtaken", workload=ref.key, generation=event.generation)
            return []
        if gate_kind(obj.get("kind")):
            await self.gating.release(final)  # its pods: the gate off, the flavor in
        if ("started", ref.uid, event.generation) not in self.tracked.reported:
            self.tracked.reported.add(("started", ref.uid, event.generation))
            metrics.STARTED.inc()
            log.info(
                "workload_started",
                workload=ref.key,
                queue=event.cluster_queue,
                generation=event.generation,
            )
        return [reporting.started(ref, event.generation)]

    async def evict(self, obj: Obj, generation: int, *, reason: str, message: str) -> list[Report]:
        ref = reporting.ref_of(obj)
        kind = str(obj["kind"])
        if kind == POD_GROUP_KIND:
            return await self.gating.evict_group(obj, generation, reason=reason, message=message)
        final = await converge(self.client, WORKLOAD_RESOURCES[kind], ref, evict_plan(generation))
        if final is not None and gate_kind(kind) and admitted_generation(final) == generation:
            await self.gating.stop(final, generation)  # its controller makes them again, gated
        if final is None:
            # Gone: for a Pod that is what eviction means (we deleted it, maybe on an earlier
            # delivery); a deleted Job or RayJob is reported as deleted instead.
            if kind != "Pod" or admitted_generation(obj) != generation:
                return []
        else:
            self.tracked.workloads[ref.uid] = final
            if admitted_generation(final) != generation or evicted_generation(final) < generation:
                log.info("evict_not_running", workload=ref.key, generation=generation)
                return []
        if ("evicted", ref.uid, generation) not in self.tracked.reported:
            self.tracked.reported.add(("evicted", ref.uid, generation))
            metrics.EVICTED.inc()
            log.info("workload_evicted", workload=ref.key, reason=reason, generation=generation)
        return [reporting.evicted(ref, generation, reason=reason, message=message)]

    async def create(self, command: CreateWorkload | SubmitWorkload) -> None:
        """Create the object in the cluster, held until admitted (see :mod:`.creating`).

        The watch then sees it and reports it submitted, as any object a user created.
        """
        ref = command.workload
        kind = str(command.object.get("kind"))
        resource = WORKLOAD_RESOURCES.get(kind)
        if resource is None:
            log.error("create_refused", workload=ref.key, reason=f"unknown kind {kind!r}")
            return
        outside = self.namespaces.refusal(ref.namespace)
        if outside is not None:
            await self._refuse(command, outside)
            return
        await prepare_cluster(self.client, self.bus, ref.namespace, command.object)
        body = manifest(command.object, requested_uid=ref.uid, image=self.image)
        queue = body["metadata"]["labels"].get("kueue.x-k8s.io/queue-name")
        if await create_object(self.client, resource, ref, body):
            log.info(
                "workload_created", workload=ref.key, queue=queue, kind=kind, by=command.source
            )
        else:
            log.error(
                "create_conflict",
                workload=ref.key,
                queue=queue,
                reason="another object holds the name",
            )

    async def _refuse(self, command: CreateWorkload | SubmitWorkload, reason: str) -> None:
        """The Role is not in that namespace: the server would say 403, every time. One log
        line, and the command kept whole as a dead letter, to be sent again once the
        namespace is managed."""
        subject = dead_letter_subject(self.letters.service, "event") if self.letters else None
        log.error(
            "create_refused",
            workload=command.workload.key,
            by=command.source,
            reason=reason,
            dead_letter=subject,
        )
        if self.letters is not None:
            raw, source = encode_event(command), subject_for(command)
            await self.letters.send("event", source, reason, raw, identity=command.id, logged=True)

    async def delete(self, command: DeleteWorkload | RemoveWorkload) -> None:
        """Delete the object by name (the one the command means: see :mod:`.creating`)."""
        ref = command.workload
        outside = self.namespaces.refusal(ref.namespace)
        if outside is not None:
            log.error("delete_refused", workload=ref.key, by=command.source, reason=outside)
            return  # nothing of it can be there: its create was refused alike
        known = self.tracked.find(ref.uid) if ref.uid else None
        group = self.gating.named(ref.namespace, ref.name)
        if group is not None and (known is None or known is group):
            for pod in self.gating.pods_of(group):  # a pod group is its pods
                await delete_object(self.client, PODS, reporting.ref_of(pod))
            log.info("workload_deleting", workload=ref.key, kind=POD_GROUP_KIND, by=command.source)
            return
        kinds = [str(known["kind"])] if known else list(WORKLOAD_RESOURCES)
        for kind in kinds:  # a name alone may be any kind: try each until one is deleted
            if await delete_object(self.client, WORKLOAD_RESOURCES[kind], ref):
                log.info("workload_deleting", workload=ref.key, kind=kind, by=command.source)
                return
        log.info("delete_nothing", workload=ref.key, reason="no such object (deleted already?)")

    async def disrupted(self, pod: Obj) -> list[Report]:
        """A managed job's pod that Kubernetes disrupted (scheduler preemption, node loss)
        evicts its owner as ``Preempted``, once per admitted generation, so recovery
        counts it as a preemption and brings the job back."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if MANAGED_JOB_LABEL not in labels:
            return []
        reason = disruption_reason(pod)
        owner = owning_workload(pod, self.tracked.workloads) if reason is not None else None
        if owner is None:
            return []
        generation = admitted_generation(owner)
        uid = str(owner["metadata"]["uid"])
        if generation == 0 or ("disrupted", uid, generation) in self.tracked.reported:
            return []
        self.tracked.reported.add(("disrupted", uid, generation))
        message = f"pod {pod['metadata']['name']} was disrupted by Kubernetes ({reason})"
        log.warning("managed_pod_disrupted", workload=reporting.ref_of(owner).key, reason=reason)
        return await self.evict(owner, generation, reason="Preempted", message=message)
