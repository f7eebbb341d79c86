"""Kueue's ``spec.active`` on the cluster's Workload objects, both ways.

Kueue's users stop and resume a workload with kueuectl (``kubectl kueue stop|resume workload
NAME``), which patches ``spec.active`` on its ``kueue.x-k8s.io`` Workload. Berth keeps a
workload's active state on the bus (admission folds ``SetWorkloadActive``:
services/admission/activation.py), so:

- the status writer (:mod:`.kueue_status`) writes Berth's ``spec.active`` onto the Workload
  together with :data:`ACTIVE_ANNOTATION`, the value it wrote (:func:`active_patch`);
- :class:`ActiveFollower` list-watches the Workloads of each managed namespace and, when one
  shows a ``spec.active`` other than the one Berth last wrote there (:func:`external_active`),
  publishes the ``SetWorkloadActive`` the CLI's ``berth stop|resume workload`` would
  (``berth.cmd.active.<ns>.<name>``, source ``watcher``), once per change.

The annotation is what tells a user's edit from Berth's own write landing late, and it is on
the object, so a restarted watcher reads the same: a change made while no watcher ran is
noticed at the first list.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from services.watcher.kube.api import KubeClient, Resource
from services.watcher.kube.errors import KubeError, KubeRefused
from services.watcher.kube.watching import EventType, Listed, WatchSettings, watch_objects
from shared.bus import Bus
from shared.events import SetWorkloadActive, WorkloadRef
from shared.logging import get_logger

__all__ = ["ACTIVE_ANNOTATION", "ActiveFollower", "active_patch", "external_active", "owner_of"]

log = get_logger("watcher.kube.active")

ACTIVE_ANNOTATION = "berth.dev/active-written"  # the spec.active Berth last wrote
Obj = dict[str, Any]


def _active(workload: Obj) -> bool:
    return (workload.get("spec") or {}).get("active") is not False  # absent: true


def _written(workload: Obj) -> bool:
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ACTIVE_ANNOTATION) != "false"  # absent: Berth made it active


def external_active(workload: Obj) -> bool | None:
    """The ``spec.active`` someone other than Berth set on a Workload, or None: the rule.

    Berth writes ``spec.active`` only together with :data:`ACTIVE_ANNOTATION` naming the value
    it wrote (absent: true, as Berth creates a Workload active unless it is not). A
    ``spec.active`` (absent: true, Kueue's default) that differs from it was set by someone
    else after Berth's last write: kueuectl's ``stop|resume workload``, ``kubectl patch``.
    """
    active = _active(workload)
    return active if active != _written(workload) else None


def active_patch(observed: Obj | None, active: bool) -> Obj | None:
    """The merge patch that makes a Workload show Berth's ``spec.active``: the value and the
    annotation together, or None when the annotation says it already. Then a ``spec.active``
    that differs is someone else's change, which :class:`ActiveFollower` reports and this
    never overwrites. ``observed``: the Workload as last seen, None if unknown (patch)."""
    if observed is not None and _written(observed) == active:
        return None
    return {
        "metadata": {"annotations": {ACTIVE_ANNOTATION: "true" if active else "false"}},
        "spec": {"active": active},
    }


def owner_of(workload: Obj) -> WorkloadRef | None:
    """The Berth workload a Workload stands for: its controller (the Job, as Kueue owns it),
    None for a Workload no object of ours controls."""
    metadata = workload.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller") and owner.get("uid") and owner.get("name"):
            namespace = str(metadata.get("namespace") or "default")
            return WorkloadRef(namespace, str(owner["name"]), str(owner["uid"]))
    return None


class ActiveFollower:
    """The Workloads seen (by their owner's uid, for the status writer) and the changes of
    ``spec.active`` made by others, each published once."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.observed: dict[str, Obj] = {}  # owner uid -> the newest Workload seen
        self.reported: dict[str, bool] = {}  # owner uid -> the change already published

    async def follow(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None,
        settings: WatchSettings,
        synced: asyncio.Event,
    ) -> None:
        """List-watch the Workloads of one namespace scope; ``synced`` once listed.

        Refused by the API server (no RBAC for Workloads in that scope, e.g. every namespace
        managed without deploy/cluster-wide), it says so once, naming the permission it lacks,
        and counts as synced: the watcher goes on without following ``spec.active``, instead
        of never becoming ready while the list is retried."""
        if await self._refused(client, resource, namespace):
            synced.set()
            return
        stream = watch_objects(client, [resource], namespace=namespace, settings=settings)
        async with aclosing(stream) as items:
            async for item in items:
                if isinstance(item, Listed):
                    for workload in item.objects:
                        await self.note(workload)
                    synced.set()
                elif item.type == EventType.DELETED:
                    ref = owner_of(item.object)
                    if ref is not None:
                        self.observed.pop(ref.uid, None)
                        self.reported.pop(ref.uid, None)
                else:
                    await self.note(item.object)

    async def _refused(self, client: KubeClient, resource: Resource, namespace: str | None) -> bool:
        """Whether the server refuses to list ``resource`` there (one list, at start); logged."""
        try:
            await client.list(resource, namespace=namespace)
        except KubeRefused as error:
            scope = "cluster-wide" if namespace is None else f"in namespace {namespace}"
            log.warning(
                "workloads_not_followed",
                missing=f"list, watch {resource.plural}.{resource.group} {scope}",
                reason=f"the API server refused ({error}); kueuectl's stop|resume workload"
                " (spec.active) is not followed until the watcher is granted it and restarted",
            )
            return True
        except KubeError:
            pass  # not served (no Kueue CRDs) or transient: the list-watch handles both
        return False

    async def note(self, workload: Obj) -> None:
        """One Workload as it is now: kept, and a change of ``spec.active`` by someone else
        published as ``SetWorkloadActive`` (once: until Berth has written it back)."""
        ref = owner_of(workload)
        if ref is None:
            return
        self.observed[ref.uid] = workload
        wanted = external_active(workload)
        if wanted is None:
            self.reported.pop(ref.uid, None)  # in step again: a later change is a new one
            return
        if self.reported.get(ref.uid) == wanted:
            return
        await self.bus.publish(SetWorkloadActive(source="watcher", workload=ref, active=wanted))
        self.reported[ref.uid] = wanted
        log.info(
            "spec_active_changed",
            workload=ref.key,
            queue=str((workload.get("spec") or {}).get("queueName") or ""),
            reason="spec.active set on the Workload by someone else",
            active=wanted,
        )
