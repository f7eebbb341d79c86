"""Dominant resource share (DRS): how much of what its cohort could lend a ClusterQueue or a
Cohort uses beyond its own quota (Kueue's ``pkg/cache/scheduler/fair_sharing.go``).

Over the resources a node uses beyond its subtree quota, its unweighted ratio is the largest
``borrowed * 1000 / lendable``, where ``lendable`` sums, per resource name and over every
flavor of the tree, what the node's parent could ever use (its potential available). The
weighted share divides that ratio by the node's ``fairSharing.weight`` (default 1); a node
with weight 0 that borrows ranks above every other.

Shared by admission (the order of ClusterQueue heads in a cohort, and ``weightedShare`` in the
ClusterQueue status) and preemption (who gives up quota first).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from shared.hierarchy import potential_available
from shared.quota import FlavorResource, QuotaNode

__all__ = ["Share", "lendable", "node_share"]


@dataclass(frozen=True, slots=True)
class Share:
    """A node's DRS: the unweighted ratio (per mille), its weight, and what it borrows."""

    ratio: float
    weight: float
    borrowed: frozenset[FlavorResource] = frozenset()

    @property
    def borrowing(self) -> bool:
        return bool(self.borrowed)

    @property
    def value(self) -> float:
        """Kueue's PreciseWeightedShare: +inf for a zero weight that borrows."""
        if self.ratio == 0:
            return 0.0
        return math.inf if self.weight == 0 else self.ratio / self.weight

    def key(self) -> tuple[int, float]:
        """Kueue's CompareDRS as a sort key (lower is admitted first, preempted last): zero
        weights that borrow rank above all others, among themselves by ratio."""
        if self.weight == 0 and self.ratio != 0:
            return (1, self.ratio)
        return (0, self.value)

    def rounded(self) -> int:
        """``status.fairSharing.weightedShare``: the weighted share rounded up (Kueue's
        roundedWeightedShare), the largest int64 for a zero weight that borrows."""
        if self.weight == 0 and self.ratio != 0:
            return 2**63 - 1
        return min(math.ceil(self.value), sys.maxsize)

    def borrows_any(self, requested: Mapping[FlavorResource, int]) -> bool:
        """Kueue's IsBorrowingOn: the node borrows one of the (flavor, resource) requested."""
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed)


def lendable(parent: QuotaNode) -> dict[str, int]:
    """Per resource name, what ``parent`` could ever lend its children (its potential
    available over every flavor of the tree); it depends on quotas only, not on usage."""
    result: dict[str, int] = {}
    for fr in parent.root().subtree:
        result[fr[1]] = result.get(fr[1], 0) + potential_available(parent, fr)
    return result


def node_share(
    node: QuotaNode,
    weight: float,
    delta: Mapping[FlavorResource, int] = {},
    lendable_by_parent: Mapping[str, int] | None = None,
) -> Share:
    """The DRS of a ClusterQueue or Cohort with ``delta`` more usage (0 for a root);
    ``lendable_by_parent`` is :func:`lendable` of its parent, when the caller keeps it."""
    parent = node.parent
    if parent is None:
        return Share(0.0, weight)
    borrowed: dict[str, int] = {}
    frs: list[FlavorResource] = []
    for fr, quota in node.subtree.items():
        extra = delta.get(fr, 0) + node.usage.get(fr, 0) - quota
        if extra > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + extra
            frs.append(fr)
    if not borrowed:
        return Share(0.0, weight)
    totals = lendable(parent) if lendable_by_parent is None else lendable_by_parent
    ratio = 0.0
    for resource, amount in borrowed.items():
        total = totals.get(resource, 0)
        if total > 0:
            ratio = max(ratio, amount * 1000.0 / total)
    return Share(ratio, weight, frozenset(frs))
