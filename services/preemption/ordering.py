"""Which running workloads may be preempted, and in which order (Kueue's findCandidates and
candidatesOrdering)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from services.preemption.model import Preemptor, Running
from shared.config import ClusterQueuePreemption
from shared.quota import FlavorResource, QuotaNode, QuotaTree

__all__ = ["cohort_members", "find_candidates", "is_borrowing", "sort_key"]


def is_borrowing(node: QuotaNode, contested: Collection[FlavorResource]) -> bool:
    """Kueue's cqIsBorrowing: in a cohort and above nominal in a contested flavor-resource."""
    if node.parent is None:
        return False
    usage, subtree = node.usage, node.subtree
    return any(usage.get(fr, 0) > subtree.get(fr, 0) for fr in contested)


def cohort_members(tree: QuotaTree, cluster_queue: str) -> set[str]:
    """Every ClusterQueue in the preemptor's cohort tree (hierarchical cohorts: the whole tree
    under the root), the preemptor's own excluded."""
    node = tree.cluster_queues[cluster_queue]
    if node.parent is None:
        return set()
    members: set[str] = set()
    stack = [node.root()]
    while stack:
        current = stack.pop()
        for child in current.children:
            if child.is_cluster_queue:
                members.add(child.name)
            else:
                stack.append(child)
    members.discard(cluster_queue)
    return members


def sort_key(own_queue: str) -> Callable[[Running], tuple[bool, bool, int, float, str]]:
    """candidatesOrdering: evicting first, other ClusterQueues before the preemptor's own,
    lower priority first, most recently admitted first, then UID."""

    def key(w: Running) -> tuple[bool, bool, int, float, str]:
        return (not w.evicting, w.cluster_queue == own_queue, w.priority, -w.admitted_at, w.ref.uid)

    return key


def find_candidates(
    tree: QuotaTree,
    policy: ClusterQueuePreemption,
    preemptor: Preemptor,
    running: Iterable[Running],
    contested: frozenset[FlavorResource],
    protected: Callable[[Running], bool],
) -> list[Running]:
    """Running workloads the preemptor's policy allows it to preempt, that use a contested
    flavor-resource, sorted in Kueue's candidate order."""
    own = preemptor.cluster_queue
    prio = preemptor.priority
    within = policy.within_cluster_queue
    reclaim = policy.reclaim_within_cohort
    # Reclaiming only from ClusterQueues borrowing now (re-checked during the simulation).
    lenders: set[str] = set()
    if reclaim != "Never":
        nodes = tree.cluster_queues
        lenders = {
            name for name in cohort_members(tree, own) if is_borrowing(nodes[name], contested)
        }
    only_lower = reclaim == "LowerPriority"
    newer_equal = within == "LowerOrNewerEqualPriority"
    queue_time = preemptor.queue_time
    result: list[Running] = []
    for w in running:
        queue = w.cluster_queue
        if queue == own:
            if within == "Never" or w.priority > prio:
                continue
            if w.priority == prio and not (newer_equal and queue_time < w.queue_time):
                continue
        elif queue in lenders:
            if only_lower and w.priority >= prio:
                continue
        else:
            continue
        usage = w.usage
        if not any(usage.get(fr) for fr in contested) or protected(w):
            continue
        result.append(w)
    result.sort(key=sort_key(own))
    return result
