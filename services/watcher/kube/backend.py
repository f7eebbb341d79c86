"""The watcher's cluster backend: Jobs, Pods and RayJobs in a real Kubernetes.

Same duties as the local backend, same reports (see :mod:`services.watcher.reporting`):

- list-watch batch/v1 Jobs, v1 Pods and ray.io/v1 RayJobs in each managed namespace
  (:mod:`.namespaces`: ``BERTH_MANAGED_NAMESPACES``, else cluster-wide); one is *ours* if it carries
  ``kueue.x-k8s.io/queue-name`` or lives in a namespace with a LocalQueue named ``default``
  (the config bucket says which). A Job or RayJob created running is suspended at once;
  each new one is reported as ``WorkloadSubmitted``;
- consume admission's and preemption's decisions and recovery's and the CLI's commands
  (durable consumer ``watcher``, :data:`~services.watcher.backend.COMMAND_SUBJECTS`) and carry
  them out (:mod:`.acting`): conditional patches (:mod:`.patching`), reporting
  ``WorkloadStarted`` / ``WorkloadEvicted``; objects created and deleted (:mod:`.creating`);
- report ``WorkloadFinished`` (Job Complete/Failed, Pod Succeeded/Failed, RayJob
  SUCCEEDED/FAILED), ``WorkloadDeleted``, and ``WorkloadEvicted(reason="Preempted")`` when
  Kubernetes itself disrupted a pod of a managed job (so recovery requeues it);
- report ``WorkloadFinished`` with the exit code of a managed job's failed pod, when seen;
- mirror Namespaces and Kueue's configuration kinds into the config bucket (:mod:`.mirroring`);
- answer ``berth.api.watcher.logs`` from the pods' logs through the API server (:mod:`.logs`);
- write what Kueue would (Workloads, queue status, Events on the Job), rate-limited, in a
  task of its own (:mod:`.kueue_status`);
- list-watch those Workloads: a ``spec.active`` set by someone else (kueuectl's ``stop|resume
  workload``) is published as the CLI's ``SetWorkloadActive`` (:mod:`.active`).

Ready once every initial list is done (a CRD that is not installed counts as an empty list).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from services.watcher import metrics, reporting
from services.watcher.backend import COMMAND_SUBJECTS, carry_out
from services.watcher.command_order import create_stands
from services.watcher.kube.acting import WORKLOAD_RESOURCES, KubeActions, Tracked
from services.watcher.kube.active import ActiveFollower
from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.creating import DEFAULT_IMAGE
from services.watcher.kube.default_queues import DefaultQueues
from services.watcher.kube.errors import KubeError, KubeRefused
from services.watcher.kube.kueue_status import WORKLOADS, KueueStatusWriter, StatusSettings
from services.watcher.kube.logs import serve_pod_logs
from services.watcher.kube.mirroring import CONFIG_RESOURCES, ConfigMirror, follow_config
from services.watcher.kube.namespaces import ALL_NAMESPACES, ManagedNamespaces, ignored
from services.watcher.kube.patching import (
    FINISHED_ANNOTATION,
    admitted_generation,
    converge,
    evicted_generation,
    finished_generation,
    mark_finished_plan,
    suspend_plan,
)
from services.watcher.kube.readiness import Readiness, pods_ready
from services.watcher.kube.reading import (
    FinishMark,
    Report,
    controller,
    finish_outcome,
    gated,
    managed_failure,
)
from services.watcher.kube.watching import (
    EventType,
    Listed,
    WatchEvent,
    WatchSettings,
    watch_objects,
)
from services.watcher.pods_ready_gate import follow_pods_ready_setting
from shared.bus import CONFIG_BUCKET, BucketWatch
from shared.deadletter import dead_letters
from shared.events import (
    AnyEvent,
    CreateWorkload,
    DeleteWorkload,
    Event,
    EvictionRequested,
    RemoveWorkload,
    SubmitWorkload,
    WorkloadAdmitted,
)
from shared.logging import get_logger
from shared.service import Runtime
from shared.workloads import WorkloadError, check_identity, workload_spec

__all__ = ["KubernetesBackend"]

log = get_logger("watcher.kube")

TOMBSTONES = 10_000  # deleted workloads remembered, so a late decision still finds its kind

Obj = dict[str, Any]


class KubernetesBackend:
    def __init__(
        self,
        runtime: Runtime,
        *,
        client: KubeClient,
        settings: WatchSettings | None = None,
        concurrency: int = 16,
        config_resources: dict[str, list[Resource]] | None = None,
        image: str = DEFAULT_IMAGE,
        status: StatusSettings | None = None,
        namespaces: ManagedNamespaces = ALL_NAMESPACES,
    ) -> None:
        self.runtime = runtime
        self.bus = runtime.bus
        self.client = client
        self.settings = settings or WatchSettings()
        self.concurrency = concurrency
        self.config_resources = CONFIG_RESOURCES if config_resources is None else config_resources
        self.namespaces = namespaces
        self.letters = dead_letters(self.bus, self.runtime.name)
        self.tracked = Tracked()
        self.workloads = self.tracked.workloads  # uid -> newest object of each workload
        self.tombstones = self.tracked.tombstones
        self.reported = self.tracked.reported
        self.readiness = Readiness()  # waitForPodsReady facts reported (readiness.py)
        self.actions = KubeActions(
            client,
            self.tracked,
            image=image,
            namespaces=namespaces,
            letters=self.letters,
            bus=self.bus,
        )
        status = status or StatusSettings()
        self.active = ActiveFollower(self.bus)  # spec.active set on Workloads (active.py)
        self.status = KueueStatusWriter(
            runtime.bus,
            client,
            self.workloads,
            settings=status,
            namespaces=namespaces,
            observed=self.active.observed,
        )
        self.unqueued: dict[str, Obj] = {}  # uid -> top-level objects without a queue (yet)
        self.announced: set[str] = set()
        # Owner uid -> exit code of its managed pod that failed (reported with the finish).
        self.exit_codes: dict[str, int] = {}
        self.default_queues = DefaultQueues()
        self.ignored: set[str] = set()  # uids seen outside the managed namespaces (logged)
        self.synced: dict[str, asyncio.Event] = {}
        self.mirror: ConfigMirror | None = None

    # --- lifecycle ------------------------------------------------------------------------

    async def observe(self) -> None:
        # Before any object is seen: whether readiness is reported.
        await follow_pods_ready_setting(self.runtime, self.readiness.gate, self.readiness.current)
        config_kv = await self.bus.kv(CONFIG_BUCKET)
        self.mirror = ConfigMirror(config_kv, malformed=self._malformed_config)
        queues, initial = await BucketWatch.start(config_kv)
        tasks: list[asyncio.Task[None]] = []
        logs = None
        try:
            # Default LocalQueues first: they decide which unlabelled workloads are ours.
            for entry in initial:
                self.default_queues.note(entry)
            follow_queues = self.default_queues.follow(
                queues, self._queue_gained, stopping=self.runtime.stopping
            )
            tasks.append(asyncio.create_task(follow_queues, name="kube.queues"))
            # One list-watch per resource and managed namespace (cluster-wide if all are).
            for kind, resource in WORKLOAD_RESOURCES.items():
                for namespace in self.namespaces.scopes(resource):
                    synced = self.synced[f"{kind}.{namespace}"] = asyncio.Event()
                    follow = self._follow_workloads(kind, resource, namespace, synced)
                    tasks.append(asyncio.create_task(follow, name=f"kube.{kind}.{namespace}"))
            for namespace in self.namespaces.scopes(WORKLOADS):  # kueuectl stop|resume
                synced = self.synced[f"Workload.{namespace}"] = asyncio.Event()
                active = self.active.follow(
                    self.client,
                    WORKLOADS,
                    namespace=namespace,
                    settings=self.settings,
                    synced=synced,
                )
                tasks.append(asyncio.create_task(active, name=f"kube.Workload.{namespace}"))
            for kind, alternatives in self.config_resources.items():
                for namespace in self.namespaces.scopes(alternatives[0]):
                    synced = self.synced[f"config.{kind}.{namespace}"] = asyncio.Event()
                    follow = follow_config(
                        self.client,
                        self.mirror,
                        kind,
                        alternatives,
                        settings=self.settings,
                        synced=synced,
                        namespace=namespace,
                    )
                    tasks.append(asyncio.create_task(follow, name=f"kube.{kind}.{namespace}"))
            all_synced = asyncio.create_task(self._all_synced(), name="kube.synced")
            if not await self._supervise([*tasks, all_synced], until=all_synced):
                return
            subscription = await self.bus.durable_subscription("watcher", COMMAND_SUBJECTS)
            logs = await serve_pod_logs(self.bus, self.client, self.namespaces)
            tasks.append(
                asyncio.create_task(
                    self.bus.consume(
                        subscription, self._on_decisions, stopping=self.runtime.stopping
                    ),
                    name="kube.decisions",
                )
            )
            self.runtime.spawn(self.status.run(self.runtime.stopping), name="kube.status")
            self.runtime.set_ready()
            await self._supervise(tasks, until=None)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await queues.stop()
            if logs is not None:
                await logs.unsubscribe()

    async def _all_synced(self) -> None:
        await asyncio.gather(*(event.wait() for event in self.synced.values()))

    async def _supervise(
        self, tasks: list[asyncio.Task[None]], *, until: asyncio.Task[None] | None
    ) -> bool:
        """Wait for ``until`` (True), or the stop flag (False); a crashed task is re-raised."""
        stop = asyncio.create_task(self.runtime.stopping.wait())
        try:
            pending: set[asyncio.Task[Any]] = {stop, *tasks}
            while True:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not stop and not task.cancelled() and task.exception():
                        raise task.exception()  # type: ignore[misc]
                if until is not None and until in done:
                    return True
                if stop in done:
                    return False
        finally:
            stop.cancel()

    # --- workloads ------------------------------------------------------------------------

    async def _follow_workloads(
        self, kind: str, resource: Resource, namespace: str | None, synced: asyncio.Event
    ) -> None:
        stream = watch_objects(
            self.client,
            [resource],
            namespace=namespace,
            settings=self.settings,
            malformed=self._malformed_object,
            check=_identity_problem,
        )
        async with aclosing(stream) as items:
            async for item in items:
                try:
                    if isinstance(item, Listed):
                        await self._on_listed(kind, item, namespace)
                        synced.set()
                    else:
                        await self._on_event(kind, item)
                except KubeError as error:
                    # The next event or re-list of this object tries again.
                    log.warning("workload_handling_failed", kind=kind, error=str(error))

    async def _malformed_object(self, source: str, reason: str, raw: bytes) -> None:
        await self.letters.send("object", source, reason, raw)

    async def _malformed_config(self, source: str, reason: str, raw: bytes) -> None:
        await self.letters.send("config", source, reason, raw)

    async def _on_listed(self, kind: str, listed: Listed, namespace: str | None) -> None:
        events: list[Report] = []
        present: set[str] = set()
        for obj in listed.objects:
            present.add(str(obj["metadata"].get("uid")))
            events += await self._observe(kind, obj)
        # Deleted while we were not watching: the list is the truth, for its namespace.
        for uid, obj in list(self.workloads.items()):
            if obj.get("kind") != kind or uid in present:
                continue
            if namespace is None or obj["metadata"].get("namespace") == namespace:
                events += self._forget(obj)
        await self._publish(events)

    async def _on_event(self, kind: str, event: WatchEvent) -> None:
        if event.type is EventType.DELETED:
            self.unqueued.pop(str(event.object["metadata"].get("uid")), None)
            await self._publish(self._forget(event.object))
        else:
            await self._publish(await self._observe(kind, event.object))

    def _queue_name(self, obj: Obj) -> str | None:
        """The LocalQueue the object asks for, ``default`` by namespace, or None: not ours."""
        metadata = obj.get("metadata") or {}
        for source in (metadata.get("labels") or {}, metadata.get("annotations") or {}):
            if source.get("kueue.x-k8s.io/queue-name"):
                return str(source["kueue.x-k8s.io/queue-name"])
        if metadata.get("namespace") in self.default_queues.namespaces:
            return "default"
        return None

    async def _observe(self, kind: str, obj: Obj) -> list[Report]:
        events: list[Report] = []
        metadata = obj["metadata"]
        if ignored(obj, self.namespaces, self.ignored):
            return events
        if kind == "Pod":
            events += await self.actions.disrupted(obj)
            if (failure := managed_failure(obj)) is not None:
                self.exit_codes[failure[0]] = failure[1]  # reported with the Job's finish
            if (held := await self.actions.gating.pod_seen(obj, self.workloads)) is not None:
                # A pod group's, or a gated Deployment's... (gating.py); a group's readiness.
                return events + held + self.readiness.group(obj, self.actions.gating)
            if controller(obj) is not None:
                return events  # a Job's or RayCluster's pod: its owner is the workload
        uid = str(metadata["uid"])
        queue = self._queue_name(obj)
        if queue is None:
            self.unqueued[uid] = obj
            return events
        self.unqueued.pop(uid, None)
        self.workloads[uid] = obj
        generation = admitted_generation(obj)
        if kind == "Pod" and generation == 0 and not gated(obj):
            # Gates can only be set at creation (by our webhook); this pod runs outside quota.
            if ("ungated", uid, 0) not in self.reported:
                self.reported.add(("ungated", uid, 0))
                log.warning(
                    "pod_not_gated", workload=f"{metadata.get('namespace')}/{metadata['name']}"
                )
            return events
        outcome = finish_outcome(kind, obj)
        ref = reporting.ref_of(obj)
        if outcome is not None:
            self.readiness.forget(uid)  # finished: no readiness to send
            succeeded, message = outcome
            already = FINISHED_ANNOTATION in (metadata.get("annotations") or {}) and (
                finished_generation(obj) >= generation
            )
            if (generation > 0 or uid in self.announced) and not already:
                if ("finished", uid, generation) not in self.reported:
                    self.reported.add(("finished", uid, generation))
                    code = None if succeeded else self.exit_codes.get(uid)
                    events.append(
                        reporting.finished(
                            ref, generation, succeeded=succeeded, exit_code=code, message=message
                        )
                    )
                    metrics.FINISHED.labels(result="Succeeded" if succeeded else "Failed").inc()
                    log.info(
                        "workload_finished",
                        workload=ref.key,
                        queue=queue,
                        succeeded=succeeded,
                        exit_code=code,
                        reason=message,
                    )
                    events.append(FinishMark(kind, ref, generation))
            return events
        if generation > evicted_generation(obj):  # waitForPodsReady: ready, lost, recovered
            events += self.readiness.observe(ref, generation, pods_ready(kind, obj), queue=queue)
        else:
            self.readiness.forget(uid)  # evicted: no readiness to send
        if uid in self.announced:
            return events
        try:
            spec = workload_spec(obj)
        except WorkloadError as error:
            log.error("invalid_workload", workload=ref.key, reason=str(error))
            self.announced.add(uid)  # do not log it again on every update
            return events
        if kind != "Pod" and generation == 0 and suspend_plan(obj) is not None:
            await converge(self.client, WORKLOAD_RESOURCES[kind], ref, suspend_plan)
            log.info("workload_suspended", workload=ref.key, kind=kind)
        events.append(reporting.submitted(obj, spec, queue_name=queue))
        self.announced.add(uid)
        log.info("workload_submitted", workload=ref.key, queue=queue, kind=kind)
        return events

    async def _mark_finished(self, mark: FinishMark) -> None:
        plan = mark_finished_plan(mark.generation)
        try:
            await converge(self.client, WORKLOAD_RESOURCES[mark.kind], mark.ref, plan)
        except KubeError as error:
            log.warning("finish_mark_failed", workload=mark.ref.key, error=str(error))

    def _forget(self, obj: Obj) -> list[Report]:
        uid = str(obj["metadata"].get("uid"))
        known = self.workloads.pop(uid, None)
        if known is None:  # a pod group's pod may take its group with it (gating.py)
            return self.actions.gating.forget(obj) if obj.get("kind") == "Pod" else []
        self.tombstones[uid] = known
        while len(self.tombstones) > TOMBSTONES:
            self.tombstones.popitem(last=False)
        self.announced.discard(uid)
        self.exit_codes.pop(uid, None)
        self.readiness.forget(uid)
        ref = reporting.ref_of(known)
        log.info("workload_deleted", workload=ref.key)
        return [reporting.deleted(ref)]

    # --- decisions ------------------------------------------------------------------------

    async def _on_decisions(self, events: list[AnyEvent]) -> None:
        """Decisions about different workloads run concurrently, one workload's in order (by
        name: the CLI's remove names no uid, and must not overtake a later submit)."""
        by_workload: dict[str, list[AnyEvent]] = {}
        for event in events:
            by_workload.setdefault(event.workload.key, []).append(event)
        limit = asyncio.Semaphore(self.concurrency)

        async def one_workload(decisions: list[AnyEvent]) -> None:
            async with limit:
                for decision in decisions:
                    await self._decide(decision)

        async with asyncio.TaskGroup() as group:
            for decisions in by_workload.values():
                group.create_task(one_workload(decisions))

    async def _decide(self, event: AnyEvent) -> None:
        try:
            await carry_out(self, event)
        except KubeRefused as error:
            # The server will refuse it again: redelivering cannot help. Say so loudly.
            log.error(
                "decision_refused",
                workload=event.workload.key,
                type=type(event).__name__,
                reason=str(error),
            )
        # Other KubeErrors propagate: the batch is handled again a second later.

    # --- the watcher's Backend verbs (services/watcher/backend.py) ------------------------

    async def admit(self, decision: WorkloadAdmitted) -> None:
        obj = self._known(decision)
        if obj is not None:
            await self._publish(await self.actions.admit(obj, decision))

    async def evict(self, decision: EvictionRequested) -> None:
        obj = self._known(decision)
        if obj is not None:
            reports = await self.actions.evict(
                obj, decision.generation, reason=decision.reason, message=decision.message
            )
            await self._publish(reports)

    async def create(self, command: CreateWorkload | SubmitWorkload) -> None:
        if await create_stands(self.bus.js, command):  # not cancelled since it was sent
            await self.actions.create(command)

    async def delete(self, command: DeleteWorkload | RemoveWorkload) -> None:
        await self.actions.delete(command)

    def _known(self, event: WorkloadAdmitted | EvictionRequested) -> Obj | None:
        obj = self.tracked.find(event.workload.uid)
        if obj is None:
            log.info(
                "decision_for_unknown_workload",
                workload=event.workload.key,
                queue=event.cluster_queue,
                type=type(event).__name__,
            )
        return obj

    # --- configuration --------------------------------------------------------------------

    async def _queue_gained(self, namespace: str) -> None:
        """Objects that were not ours a moment ago are now: look at them again."""
        events: list[Report] = []
        for obj in list(self.unqueued.values()):
            if obj["metadata"].get("namespace") == namespace:
                events += await self._observe(str(obj["kind"]), obj)
        await self._publish(events)

    # --- helpers --------------------------------------------------------------------------

    async def _publish(self, reports: list[Report]) -> None:
        """Publish the events, then write the finish marks: a crash in between reports a
        finish twice (under one id), never not at all."""
        await self.bus.publish_many([r for r in reports if isinstance(r, Event)])
        for report in reports:
            if isinstance(report, FinishMark):
                await self._mark_finished(report)


def _identity_problem(obj: Obj) -> str | None:
    """A Job, Pod or RayJob whose name, namespace, uid or creation time is malformed."""
    try:
        check_identity(obj)
    except WorkloadError as error:
        return str(error)
    return None
