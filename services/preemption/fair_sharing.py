"""Fair-sharing preemption (Kueue's fairPreemptions, KEP 1714).

A ClusterQueue's dominant resource share (DRS) is, over the resources it borrows, the largest
``borrowed * 1000 / lendable in its parent cohort``, divided by its fairSharing weight. The
preemptor takes from the ClusterQueues with the highest share first, as long as a strategy
says doing so keeps things fair:

- LessThanOrEqualToFinalShare (S2-a): preemptor's share with the workload <= the target
  queue's share after losing the victim;
- LessThanInitialShare (S2-b): preemptor's share with the workload < the target queue's share
  before losing it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence

from services.preemption.model import Reason, Running, Victim
from services.preemption.ordering import Candidates
from services.preemption.simulation import Simulation
from shared.config import ClusterQueue, FairSharingStrategy
from shared.quantities import parse_quantity
from shared.quota import FlavorResource, QuotaNode

__all__ = ["dominant_resource_share", "fair_preemptions", "weight_of"]

Strategy = Callable[[int, int, int], bool]  # (preemptor new, target old, target new) -> ok


def _final_share(preemptor_new: int, _target_old: int, target_new: int) -> bool:
    return preemptor_new <= target_new


def _initial_share(preemptor_new: int, target_old: int, _target_new: int) -> bool:
    return preemptor_new < target_old


_STRATEGIES: dict[str, Strategy] = {
    "LessThanOrEqualToFinalShare": _final_share,
    "LessThanInitialShare": _initial_share,
}


def weight_of(cluster_queue: ClusterQueue | None) -> int:
    """fairSharing.weight in milli-units (default 1)."""
    if cluster_queue is None or cluster_queue.spec.fair_sharing is None:
        return 1000
    return parse_quantity(cluster_queue.spec.fair_sharing.weight)


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def dominant_resource_share(
    node: QuotaNode, weight: int, delta: Mapping[FlavorResource, int] | None = None, sign: int = 1
) -> int:
    """DRS of a ClusterQueue, with ``sign * delta`` added to its usage (Kueue's
    DominantResourceShareWith / Without). 0 when not borrowing; maxint when the weight is 0."""
    parent = node.parent
    if parent is None:
        return 0
    if weight == 0:
        return sys.maxsize
    borrowing: dict[str, int] = {}
    usage = node.usage
    for fr, quota in node.subtree.items():
        extra = usage.get(fr, 0) - quota
        if delta:
            extra += sign * delta.get(fr, 0)
        if extra > 0:
            borrowing[fr[1]] = borrowing.get(fr[1], 0) + extra
    if not borrowing:
        return 0
    lendable: dict[str, int] = {}
    for fr, quota in parent.subtree.items():
        lendable[fr[1]] = lendable.get(fr[1], 0) + quota
    drs = -1
    for resource, amount in borrowing.items():
        total = lendable.get(resource, 0)
        if total > 0:
            drs = max(drs, amount * 1000 // total)
    return _trunc_div(drs * 1000, weight)


class _Queue:
    """A ClusterQueue in the heap: its current share and its remaining candidates."""

    __slots__ = ("_next", "_rest", "name", "share")

    def __init__(self, name: str, share: int, workloads: Iterator[Running]) -> None:
        self.name = name
        self.share = share
        self._rest = workloads
        self._next: Running | None = next(workloads, None)

    def __bool__(self) -> bool:
        return self._next is not None

    def take(self) -> Running | None:
        """The next candidate (None when exhausted)."""
        w = self._next
        if w is not None:
            self._next = next(self._rest, None)
        return w


def _pop_highest(heap: dict[str, _Queue]) -> _Queue:
    # A handful of queues: a linear scan beats a heap; ties go to the name for determinism.
    best = min(heap.values(), key=lambda q: (-q.share, q.name))
    del heap[best.name]
    return best


def _share(sim: Simulation, weights: Mapping[str, int], queue: str) -> int:
    return dominant_resource_share(sim.tree.cluster_queues[queue], weights[queue])


def fair_preemptions(
    sim: Simulation,
    weights: Mapping[str, int],
    candidates: Candidates,
    strategies: Sequence[FairSharingStrategy],
    threshold: int | None,
) -> list[Victim]:
    """Victims chosen by fair sharing, or [] when the strategies cannot make room."""
    rules = [_STRATEGIES[s] for s in strategies] or [_final_share, _initial_share]
    own = sim.queue
    nodes = sim.tree.cluster_queues
    own_node, own_weight = nodes[own], weights[own]
    needs = dict(sim.needs)
    victims: list[Victim] = []
    fits = False
    try:
        heap = {
            q: _Queue(q, _share(sim, weights, q), candidates.of_queue(q))
            for q in sorted(candidates.queues)
        }
        preemptor_share = dominant_resource_share(own_node, own_weight, needs)
        retry: dict[str, Running] = {}  # first candidate each queue's strategy refused
        while heap and not fits:
            queue = _pop_highest(heap)
            if queue.name == own:
                w = queue.take()
                assert w is not None  # only non-empty queues are in the heap
                sim.remove(w)
                victims.append(Victim(w, "InClusterQueue"))
                if sim.fits(True):
                    fits = True
                    break
                preemptor_share = dominant_resource_share(own_node, own_weight, needs)
                if queue:
                    queue.share = dominant_resource_share(own_node, own_weight)
                    heap[own] = queue
                continue
            node, weight = nodes[queue.name], weights[queue.name]
            while (w := queue.take()) is not None:
                below = threshold is not None and w.priority < threshold
                target_new = dominant_resource_share(node, weight, w.usage, -1)
                fair = rules[0](preemptor_share, queue.share, target_new)
                if below or fair:
                    sim.remove(w)
                    reason: Reason = (
                        "InCohortFairSharing" if fair else "InCohortReclaimWhileBorrowing"
                    )
                    victims.append(Victim(w, reason))
                    if sim.fits(True):
                        fits = True
                        break
                    if queue and sim.borrowing(queue.name):
                        queue.share = target_new
                        heap[queue.name] = queue
                    break  # shares changed: pick the queue again
                retry.setdefault(w.cluster_queue, w)
        if not fits and len(rules) > 1:
            # S2-b: one refused candidate per queue, highest current share first. It does not
            # depend on the victim; Kueue does not requeue (S2-b applies once per queue).
            heap = {q: _Queue(q, _share(sim, weights, q), iter((w,))) for q, w in retry.items()}
            while heap and not fits:
                queue = _pop_highest(heap)
                if rules[1](preemptor_share, queue.share, 0):
                    w = queue.take()
                    assert w is not None
                    sim.remove(w)
                    victims.append(Victim(w, "InCohortFairSharing"))
                    fits = sim.fits(True)
        if not fits:
            return []
        return sim.fill_back(victims, True)
    finally:
        sim.restore()
