"""The cohort tree and its quota accounting, as Kueue's ``pkg/cache/resource_node.go`` does it.

Nodes are ClusterQueues (leaves) and Cohorts (implicit ones named by ``spec.cohort[Name]``,
and explicit hierarchical ``Cohort`` objects with their own quota and a parent). Per
(flavor, resource) every node has:

- ``quotas``: its own nominal quota, borrowing limit (None = unlimited) and lending limit
  (None = everything is lendable);
- ``subtree``: its nominal plus what its children lend up (their subtree minus their
  guaranteed quota);
- ``usage``: for a ClusterQueue its own usage; for a Cohort the sum of what the children use
  beyond their guaranteed quota.

``guaranteed = max(0, subtree - lendingLimit)`` is kept by a node for itself and never seen by
its parent. All numbers are exact ints of milli-units; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.config import ClusterQueue, Cohort, ResourceGroup
from shared.quantities import parse_quantity

__all__ = [
    "FlavorResource",
    "QuotaNode",
    "QuotaTree",
    "ResourceQuota",
    "available_at",
    "potential_available",
    "quotas_of",
]

FlavorResource = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


def quotas_of(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    """The per-(flavor, resource) quotas of a ClusterQueue's or Cohort's resourceGroups."""
    result: dict[FlavorResource, ResourceQuota] = {}
    for group in groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                result[(flavor.name, quota.name)] = ResourceQuota(
                    nominal=parse_quantity(quota.nominal_quota),
                    borrowing_limit=None
                    if quota.borrowing_limit is None
                    else parse_quantity(quota.borrowing_limit),
                    lending_limit=None
                    if quota.lending_limit is None
                    else parse_quantity(quota.lending_limit),
                )
    return result


class QuotaNode:
    """A ClusterQueue or a Cohort in the tree."""

    __slots__ = (
        "children",
        "is_cluster_queue",
        "kept",
        "name",
        "parent",
        "quotas",
        "subtree",
        "usage",
    )

    def __init__(
        self, name: str, is_cluster_queue: bool, quotas: dict[FlavorResource, ResourceQuota]
    ) -> None:
        self.name = name
        self.is_cluster_queue = is_cluster_queue
        self.quotas = quotas
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.subtree: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        # ``guaranteed`` of each flavor-resource where it is not 0, set by ``QuotaTree.build``
        # once ``subtree`` is known (quotas and subtree never change after): the usage updates
        # and ``available`` read it once per node and flavor-resource instead of recomputing it.
        self.kept: dict[FlavorResource, int] = {}

    def guaranteed(self, fr: FlavorResource) -> int:
        """Capacity this node keeps from its parent (its subtree beyond the lending limit)."""
        quota = self.quotas.get(fr)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - quota.lending_limit)

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.guaranteed(fr) - self.usage.get(fr, 0))

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node


class QuotaTree:
    """Quota and usage of every ClusterQueue and Cohort, with Kueue's borrowing rules."""

    __slots__ = ("cluster_queues", "cohorts", "cyclic_cohorts")

    def __init__(self) -> None:
        self.cluster_queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        # Cohorts on a parent cycle: Kueue deactivates the ClusterQueues below them.
        self.cyclic_cohorts: set[str] = set()

    @classmethod
    def build(cls, cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> QuotaTree:
        tree = cls()
        explicit = {cohort.metadata.name: cohort for cohort in cohorts}
        for name, cohort in explicit.items():
            tree.cohorts[name] = QuotaNode(name, False, quotas_of(cohort.spec.resource_groups))
        for cq in cluster_queues:
            node = QuotaNode(cq.metadata.name, True, quotas_of(cq.spec.resource_groups))
            tree.cluster_queues[node.name] = node
            if cq.cohort_name:
                node.parent = tree._cohort(cq.cohort_name)
        for name, cohort in explicit.items():
            if cohort.parent_name:
                tree.cohorts[name].parent = tree._cohort(cohort.parent_name)
        tree._break_cycles()
        for node in (*tree.cohorts.values(), *tree.cluster_queues.values()):
            if node.parent is not None:
                node.parent.children.append(node)
        for node in tree.cohorts.values():
            if node.parent is None:
                tree._accumulate(node)
        for node in tree.cluster_queues.values():
            if node.parent is None:
                tree._accumulate(node)
        for node in (*tree.cohorts.values(), *tree.cluster_queues.values()):
            node.kept = {fr: kept for fr in node.quotas if (kept := node.guaranteed(fr))}
        return tree

    def _cohort(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:  # implicit cohort: named by a ClusterQueue, no quota of its own
            node = self.cohorts[name] = QuotaNode(name, False, {})
        return node

    def _break_cycles(self) -> None:
        for start in self.cohorts.values():
            seen: list[QuotaNode] = []
            node: QuotaNode | None = start
            while node is not None and node not in seen:
                seen.append(node)
                node = node.parent
            if node is not None:  # came back to a node already on the path: a cycle
                cycle = seen[seen.index(node) :]
                self.cyclic_cohorts.update(member.name for member in cycle)
        for name in self.cyclic_cohorts:
            self.cohorts[name].parent = None

    def _accumulate(self, node: QuotaNode) -> None:
        """Subtree quota bottom-up, as Kueue's updateCohortResourceNode."""
        node.subtree = {fr: quota.nominal for fr, quota in node.quotas.items()}
        for child in node.children:
            self._accumulate(child)
            for fr, value in child.subtree.items():
                node.subtree[fr] = node.subtree.get(fr, 0) + value - child.guaranteed(fr)

    # --- queries ---------------------------------------------------------------------------

    def in_cycle(self, cluster_queue: str) -> bool:
        node = self.cluster_queues.get(cluster_queue)
        while node is not None:
            if node.name in self.cyclic_cohorts and not node.is_cluster_queue:
                return True
            node = node.parent
        return False

    def available(self, cluster_queue: str, flavor: str, resource: str) -> int:
        """How much more of (flavor, resource) the ClusterQueue may use now, borrowing included.

        Negative after over-admission (quota lowered under existing usage).
        """
        node = self.cluster_queues.get(cluster_queue)
        return 0 if node is None else available_at(node, (flavor, resource))

    def potential_available(self, cluster_queue: str, flavor: str, resource: str) -> int:
        """The most the ClusterQueue could ever use of (flavor, resource), were all usage gone."""
        node = self.cluster_queues.get(cluster_queue)
        return 0 if node is None else potential_available(node, (flavor, resource))

    def nominal(self, cluster_queue: str, flavor: str, resource: str) -> int:
        node = self.cluster_queues.get(cluster_queue)
        quota = None if node is None else node.quotas.get((flavor, resource))
        return 0 if quota is None else quota.nominal

    def usage(self, cluster_queue: str) -> dict[FlavorResource, int]:
        node = self.cluster_queues.get(cluster_queue)
        return {} if node is None else {fr: v for fr, v in node.usage.items() if v}

    def borrowed(self, cluster_queue: str) -> dict[FlavorResource, int]:
        """Usage above the ClusterQueue's nominal quota, per (flavor, resource)."""
        node = self.cluster_queues.get(cluster_queue)
        if node is None:
            return {}
        result: dict[FlavorResource, int] = {}
        for fr, used in node.usage.items():
            over = used - node.subtree.get(fr, 0)
            if over > 0:
                result[fr] = over
        return result

    def fits(self, cluster_queue: str, usage: Mapping[FlavorResource, int]) -> bool:
        node = self.cluster_queues.get(cluster_queue)
        if node is None:
            return False
        return all(value <= available_at(node, fr) for fr, value in usage.items() if value)

    # --- updates ---------------------------------------------------------------------------

    def add_usage(self, cluster_queue: str, usage: Mapping[FlavorResource, int]) -> None:
        """Charge usage to the ClusterQueue; what exceeds guaranteed quota bubbles up."""
        node = self.cluster_queues.get(cluster_queue)
        if node is None:
            return
        for fr, value in usage.items():
            if value:
                _add_usage(node, fr, value)

    def remove_usage(self, cluster_queue: str, usage: Mapping[FlavorResource, int]) -> None:
        node = self.cluster_queues.get(cluster_queue)
        if node is None:
            return
        for fr, value in usage.items():
            if value:
                _remove_usage(node, fr, value)

    def violations(self) -> list[str]:
        """Every limit exceeded anywhere in the tree (empty when all is well).

        A root may not use more than its subtree; a node with a borrowing limit may not use
        more than its subtree plus that limit; usage is never negative.
        """
        problems: list[str] = []
        for node in (*self.cluster_queues.values(), *self.cohorts.values()):
            for fr, used in node.usage.items():
                subtree = node.subtree.get(fr, 0)
                if used < 0:
                    problems.append(f"{node.name} {fr}: negative usage {used}")
                if node.parent is None and used > subtree:
                    problems.append(f"{node.name} {fr}: usage {used} > quota {subtree}")
                quota = node.quotas.get(fr)
                limit = None if quota is None else quota.borrowing_limit
                if node.parent is not None and limit is not None and used > subtree + limit:
                    problems.append(
                        f"{node.name} {fr}: usage {used} > quota {subtree} + borrowing {limit}"
                    )
        return problems

    def excess(self) -> dict[tuple[str, FlavorResource], int]:
        """By how much each node exceeds its limit, for checks that tolerate over-admission."""
        result: dict[tuple[str, FlavorResource], int] = {}
        for node in (*self.cluster_queues.values(), *self.cohorts.values()):
            for fr, used in node.usage.items():
                subtree = node.subtree.get(fr, 0)
                quota = node.quotas.get(fr)
                limit = None if quota is None else quota.borrowing_limit
                over = 0
                if node.parent is None:
                    over = used - subtree
                elif limit is not None:
                    over = used - subtree - limit
                if over > 0:
                    result[(node.name, fr)] = over
        return result


def available_at(node: QuotaNode, fr: FlavorResource) -> int:
    """``QuotaTree.available`` of the node itself (no lookup by name): what more of ``fr``
    it may use now, borrowing included."""
    parent = node.parent
    usage = node.usage.get(fr, 0)
    if parent is None:
        return node.subtree.get(fr, 0) - usage
    if parent.parent is None:  # available_at(parent, fr) of a root, without the call
        parent_available = parent.subtree.get(fr, 0) - parent.usage.get(fr, 0)
    else:
        parent_available = available_at(parent, fr)
    guaranteed = node.kept.get(fr, 0)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        stored_in_parent = node.subtree.get(fr, 0) - guaranteed
        used_in_parent = max(0, usage - guaranteed)
        parent_available = min(
            stored_in_parent - used_in_parent + quota.borrowing_limit, parent_available
        )
    local = guaranteed - usage  # node.local_available(fr)
    return (local if local > 0 else 0) + parent_available


def potential_available(node: QuotaNode, fr: FlavorResource) -> int:
    """The most of ``fr`` the node could ever use, were all usage gone (Kueue's
    potentialAvailable, for a Cohort as for a ClusterQueue)."""
    if node.parent is None:
        return node.subtree.get(fr, 0)
    result = node.guaranteed(fr) + potential_available(node.parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        result = min(node.subtree.get(fr, 0) + quota.borrowing_limit, result)
    return result


def _add_usage(node: QuotaNode, fr: FlavorResource, value: int) -> None:
    """Charge ``value`` to the node; what exceeds its room under guaranteed quota
    (``local_available`` before the charge) goes up to its parent, and so on."""
    while True:
        usage = node.usage
        before = usage.get(fr, 0)
        usage[fr] = before + value
        parent = node.parent
        if parent is None:
            return
        local = node.kept.get(fr, 0) - before
        if local < 0:
            local = 0
        if value <= local:
            return
        value -= local
        node = parent


def _remove_usage(node: QuotaNode, fr: FlavorResource, value: int) -> None:
    """Take ``value`` off the node; as much of it as the node stored in its parent (usage
    above guaranteed quota) comes off the parent, and so on."""
    while True:
        usage = node.usage
        before = usage.get(fr, 0)
        usage[fr] = before - value
        parent = node.parent
        stored_in_parent = before - node.kept.get(fr, 0)
        if stored_in_parent <= 0 or parent is None:
            return
        if stored_in_parent < value:
            value = stored_in_parent
        node = parent
