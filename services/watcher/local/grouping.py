"""The local backend's pod groups: Pods that are one workload (:mod:`shared.pod_groups`).

A grouped Pod is stored like any object but never reported alone. Once all ``total-count``
pods of a group exist, the backend writes the group's ``PodGroup`` object into its objects
bucket under the group's name, and from there on the group is a workload like any other:
reported submitted, admitted whole (all its pods start together) or not at all, evicted
whole. The rules for what goes away with what:

- deleting the PodGroup (``berth delete workload <group>``) deletes its Pods;
- deleting a Pod of a formed group deletes the group (and so its other Pods): a group that
  lost a pod can never run whole again.

Members are known again after a restart from the bucket's list, so nothing here is kept
anywhere else.
"""

from __future__ import annotations

from typing import Any

import msgspec
from nats.js.kv import KeyValue

from shared.bus import KeyExists
from shared.logging import get_logger
from shared.pod_groups import POD_GROUP_KIND, group_object, pod_group
from shared.workload_fields import WorkloadError
from shared.workloads import workload_key

__all__ = ["PodGroups"]

log = get_logger("watcher.local")

Obj = dict[str, Any]


def _group_of(obj: Obj) -> tuple[str, int] | None:
    try:
        return pod_group(obj)
    except WorkloadError:
        return None  # `berth submit` refuses it; a hand-made one runs as a plain Pod


class PodGroups:
    """The members of each pod group seen so far: (namespace, group) -> key -> Pod."""

    def __init__(self) -> None:
        self.members: dict[tuple[str, str], dict[str, Obj]] = {}

    @staticmethod
    def grouped(obj: Obj) -> bool:
        """Whether ``obj`` is a Pod of a pod group (and so not a workload by itself)."""
        return _group_of(obj) is not None

    async def pod_seen(self, kv: KeyValue | None, key: str, obj: Obj) -> None:
        """Note a grouped Pod; the one that completes its group writes the group's object."""
        found = _group_of(obj)
        assert found is not None and kv is not None
        group, total = found
        namespace = str(obj["metadata"].get("namespace") or "default")
        members = self.members.setdefault((namespace, group), {})
        members[key] = obj
        if len(members) < total:
            return
        chosen = sorted(members.values(), key=lambda pod: str(pod["metadata"]["name"]))[:total]
        body = group_object(namespace, group, chosen)
        try:
            await kv.create(workload_key(namespace, group), msgspec.json.encode(body))
        except KeyExists:
            return  # formed already (seen again after a restart), or the name is taken
        log.info("pod_group_formed", workload=f"{namespace}/{group}", pods=total)

    async def deleted(self, kv: KeyValue | None, objects: dict[str, Obj], obj: Obj) -> None:
        """What goes away with a deleted object (see the module docstring)."""
        assert kv is not None
        namespace = str(obj["metadata"].get("namespace") or "default")
        if obj.get("kind") == POD_GROUP_KIND:
            members = self.members.pop((namespace, str(obj["metadata"]["name"])), {})
            for key in members:
                if key in objects:
                    await kv.delete(key)
            return
        found = _group_of(obj)
        if found is None:
            return
        group = found[0]
        members = self.members.get((namespace, group), {})
        for key, member in list(members.items()):
            if member["metadata"].get("uid") == obj["metadata"].get("uid"):
                del members[key]
        group_key = workload_key(namespace, group)
        formed = objects.get(group_key)
        if formed is not None and formed.get("kind") == POD_GROUP_KIND and _member_of(formed, obj):
            await kv.delete(group_key)


def _member_of(group: Obj, pod: Obj) -> bool:
    uid = pod["metadata"].get("uid")
    pods = (group.get("spec") or {}).get("pods") or []
    return any((member.get("metadata") or {}).get("uid") == uid for member in pods)
