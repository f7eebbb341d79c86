"""Which running workloads may be preempted, and in which order (Kueue's findCandidates and
candidatesOrdering).

Order: evicting first, other ClusterQueues before the preemptor's own, lower priority first,
then, where Kueue leaves the choice free, the least recently preempted first
(``within_priority``), most recently admitted first, then UID. A search usually stops after a
few candidates out of thousands, so candidates are bucketed by (evicting, own queue,
priority, queue) while filtering and each bucket is sorted only when the search reaches it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Iterator
from operator import attrgetter

from services.preemption.model import Preemptor, Running
from shared.config import ClusterQueuePreemption
from shared.quota import FlavorResource, QuotaNode, QuotaTree

__all__ = [
    "Candidates",
    "cohort_members",
    "find_candidates",
    "is_borrowing",
    "never",
    "sort_key",
    "within_priority",
]

_UID = attrgetter("ref.uid")
_ADMITTED = attrgetter("admitted_at")
_PREEMPTIONS = attrgetter("preemptions")
BucketKey = tuple[bool, bool, int, str]  # (not evicting, in own queue, priority, queue)


def never(_: Running) -> bool:
    """The default ``protected``: nothing is protected."""
    return False


def sort_key(own_queue: str) -> Callable[[Running], tuple[bool, bool, int, int, float, str]]:
    """candidatesOrdering as one sort key (the buckets implement the same order lazily)."""

    def key(w: Running) -> tuple[bool, bool, int, int, float, str]:
        return (not w.evicting, w.cluster_queue == own_queue, w.priority, *within_priority(w))

    return key


def within_priority(w: Running) -> tuple[int, float, str]:
    """Among candidates Kueue ranks alike (same eviction state, queue side and priority): the
    one preempted least often in the hour before its admission goes first, then Kueue's most
    recently admitted, then UID. Kueue's own order alone picks the workload that just came
    back from a preemption (it is the most recently admitted), so the same workload would be
    preempted again and again (the thrash of Kueue issue #6861); a priority is never
    overruled by this."""
    return (w.preemptions, -w.admitted_at, w.ref.uid)


class Candidates:
    """The allowed candidates, iterable in Kueue's order, overall or per ClusterQueue."""

    __slots__ = ("_buckets", "_keys", "_sorted")

    def __init__(self, buckets: dict[BucketKey, list[Running]]) -> None:
        self._buckets = buckets
        self._keys = sorted(buckets)
        self._sorted: set[BucketKey] = set()

    def __bool__(self) -> bool:
        return bool(self._keys)

    @property
    def queues(self) -> set[str]:
        return {key[3] for key in self._keys}

    def only_own_queue(self) -> bool:
        return all(key[1] for key in self._keys)

    def _bucket(self, key: BucketKey) -> list[Running]:
        bucket = self._buckets[key]
        if key not in self._sorted:
            # Three stable C-level sorts, which give within_priority's order: UID ascending,
            # then most recently admitted first, then least recently preempted first.
            bucket.sort(key=_UID)
            bucket.sort(key=_ADMITTED, reverse=True)
            bucket.sort(key=_PREEMPTIONS)
            self._sorted.add(key)
        return bucket

    def __iter__(self) -> Iterator[Running]:
        return self.ordered(set())

    def ordered(self, skip: set[str]) -> Iterator[Running]:
        """All candidates in order; whole buckets of queues in ``skip`` (which the consumer may
        grow while iterating) are passed over without being sorted."""
        keys = self._keys
        i = 0
        while i < len(keys):
            j = i + 1
            while j < len(keys) and keys[j][:3] == keys[i][:3]:
                j += 1
            group = [key for key in keys[i:j] if key[3] not in skip]
            if len(group) == 1:
                yield from self._bucket(group[0])
            elif group:  # same rank in several queues: merge by admission time and UID
                yield from heapq.merge(*(self._bucket(key) for key in group), key=within_priority)
            i = j

    def of_queue(self, queue: str) -> Iterator[Running]:
        for key in self._keys:
            if key[3] == queue:
                yield from self._bucket(key)


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


def find_candidates(
    tree: QuotaTree,
    policy: ClusterQueuePreemption,
    preemptor: Preemptor,
    running: Iterable[Running],
    contested: frozenset[FlavorResource],
    protected: Callable[[Running], bool] = never,
) -> Candidates:
    """Running workloads the preemptor's policy allows it to preempt and that use a contested
    flavor-resource."""
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
    own_allowed = within != "Never"
    newer_equal = within == "LowerOrNewerEqualPriority"
    queue_time = preemptor.queue_time
    check_protected = protected is not never
    buckets: dict[BucketKey, list[Running]] = {}
    for w in running:
        queue = w.cluster_queue
        if queue == own:
            if not own_allowed or w.priority > prio:
                continue
            if w.priority == prio and not (newer_equal and queue_time < w.queue_time):
                continue
        elif queue in lenders:
            if only_lower and w.priority >= prio:
                continue
        else:
            continue
        # Any entry counts as use, as Kueue looks at the flavors assigned, not the amounts.
        if contested.isdisjoint(w.usage.keys()):
            continue
        if check_protected and protected(w):
            continue
        key = (not w.evicting, queue == own, w.priority, queue)
        bucket = buckets.get(key)
        if bucket is None:
            buckets[key] = [w]
        else:
            bucket.append(w)
    return Candidates(buckets)
