"""The namespaces the Kubernetes backend manages, and its settings, read once at start.

``BERTH_MANAGED_NAMESPACES`` (comma separated) names the namespaces whose Jobs, Pods,
RayJobs, LocalQueues, Kueue Workloads and Events the watcher touches. ``deploy/`` grants them
through a Role in each of those namespaces only, so the watcher lists and watches each
namespaced resource once per managed namespace (``/apis/batch/v1/namespaces/<ns>/jobs``):
a cluster-wide list would be refused (403). Unset or empty means every namespace, one
cluster-wide list-watch per resource, for clusters that grant a ClusterRole. Cluster-scoped
objects (Namespaces, PriorityClasses, ResourceFlavors, ClusterQueues, Cohorts,
WorkloadPriorityClasses) are always listed cluster-wide.

The setting is read once, into :class:`~.settings.KubeSettings`; this module only says
what it means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.watcher.kube.api import Resource
from shared.logging import get_logger
from shared.names import name_problem

__all__ = [
    "ALL_NAMESPACES",
    "MANAGED_NAMESPACES_ENV",
    "ManagedNamespaces",
    "SettingError",
    "ignored",
]

log = get_logger("watcher.kube")

MANAGED_NAMESPACES_ENV = "BERTH_MANAGED_NAMESPACES"


class SettingError(ValueError):
    """A setting that cannot be used; the message names the variable and the value."""


@dataclass(frozen=True)
class ManagedNamespaces:
    """The namespaces Berth manages; none listed means all of them."""

    names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: str) -> ManagedNamespaces:
        """``"batch, team-a"`` -> {batch, team-a}; blanks are skipped; a name that is no
        valid namespace is refused (a typo would otherwise watch nothing, silently)."""
        names = [part.strip() for part in value.split(",") if part.strip()]
        for name in names:
            problem = name_problem(name, "namespace")
            if problem is not None:
                raise SettingError(
                    f"{MANAGED_NAMESPACES_ENV}: {name!r} is not a valid namespace: {problem}"
                )
        return cls(frozenset(names))

    @property
    def everywhere(self) -> bool:
        return not self.names

    def scopes(self, resource: Resource) -> list[str | None]:
        """Where to list and watch ``resource``: ``[None]`` (cluster-wide) for a
        cluster-scoped one or when every namespace is managed, else each managed
        namespace, in a stable order (one list-watch each)."""
        if not resource.namespaced or self.everywhere:
            return [None]
        return [*sorted(self.names)]

    def refusal(self, namespace: str) -> str | None:
        """The rule for what the watcher may touch: a namespace it manages, every one when
        none are listed. Returns why not, or None when it may."""
        if self.everywhere or namespace in self.names:
            return None
        return (
            f"namespace {namespace!r} is not managed "
            f"({MANAGED_NAMESPACES_ENV}={','.join(sorted(self.names))})"
        )

    def __str__(self) -> str:
        return ",".join(sorted(self.names)) or "*"


ALL_NAMESPACES = ManagedNamespaces()


def ignored(obj: dict[str, Any], namespaces: ManagedNamespaces, seen: set[str]) -> bool:
    """Whether an observed object lives outside the managed namespaces (a list-watch scoped
    to them never yields one; a server that ignores the scope might). Logged once per uid."""
    metadata = obj.get("metadata") or {}
    reason = namespaces.refusal(str(metadata.get("namespace") or ""))
    if reason is None:
        return False
    uid = str(metadata.get("uid"))
    if uid not in seen:
        seen.add(uid)
        log.info(
            "workload_ignored",
            workload=f"{metadata.get('namespace')}/{metadata.get('name')}",
            reason=reason,
        )
    return True
