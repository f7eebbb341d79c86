"""Fair-sharing preemption in a hierarchical cohort tree (Kueue's fairsharing/ package).

Used when fair sharing is on and the preemptor's cohort tree has cohorts under cohorts; a flat
tree keeps :mod:`services.preemption.fair_sharing`.

- Shares: a node's dominant resource share (DRS) is, over the resources it uses beyond its
  subtree quota, the largest ``borrowed * 1000 / what its parent could lend`` (its parent's
  potential available, summed per resource), divided by its fairSharing weight (a Cohort's too).
- Targets: from the root down, the child with the highest share is followed (cohorts and
  queues not borrowing are pruned, except the preemptor's own path) until a ClusterQueue.
- Strategies compare shares at the least common ancestor: the preemptor's and the target's
  ancestors just below it ("almost LCAs"), with the preemptor's workload counted.
- A preemptor within its nominal quota in the contested resources reclaims without a
  strategy (Kueue's FairSharingPreemptWithinNominal, on by default).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from services.preemption.model import Running, Victim
from services.preemption.ordering import Candidates, sort_key
from services.preemption.simulation import Simulation
from shared.config import FairSharingStrategy
from shared.fair_share import Share, node_share
from shared.hierarchy import path_to_root
from shared.quota import QuotaNode

__all__ = ["hierarchical_fair_preemptions"]


_NEGATIVE = Share(-1.0, 1.0).key()


class _Ordering:
    """TargetClusterQueueOrdering: the ClusterQueue to take from next, highest share first."""

    def __init__(
        self,
        own: QuotaNode,
        queues: dict[str, deque[Running]],
        weight: Callable[[QuotaNode], float],
    ) -> None:
        self.own = own
        self.queues = queues
        self.weight = weight
        self.ancestors = {id(n) for n in path_to_root(own)}
        self.pruned: set[int] = set()
        self.order = sort_key(own.name)

    def share(self, node: QuotaNode) -> Share:
        return node_share(node, self.weight(node))

    def targets(self) -> Iterator[QuotaNode]:
        if self.own.parent is None:
            while id(self.own) not in self.pruned and self.queues.get(self.own.name):
                yield self.own
            return
        root = self.own.root()
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def drop(self, queue: QuotaNode) -> None:
        self.pruned.add(id(queue))

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        best_queue: QuotaNode | None = None
        best_queue_key = _NEGATIVE
        best_cohort: QuotaNode | None = None
        best_cohort_key = _NEGATIVE
        for child in cohort.children:
            if id(child) in self.pruned:
                continue
            share = self.share(child)
            if child.is_cluster_queue:
                if (not share.borrowing and child is not self.own) or not self.queues.get(
                    child.name
                ):
                    self.pruned.add(id(child))
                elif best_queue is not None and share.key() == best_queue_key:
                    # Equal shares: the queue whose next candidate Kueue's order puts first.
                    mine = self.order(self.queues[child.name][0])
                    if mine < self.order(self.queues[best_queue.name][0]):
                        best_queue = child
                elif share.key() > best_queue_key:
                    best_queue, best_queue_key = child, share.key()
            elif not share.borrowing and id(child) not in self.ancestors:
                self.pruned.add(id(child))
            elif share.key() >= best_cohort_key:
                best_cohort, best_cohort_key = child, share.key()
        if best_cohort is None and best_queue is None:
            self.pruned.add(id(cohort))
            return None
        if best_cohort is not None and best_cohort_key >= best_queue_key:
            return self._next(best_cohort)
        return best_queue

    def almost_lcas(self, target: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
        """The preemptor's and the target's ancestors just below their least common one."""
        lca = next(c for c in path_to_root(target) if id(c) in self.ancestors)
        return _below(self.own, lca), _below(target, lca)


def _below(node: QuotaNode, ancestor: QuotaNode) -> QuotaNode:
    current = node
    while current.parent is not ancestor:
        assert current.parent is not None
        current = current.parent
    return current


Strategy = Callable[[Share, Share, Share], bool]  # (preemptor new, target old, target new)


def _final_share(preemptor_new: Share, _old: Share, target_new: Share) -> bool:
    return preemptor_new.key() <= target_new.key()


def _initial_share(preemptor_new: Share, target_old: Share, _new: Share) -> bool:
    return preemptor_new.key() < target_old.key()


_STRATEGIES: dict[str, Strategy] = {
    "LessThanOrEqualToFinalShare": _final_share,
    "LessThanInitialShare": _initial_share,
}


def hierarchical_fair_preemptions(
    sim: Simulation,
    candidates: Candidates,
    strategies: Sequence[FairSharingStrategy],
    weight: Callable[[QuotaNode], float],
) -> list[Victim]:
    """Kueue's fairPreemptions over a cohort tree; [] when the strategies cannot make room."""
    rules = [_STRATEGIES[s] for s in strategies] or [_final_share, _initial_share]
    tree, own = sim.tree, sim.node
    needs = dict(sim.needs)
    queues = {q: deque(candidates.of_queue(q)) for q in sorted(candidates.queues)}
    victims: list[Victim] = []
    # The preemptor's usage is counted while shares are compared (Kueue's simulated addition).
    tree.add_usage(own.name, needs)
    added = True

    def fits() -> bool:
        tree.remove_usage(own.name, needs)
        try:
            return sim.fits(True)
        finally:
            tree.add_usage(own.name, needs)

    try:
        within_nominal = all(own.usage.get(fr, 0) <= own.subtree.get(fr, 0) for fr in sim.contested)
        ordering = _Ordering(own, queues, weight)
        retry: dict[str, deque[Running]] = {}
        found = False
        for target in ordering.targets():
            pending = queues[target.name]
            if target is own or within_nominal:
                w = pending.popleft()
                sim.remove(w)
                victims.append(
                    Victim(w, "InClusterQueue" if target is own else "InCohortReclamation")
                )
                if fits():
                    found = True
                    break
                continue
            mine, theirs = ordering.almost_lcas(target)
            preemptor_new = ordering.share(mine)
            target_old = ordering.share(theirs)
            if math.isinf(preemptor_new.value) and not math.isinf(target_old.value):
                retry.setdefault(target.name, deque()).extend(pending)
                pending.clear()
                continue
            while pending:
                w = pending.popleft()
                tree.remove_usage(w.cluster_queue, w.usage)
                target_new = ordering.share(theirs)
                tree.add_usage(w.cluster_queue, w.usage)
                if rules[0](preemptor_new, target_old, target_new):
                    sim.remove(w)
                    victims.append(Victim(w, "InCohortFairSharing"))
                    found = fits()
                    break
                retry.setdefault(target.name, deque()).append(w)
            if found:
                break
        if not found and len(rules) > 1:
            ordering = _Ordering(own, retry, weight)
            for target in ordering.targets():
                mine, theirs = ordering.almost_lcas(target)
                passed = rules[1](ordering.share(mine), ordering.share(theirs), Share(0.0, 1.0))
                w = retry[target.name].popleft()
                if passed:
                    sim.remove(w)
                    victims.append(Victim(w, "InCohortFairSharing"))
                    if fits():
                        found = True
                        break
                ordering.drop(target)
        tree.remove_usage(own.name, needs)
        added = False
        if not found:
            return []
        return sim.fill_back(victims, True)
    finally:
        if added:
            tree.remove_usage(own.name, needs)
        sim.restore()
