"""Classical preemption in a hierarchical cohort tree (Kueue's classical/ package).

Used when the preemptor's cohort tree has cohorts under cohorts; a flat tree keeps the search
in :mod:`services.preemption.victims`, which gives the same victims there.

Candidates come in three kinds:

1. hierarchy candidates: workloads of queues that borrow from a subtree where the preemptor's
   need fits within quota. The preemptor is closer to that quota, so they are reclaimed
   whatever their priority (when reclaimWithinCohort allows the priority);
2. priority candidates: other queues' workloads over which it has no such advantage, allowed by
   reclaimWithinCohort, and by borrowWithinCohort if the preemptor would still borrow;
3. its own ClusterQueue's, by withinClusterQueue.

Only subtrees that use more than their quota in the contested flavor-resources are searched.
Order: evicting ones first, then kinds 1, 2, 3, each in Kueue's candidate order. A candidate
is skipped once its queue, or a cohort between it and the subtree the search found it in, is
back within quota. Attempts go with and without borrowing, in Kueue's order; the first that
frees enough wins, then victims the preemptor can do without are put back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from services.preemption.model import Preemptor, Reason, Running, Victim
from services.preemption.ordering import sort_key
from services.preemption.simulation import Simulation
from shared.config import ClusterQueuePreemption
from shared.hierarchy import fits_in_quota, path_to_root, within_nominal
from shared.quota import FlavorResource, QuotaNode, QuotaTree

__all__ = ["hierarchical_victims"]

_WITHOUT_BORROWING = "without"  # reclaimable only if the preemptor ends up not borrowing


@dataclass(frozen=True, slots=True)
class _Candidate:
    workload: Running
    reason: Reason
    variant: str  # "" or _WITHOUT_BORROWING
    lca: QuotaNode | None  # the subtree root it was found under (None: own queue)
    kind: int  # 0 hierarchy, 1 priority, 2 own queue


def _allowed(policy: str, w: Running, preemptor: Preemptor) -> bool:
    """Kueue's SatisfiesPreemptionPolicy."""
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return w.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return w.priority < preemptor.priority or (
            w.priority == preemptor.priority and preemptor.queue_time < w.queue_time
        )
    return False


def _classify(
    w: Running,
    preemptor: Preemptor,
    policy: ClusterQueuePreemption,
    advantage: bool,
) -> tuple[Reason, str] | None:
    """classifyPreemptionVariant for another queue's workload; None: not a candidate."""
    if not _allowed(policy.reclaim_within_cohort, w, preemptor):
        return None
    if advantage:
        return "InCohortReclamation", ""
    borrow = policy.borrow_within_cohort
    if borrow.policy == "Never":
        return "InCohortReclamation", _WITHOUT_BORROWING
    limit = borrow.max_priority_threshold
    if w.priority >= preemptor.priority or (limit is not None and w.priority > limit):
        return "InCohortReclamation", _WITHOUT_BORROWING
    return "InCohortReclaimWhileBorrowing", ""


def hierarchical_victims(
    tree: QuotaTree,
    policy: ClusterQueuePreemption,
    preemptor: Preemptor,
    running: Iterable[Running],
    contested: frozenset[FlavorResource],
    protected: Callable[[Running], bool],
) -> list[Victim]:
    """Kueue's classicalPreemptions over a cohort tree; empty when nothing frees enough."""
    own = preemptor.cluster_queue
    node = tree.cluster_queues[own]
    by_queue: dict[str, list[Running]] = {}
    for w in running:
        if not contested.isdisjoint(w.usage.keys()) and not protected(w):
            by_queue.setdefault(w.cluster_queue, []).append(w)
    found: list[_Candidate] = []
    if policy.within_cluster_queue != "Never":
        found += [
            _Candidate(w, "InClusterQueue", "", None, 2)
            for w in by_queue.get(own, ())
            if _allowed(policy.within_cluster_queue, w, preemptor)
        ]
    if node.parent is not None and policy.reclaim_within_cohort != "Never":
        advantage, remaining = fits_in_quota(node, preemptor.needs)
        previous: QuotaNode | None = None
        for subtree in path_to_root(node):
            for queue in _over_quota_queues(subtree, previous, own, contested):
                for w in by_queue.get(queue.name, ()):
                    variant = _classify(w, preemptor, policy, advantage)
                    if variant is not None:
                        found.append(_Candidate(w, *variant, subtree, 0 if advantage else 1))
            fits, remaining = fits_in_quota(subtree, remaining)
            advantage = advantage or fits
            previous = subtree
    key = sort_key(own)
    found.sort(key=lambda c: (not c.workload.evicting, c.kind, key(c.workload)))
    return _attempts(tree, node, policy, preemptor, contested, found)


def _over_quota_queues(
    cohort: QuotaNode, skip: QuotaNode | None, own: str, contested: frozenset[FlavorResource]
) -> Iterable[QuotaNode]:
    """collectCandidatesInSubtree: the ClusterQueues under ``cohort`` above their quota in a
    contested flavor-resource, through cohorts above theirs, ``skip``'s subtree excepted."""
    for child in cohort.children:
        if child is skip or within_nominal(child, contested):
            continue
        if child.is_cluster_queue:
            if child.name != own:
                yield child
        else:
            yield from _over_quota_queues(child, skip, own, contested)


def _valid(
    candidate: _Candidate,
    tree: QuotaTree,
    own: str,
    borrowing: bool,
    contested: frozenset[FlavorResource],
) -> bool:
    """candidateIsValid: its queue, and the cohorts up to where it was found, still above
    quota (earlier removals may have brought them back within it)."""
    if candidate.workload.cluster_queue == own:
        return True
    if borrowing and candidate.variant == _WITHOUT_BORROWING:
        return False
    queue = tree.cluster_queues[candidate.workload.cluster_queue]
    if within_nominal(queue, contested):
        return False
    for cohort in path_to_root(queue):
        if cohort is candidate.lca:
            break
        if within_nominal(cohort, contested):
            return False
    return True


def _attempts(
    tree: QuotaTree,
    node: QuotaNode,
    policy: ClusterQueuePreemption,
    preemptor: Preemptor,
    contested: frozenset[FlavorResource],
    candidates: list[_Candidate],
) -> list[Victim]:
    """Kueue's attempt order: borrowing first unless only a non-borrowing attempt could use
    the other queues' candidates."""
    own = preemptor.cluster_queue
    no_other = all(c.kind == 2 for c in candidates)
    no_hierarchy = all(c.kind != 0 for c in candidates)
    forbidden = policy.borrow_within_cohort.policy == "Never"
    under_nominal = all(
        node.usage.get(fr, 0) < (node.quotas[fr].nominal if fr in node.quotas else 0)
        for fr in contested
    )
    if no_other or (forbidden and not under_nominal):
        options = [True]
    elif forbidden and no_hierarchy:
        options = [False, True]
    else:
        options = [True, False]
    sim = Simulation(tree, own, preemptor.needs, contested)
    for borrowing in options:
        victims: list[Victim] = []
        try:
            for candidate in candidates:
                if not _valid(candidate, tree, own, borrowing, contested):
                    continue
                sim.remove(candidate.workload)
                victims.append(Victim(candidate.workload, candidate.reason))
                if sim.fits(borrowing):
                    return sim.fill_back(victims, borrowing)
        finally:
            sim.restore()
    return []
