"""What Kueue would write, written for kubectl and Kueue's tools: Workloads, queue status, Events.

Needs Kueue's CRDs (not its controller). At start the writer checks which of its views the
server serves (``kueue.x-k8s.io/v1beta2`` workloads, clusterqueues, localqueues) and says once
in its log which are off. Then:

- a ``Workload`` per workload we track, named as Kueue names them (``job-<name>-<hash>``),
  owned by the Job (so the cluster's garbage collector deletes it with the Job), with
  ``spec.podSets`` (the Job's pod template, count), ``queueName``, ``priority``, and the status
  admission renders for ``berth get -o json`` (conditions QuotaReserved, Admitted, Evicted,
  Preempted, Requeued, Finished with Kueue's reasons; ``admission`` with flavors per pod
  set; ``spec.active`` with the annotation that says Berth wrote it, :mod:`.active`), asked of
  admission's status API (``berth.api.admission.workloads``): one shape, one
  place that builds it;
- ClusterQueue and LocalQueue ``status`` as admission's API renders it (pending, reserving and
  admitted counts, flavorsReservation/flavorsUsage, the Active condition; fair sharing's
  weightedShare and a LocalQueue's admissionFairSharingStatus), and a Cohort's (its
  ``fairSharing.weightedShare`` with fair sharing on), written at start and after events;
- Kubernetes Events on the Job like Kueue's: ``Pending`` (with the reason), ``QuotaReserved``,
  ``Admitted``, ``Preempted`` (naming the preemptor in Kueue's words, :mod:`.preemptors`),
  ``Evicted``.

Namespaced objects (Workloads, LocalQueues, Events) only in the managed namespaces
(:mod:`.namespaces`): the views are probed there, and a LocalQueue elsewhere (``berth
apply`` can make one anywhere) is left alone, said once in the log.

Never in admission's way: decisions only mark a workload dirty in a bounded, coalescing set
(a workload changed ten times is written once), and a separate task writes at most ``qps``
requests a second with bursts of ``burst`` (Kueue's client defaults: 20 and 30). Events go
out from a queue at a rate of their own, as Kueue's do (:mod:`.recorder`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.aio.subscription import Subscription

from services.watcher.kube.active import ACTIVE_ANNOTATION, active_patch
from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import KubeConflict, KubeError, KubeNotFound, KubeRefused
from services.watcher.kube.namespaces import ALL_NAMESPACES, ManagedNamespaces
from services.watcher.kube.patching import pod_templates
from services.watcher.kube.preemptors import Preemptors
from services.watcher.kube.recorder import EventRecorder, TokenBucket
from services.watcher.kube.triggers import follow_triggers, stop_following
from shared.bus import API_SUBJECT, Bus, BusTimeout, NoResponders
from shared.events import AnyEvent, EvictionRequested
from shared.logging import get_logger

__all__ = [
    "KUEUE_BURST",
    "KUEUE_QPS",
    "Coalescing",
    "KueueStatusWriter",
    "StatusSettings",
    "TokenBucket",
    "job_events",
    "kueue_workload",
    "workload_name",
]

log = get_logger("watcher.kube.status")

# Kueue's Configuration defaults for its API client (apis/config/v1beta1 defaults.go).
KUEUE_QPS = 20.0
KUEUE_BURST = 30
_KUEUE = "kueue.x-k8s.io"
WORKLOADS = Resource(_KUEUE, "v1beta2", "workloads", "Workload")
CLUSTER_QUEUES = Resource(_KUEUE, "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Resource(_KUEUE, "v1beta2", "localqueues", "LocalQueue")
COHORTS = Resource(_KUEUE, "v1beta2", "cohorts", "Cohort", namespaced=False)
VIEWS = {
    "workloads": WORKLOADS,
    "clusterqueues": CLUSTER_QUEUES,
    "localqueues": LOCAL_QUEUES,
    "cohorts": COHORTS,
}
REPORTER = "berth-admission"  # Kueue's Events say "kueue-admission"

Obj = dict[str, Any]


@dataclass(frozen=True)
class StatusSettings:
    qps: float = KUEUE_QPS
    burst: int = KUEUE_BURST
    max_dirty: int = 100_000  # distinct workloads waiting to be written
    batch: int = 200  # workloads asked of admission per request
    queues_every: float = 1.0  # seconds between ClusterQueue/LocalQueue status rounds

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> StatusSettings:
        env = os.environ if environ is None else environ
        return cls(
            qps=float(env.get("BERTH_KUBE_STATUS_QPS", KUEUE_QPS)),
            burst=int(env.get("BERTH_KUBE_STATUS_BURST", KUEUE_BURST)),
        )


class Coalescing:
    """A bounded set of dirty keys in first-dirtied order: marking a key twice keeps one
    entry. When full, a new key is refused and ``overflowed`` set: the writer then does a
    full round (every tracked workload) instead of trusting the set."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.keys: OrderedDict[str, None] = OrderedDict()
        self.overflowed = False
        self.wanted = asyncio.Event()

    def mark(self, key: str) -> None:
        if key not in self.keys:
            if len(self.keys) >= self.limit:
                self.overflowed = True
            else:
                self.keys[key] = None
        self.wanted.set()

    def take(self, count: int) -> list[str]:
        taken: list[str] = []
        while self.keys and len(taken) < count:
            taken.append(self.keys.popitem(last=False)[0])
        if not self.keys:
            self.wanted.clear()
        return taken


def workload_name(owner_name: str, owner_uid: str) -> str:
    """Kueue's name for a Job's Workload: ``job-<name>-<5 hex of a hash>``, within 253."""
    digest = hashlib.sha256(f"{owner_name}/{owner_uid}".encode()).hexdigest()[:5]
    return f"job-{owner_name[: 253 - 10]}-{digest}"


def kueue_workload(rendered: Obj, owner: Obj) -> Obj:
    """A ``kueue.x-k8s.io/v1beta2`` Workload from admission's rendering and the owner object
    (its pod templates: Kueue's schema requires a template per pod set)."""
    metadata = owner["metadata"]
    templates = dict(pod_templates(owner))
    spec = dict(rendered.get("spec") or {})
    spec["podSets"] = [
        {
            "name": pod_set["name"],
            "count": pod_set["count"],
            "template": {"spec": templates.get(pod_set["name"], {})},
        }
        for pod_set in spec.get("podSets") or []
    ]
    status = {k: v for k, v in (rendered.get("status") or {}).items() if k != "berth"}
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(str(metadata["name"]), str(metadata["uid"])),
            "namespace": metadata.get("namespace") or "default",
            "labels": {"kueue.x-k8s.io/job-uid": str(metadata["uid"])},
            # spec.active as Berth wrote it: a different one is someone else's (active.py)
            "annotations": {ACTIVE_ANNOTATION: "true" if _is_active(spec) else "false"},
            "ownerReferences": [
                {
                    "apiVersion": owner.get("apiVersion", "batch/v1"),
                    "kind": owner.get("kind", "Job"),
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def _is_active(spec: Obj) -> bool:
    return spec.get("active") is not False  # Kueue's default: true


def _conditions(workload: Obj | None) -> dict[str, Obj]:
    items = ((workload or {}).get("status") or {}).get("conditions") or []
    return {str(c["type"]): c for c in items}


def job_events(before: Obj | None, after: Obj) -> list[tuple[str, str, str]]:
    """The Events (type, reason, message) Kueue would record on the Job between two states:
    one per condition that turned True (QuotaReserved, Admitted; Preempted and Evicted as
    Warnings), and ``Pending`` whenever QuotaReserved is False with a new message."""
    old, new = _conditions(before), _conditions(after)
    events = []
    for kind, event_type in (
        ("Preempted", "Warning"),
        ("Evicted", "Warning"),
        ("QuotaReserved", "Normal"),
        ("Admitted", "Normal"),
    ):
        condition = new.get(kind)
        previous = old.get(kind)
        if condition is None or condition.get("status") != "True":
            continue
        if (
            previous is None
            or previous.get("status") != "True"
            or previous.get("lastTransitionTime") != condition.get("lastTransitionTime")
        ):
            events.append((event_type, kind, str(condition.get("message") or "")))
    reserved = new.get("QuotaReserved")
    if reserved is not None and reserved.get("status") == "False":
        previous = old.get("QuotaReserved")
        if previous is None or previous.get("message") != reserved.get("message"):
            events.append(("Normal", "Pending", str(reserved.get("message") or "")))
    return events


class KueueStatusWriter:
    def __init__(
        self,
        bus: Bus,
        client: KubeClient,
        workloads: Mapping[str, Obj],
        *,
        settings: StatusSettings,
        namespaces: ManagedNamespaces = ALL_NAMESPACES,
        observed: Mapping[str, Obj] | None = None,
    ) -> None:
        self.bus = bus
        self.client = client
        self.workloads = workloads  # uid -> newest tracked object (the kube backend's)
        # owner uid -> its Workload as last seen in the cluster (active.ActiveFollower's)
        self.observed: Mapping[str, Obj] = {} if observed is None else observed
        self.settings = settings
        self.namespaces = namespaces
        self.preemptors = Preemptors()
        self.left_alone: set[str] = set()  # LocalQueues outside the managed namespaces
        self.dirty = Coalescing(settings.max_dirty)
        self.limiter = TokenBucket(settings.qps, settings.burst)
        self.recorder = EventRecorder(client, qps=settings.qps, burst=settings.burst)
        self.written: dict[str, Obj] = {}  # workload key -> the Workload we last wrote
        self.views: set[str] = set()
        self.queues_dirty = False
        self.requests = 0  # API requests made (the benchmark reads it)

    async def served(self) -> set[str]:
        """Which views the server serves, listed where we may (each managed namespace for
        the namespaced ones); says once in the log which are off and why. The Workloads
        listed give their uids (a preemption message names the preemptor's)."""
        forbidden: list[str] = []
        for view, resource in VIEWS.items():
            try:
                for namespace in self.namespaces.scopes(resource):
                    items, _ = await self.client.list(resource, namespace=namespace)
                    for item in items if view == "workloads" else []:
                        self.preemptors.note_workload(item)
                self.views.add(view)
            except KubeNotFound:
                continue
            except KubeRefused as error:  # no Role in a managed namespace, or no ClusterRole
                forbidden.append(f"{view}: {error}")
        off = sorted(set(VIEWS) - self.views)
        if off:
            reason = "; ".join(forbidden) or (
                f"{_KUEUE}/v1beta2 {', '.join(off)} not served (Kueue's CRDs absent)"
            )
            log.warning("kueue_views_off", views=off, reason=reason)
        return self.views

    async def run(self, stopping: asyncio.Event) -> None:
        if not await self.served():
            return
        subscriptions = await self._follow([])
        # After a reconnect the triggers are followed anew: a client replaced by a sign-in with a
        # rotated seed (shared/bus/connection.py) took its subscriptions with it.
        reconnected = asyncio.Event()
        self.bus.reconnects.add(reconnected.set)
        recorder = asyncio.create_task(self.recorder.run(), name="kube.events")
        try:
            while not stopping.is_set():
                if reconnected.is_set():
                    reconnected.clear()
                    subscriptions = await self._follow(subscriptions)
                await self._round()
                waits = [asyncio.ensure_future(self.dirty.wanted.wait())]
                waits.append(asyncio.ensure_future(stopping.wait()))
                waits.append(asyncio.ensure_future(reconnected.wait()))
                timeout = self.settings.queues_every if self.queues_dirty else None
                _, pending = await asyncio.wait(
                    waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in pending:
                    task.cancel()
        finally:
            self.bus.reconnects.discard(reconnected.set)
            recorder.cancel()
            await stop_following(subscriptions)

    async def _follow(self, following: list[Subscription]) -> list[Subscription]:
        """Follow the triggers (again), then start with a full round: what came before, or
        while the old subscriptions were gone, was missed."""
        await stop_following(following)
        subscriptions = await follow_triggers(self.bus, self._on_trigger)
        self.dirty.overflowed = True
        self.queues_dirty = True  # and the queues' and cohorts' status with it
        return subscriptions

    async def _on_trigger(self, events: list[AnyEvent]) -> None:
        for event in events:
            if isinstance(event, EvictionRequested):
                self.preemptors.note_eviction(event)
            self.dirty.mark(event.workload.key)
        self.queues_dirty = True

    async def _round(self) -> None:
        if self.dirty.overflowed:
            self.dirty.overflowed = False
            for obj in list(self.workloads.values()):
                metadata = obj.get("metadata") or {}
                self.dirty.keys.setdefault(f"{metadata.get('namespace')}/{metadata['name']}")
        while self.dirty.keys:
            keys = self.dirty.take(self.settings.batch)
            if "workloads" in self.views:
                await self._write_workloads(keys)
        if self.queues_dirty:
            self.queues_dirty = False
            await self._write_queues()

    async def _ask(self, resource: str, request: Obj) -> list[Obj]:
        items: list[Obj] = []
        offset: int | None = 0
        while offset is not None:
            payload = msgspec.json.encode({**request, "offset": offset})
            try:
                reply = await self.bus.request(
                    f"{API_SUBJECT}.admission.{resource}", payload, wait=5.0
                )
            except (NoResponders, BusTimeout):
                log.warning("status_source_unavailable", resource=resource, reason="no answer")
                return items
            body = msgspec.json.decode(reply.data)
            items += body.get("items") or []
            offset = body.get("next")
        return items

    async def _write_workloads(self, keys: list[str]) -> None:
        rendered = await self._ask("workloads", {"names": keys})
        for item in rendered:
            owner = self.workloads.get(str(item["metadata"].get("uid")))
            if owner is None:
                continue  # deleted: its Workload goes with it (owner reference)
            workload = kueue_workload(item, owner)
            key = f"{item['metadata']['namespace']}/{item['metadata']['name']}"
            self.preemptors.name_preemptor(key, workload)
            try:
                await self._write_workload(workload, owner)
            except KubeError as error:
                log.warning(
                    "workload_status_failed",
                    workload=key,
                    queue=item["spec"].get("queueName"),
                    reason=str(error),
                )

    async def _write_workload(self, workload: Obj, owner: Obj) -> None:
        key = f"{owner['metadata'].get('namespace')}/{owner['metadata']['name']}"
        before = self.written.get(key)
        active = _is_active(workload["spec"])
        if (
            before is not None
            and before["status"] == workload["status"]
            and _is_active(before["spec"]) == active
        ):
            return  # nothing new: no request
        namespace = workload["metadata"]["namespace"]
        name = workload["metadata"]["name"]
        created = False
        if before is None:
            await self._request()
            try:
                made = await self.client.create(WORKLOADS, namespace=namespace, body=workload)
                self.preemptors.note_workload(made)  # its uid is the server's
                created = True
            except KubeConflict:
                pass  # written by an earlier watcher: its status is brought up to date below
        if not created and (before is None or _is_active(before["spec"]) != active):
            # Berth's spec.active changed (or is not known to be written): write it, unless
            # the Workload's annotation says it already (active.py).
            observed = self.observed.get(str(owner["metadata"]["uid"]))
            patch = active_patch(observed, active)
            if patch is not None:
                await self._request()
                await self.client.patch(WORKLOADS, namespace=namespace, name=name, body=patch)
        await self._request()
        await self.client.patch(
            WORKLOADS,
            namespace=namespace,
            name=name,
            body={"status": workload["status"]},
            subresource="status",
        )
        self.written[key] = workload
        for event_type, reason, message in job_events(before, workload):
            self._record_event(owner, event_type, reason, message)
            log.info(
                "kueue_event",
                workload=key,
                queue=workload["spec"].get("queueName"),
                reason=reason,
                message=message,
            )

    def _record_event(self, owner: Obj, event_type: str, reason: str, message: str) -> None:
        metadata = owner["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        namespace = str(metadata.get("namespace") or "default")
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                # client-go's recorder names an Event <object>.<nanoseconds in hex>.
                "name": f"{metadata['name']}.{time.time_ns():x}",
                "namespace": metadata.get("namespace") or "default",
            },
            "involvedObject": {
                "apiVersion": owner.get("apiVersion", "batch/v1"),
                "kind": owner.get("kind", "Job"),
                "name": metadata["name"],
                "namespace": metadata.get("namespace") or "default",
                "uid": metadata["uid"],
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": REPORTER},
            "reportingComponent": REPORTER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.recorder.record(namespace, body)

    async def _write_queues(self) -> None:
        for view, resource, namespaced in (
            ("clusterqueues", CLUSTER_QUEUES, False),
            ("localqueues", LOCAL_QUEUES, True),
            ("cohorts", COHORTS, False),
        ):
            if view not in self.views:
                continue
            for item in await self._ask(view, {}):
                metadata = item["metadata"]
                status = item.get("status") or {}
                key = f"{view}/{metadata.get('namespace')}/{metadata['name']}"
                if self.written.get(key) == status or self._left_alone(key, item, namespaced):
                    continue
                await self._request()
                try:
                    await self.client.patch(
                        resource,
                        namespace=str(metadata.get("namespace")) if namespaced else "",
                        name=str(metadata["name"]),
                        body={"status": status},
                        subresource="status",
                    )
                    self.written[key] = status
                except KubeNotFound:
                    continue  # applied with `berth apply`, not in the cluster: nothing to show
                except KubeError as error:
                    log.warning("queue_status_failed", queue=metadata["name"], reason=str(error))

    def _left_alone(self, key: str, item: Obj, namespaced: bool) -> bool:
        """A LocalQueue outside the managed namespaces: no Role there to patch it with."""
        reason = self.namespaces.refusal(str(item["metadata"].get("namespace") or ""))
        if not namespaced or reason is None:
            return False
        if key not in self.left_alone:
            self.left_alone.add(key)
            log.info("queue_status_skipped", queue=key, reason=reason)
        return True

    async def _request(self) -> None:
        await self.limiter.acquire()
        self.requests += 1
