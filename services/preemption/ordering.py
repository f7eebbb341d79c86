"""Which running workloads may be preempted, and in which order (Kueue's findCandidates and
candidatesOrdering).

Order: evicting first, other ClusterQueues before the preemptor's own, lower priority first,
then, where Kueue leaves the choice free, the least recently preempted first
(``within_priority``), most recently admitted first, then UID. A search usually stops after a
few candidates out of thousands, so candidates are bucketed by (evicting, own queue,
priority, queue) while filtering and each bucket is sorted only when the search reaches it;
and many searches need only the preemptor's own queue and whether any lender has a
candidate, so each ClusterQueue is filtered only when the search first needs it (the lenders
themselves come from services/preemption/borrowing.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from services.preemption.borrowing import lenders
from services.preemption.model import Preemptor, Running
from shared.config import ClusterQueuePreemption
from shared.quota import FlavorResource, QuotaTree

__all__ = [
    "Candidates",
    "RunningOf",
    "find_candidates",
    "never",
    "sort_key",
    "within_priority",
]

_UID = attrgetter("ref.uid")
_ADMITTED = attrgetter("admitted_at")
_PREEMPTIONS = attrgetter("preemptions")
BucketKey = tuple[bool, bool, int, str]  # (not evicting, in own queue, priority, queue)
Buckets = dict[BucketKey, list[Running]]
# One ClusterQueue's running workloads (those a search may choose from), by its name.
RunningOf = Callable[[str], Iterable[Running]]


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
    """The allowed candidates, iterable in Kueue's order, overall or per ClusterQueue.

    Each ClusterQueue's candidates are filtered (``find``) when a question first needs them,
    the preemptor's own queue first: whether there are any stops at the first queue with one,
    ``only_own_queue`` at the first other queue with one, ``of_queue`` looks at that queue
    only; the overall order and ``queues`` look at every queue. The filter reads workloads
    only, never the tree the simulation changes, so every answer is the one filtering every
    queue at once gives.
    """

    __slots__ = ("_buckets", "_find", "_keys", "_of_queue", "_sorted", "_unseen")

    def __init__(self, queues: Iterable[str], find: Callable[[str], Buckets]) -> None:
        self._unseen = list(queues)  # not filtered yet, in the order to look at them
        self._unseen.reverse()  # popped from the end
        self._find = find
        self._buckets: Buckets = {}
        self._of_queue: dict[str, list[BucketKey]] = {}  # queue -> its keys, sorted
        self._keys: list[BucketKey] | None = None  # every key, sorted, once all are found
        self._sorted: set[BucketKey] = set()

    def _look(self) -> list[BucketKey]:
        """Filter the next unseen queue; its bucket keys (none: no candidate there)."""
        queue = self._unseen.pop()
        found = self._find(queue)
        keys = sorted(found)
        if keys:
            self._buckets.update(found)
            self._of_queue[queue] = keys
        return keys

    def _all(self) -> list[BucketKey]:
        if self._keys is None:
            while self._unseen:
                self._look()
            self._keys = sorted(self._buckets)
        return self._keys

    def __bool__(self) -> bool:
        while not self._buckets and self._unseen:
            self._look()
        return bool(self._buckets)

    @property
    def queues(self) -> set[str]:
        self._all()
        return set(self._of_queue)

    def only_own_queue(self) -> bool:
        if any(not key[1] for key in self._buckets):
            return False
        while self._unseen:
            if any(not key[1] for key in self._look()):
                return False
        return True

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
        keys = self._all()
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
        if queue in self._unseen:
            self._unseen.remove(queue)
            self._unseen.append(queue)  # looked at next
            self._look()
        for key in self._of_queue.get(queue, ()):
            yield from self._bucket(key)


def find_candidates(
    tree: QuotaTree,
    policy: ClusterQueuePreemption,
    preemptor: Preemptor,
    running: RunningOf,
    contested: frozenset[FlavorResource],
    protected: Callable[[Running], bool] = never,
) -> Candidates:
    """Running workloads the preemptor's policy allows it to preempt and that use a contested
    flavor-resource: in its own ClusterQueue as withinClusterQueue allows, in the other
    ClusterQueues of its cohort tree that borrow now (reclaimWithinCohort; re-checked during
    the simulation) as reclaimWithinCohort allows. ``running`` gives one queue's running
    workloads; each queue is filtered when the search first needs it (``Candidates``)."""
    own = preemptor.cluster_queue
    prio = preemptor.priority
    within = policy.within_cluster_queue
    reclaim = policy.reclaim_within_cohort
    own_allowed = within != "Never"
    newer_equal = within == "LowerOrNewerEqualPriority"
    only_lower = reclaim == "LowerPriority"
    queue_time = preemptor.queue_time
    check_protected = protected is not never
    queues = [own] if own_allowed else []
    if reclaim != "Never":
        queues += lenders(tree, own, contested)
    others = set(queues) - {own}

    def sort_in(workloads: Iterable[Running]) -> Buckets:
        """The allowed ones of ``workloads``, in their buckets."""
        buckets: Buckets = {}
        for w in workloads:
            queue = w.cluster_queue
            is_own = queue == own
            if is_own:
                if not own_allowed or w.priority > prio:
                    continue
                if w.priority == prio and not (newer_equal and queue_time < w.queue_time):
                    continue
            elif queue not in others or (only_lower and w.priority >= prio):
                continue
            # Any entry counts as use, as Kueue looks at the flavors assigned, not the amounts.
            if contested.isdisjoint(w.usage.keys()):
                continue
            if check_protected and protected(w):
                continue
            key = (not w.evicting, is_own, w.priority, queue)
            bucket = buckets.get(key)
            if bucket is None:
                buckets[key] = [w]
            else:
                bucket.append(w)
        return buckets

    return Candidates(queues, lambda queue: sort_in(running(queue)))
