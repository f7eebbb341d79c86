"""A ClusterQueue as admission's status API answers it (Kueue's shape): each quota of its
spec paired with what its status says is used of it. Read by the CLI (`berth describe
clusterqueue`) and the console (its quota table)."""

from __future__ import annotations

from typing import Any

__all__ = ["quota_usage"]


def quota_usage(queue: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(flavor name, quota, usage) for every quota of ``spec.resourceGroups``, in the spec's
    order: ``quota`` is the spec's entry (``name``, ``nominalQuota``, ``borrowingLimit``,
    ``lendingLimit``), ``usage`` the ``status.flavorsUsage`` entry of the same flavor and
    resource (``total``, ``borrowed``), or ``{}`` when the status names none."""
    usage = {
        (flavor["name"], resource["name"]): resource
        for flavor in queue.get("status", {}).get("flavorsUsage", [])
        for resource in flavor.get("resources", [])
    }
    return [
        (flavor["name"], quota, usage.get((flavor["name"], quota["name"]), {}))
        for group in queue.get("spec", {}).get("resourceGroups", [])
        for flavor in group.get("flavors", [])
        for quota in flavor.get("resources", [])
    ]
