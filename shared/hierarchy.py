"""Hierarchical cohorts as Kueue's preemption reads them: where in the cohort tree a
ClusterQueue's extra need would fit without borrowing above that subtree.

Shared by admission (is preemption worth asking for?) and preemption (which candidates the
preemptor has a hierarchical advantage over).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from shared.quota import FlavorResource, QuotaNode, potential_available

__all__ = [
    "borrowing_with",
    "fits_in_quota",
    "is_hierarchical",
    "may_reclaim_in_hierarchy",
    "path_to_root",
    "potential_available",
    "within_nominal",
]


def borrowing_with(node: QuotaNode, fr: FlavorResource, value: int) -> bool:
    """Kueue's BorrowingWith: ``value`` more would take the node above its subtree quota."""
    return node.usage.get(fr, 0) + value > node.subtree.get(fr, 0)


def path_to_root(node: QuotaNode) -> Iterator[QuotaNode]:
    """The node's cohorts, its parent first, the root last."""
    current = node.parent
    while current is not None:
        yield current
        current = current.parent


def may_reclaim_in_hierarchy(node: QuotaNode, fr: FlavorResource, value: int) -> bool:
    """Some subtree holding the ClusterQueue, smaller than the whole cohort tree, has room for
    ``value`` more of ``fr`` within its own quota (Kueue's FindHeightOfLowestSubtreeThatFits,
    second value). Then whatever other queues borrowed of that subtree's quota can be
    reclaimed whatever their priority, so preemption may help even above nominal quota."""
    if node.parent is None:
        return False
    if not borrowing_with(node, fr, value):
        return True
    remaining = value - node.local_available(fr)
    for cohort in path_to_root(node):
        if not borrowing_with(cohort, fr, remaining):
            return cohort.parent is not None
        remaining -= cohort.local_available(fr)
    return False


def fits_in_quota(
    node: QuotaNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Kueue's QuantitiesFitInQuota: whether ``requests`` fit in the node's subtree quota on
    top of its usage, and what of them is left for its parent (beyond its local quota)."""
    fits = True
    remaining: dict[FlavorResource, int] = {}
    for fr, value in requests.items():
        if node.subtree.get(fr, 0) < node.usage.get(fr, 0) + value:
            fits = False
        remaining[fr] = max(0, value - node.local_available(fr))
    return fits, remaining


def within_nominal(node: QuotaNode, frs: Collection[FlavorResource]) -> bool:
    """Kueue's IsWithinNominalInResources: the node uses no more than its subtree quota."""
    return all(node.usage.get(fr, 0) <= node.subtree.get(fr, 0) for fr in frs)


def is_hierarchical(node: QuotaNode) -> bool:
    """The ClusterQueue's cohort tree has more than one level of cohorts."""
    root = node.root()
    return any(not child.is_cluster_queue for child in root.children)
