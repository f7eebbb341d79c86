"""The preemption victim search: Kueue's classical preemption (GetTargets) and its fair-sharing
variant, as a pure function over the quota tree. No I/O, no asyncio.

Kueue's attempt order, once the candidates are known and sorted:

1. all candidates in the preemptor's own ClusterQueue: one attempt, borrowing allowed;
2. fair sharing enabled: fairPreemptions;
3. borrowWithinCohort LowerPriority: one attempt with borrowing; unless the ClusterQueue is
   under nominal quota in every contested flavor-resource, other-queue candidates must be
   below the threshold (min(preemptor priority, maxPriorityThreshold + 1));
4. otherwise: if under nominal, an attempt without borrowing over all candidates (reclaim);
   if that fails, an attempt with borrowing over the own ClusterQueue's candidates only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import chain

from services.preemption.borrowing import cohort_members, hierarchical
from services.preemption.fair_hierarchical import hierarchical_fair_preemptions
from services.preemption.fair_sharing import fair_preemptions, weight_of
from services.preemption.hierarchical import hierarchical_victims
from services.preemption.model import Preemptor, Running, SearchResult, Victim
from services.preemption.ordering import Candidates, RunningOf, find_candidates, never
from services.preemption.simulation import Simulation
from shared.config import ClusterQueue, ClusterQueuePreemption, Cohort, FairSharingSettings
from shared.quantities import parse_quantity
from shared.quota import FlavorResource, QuotaNode, QuotaTree, available_at

__all__ = ["FITS", "Preemptor", "Running", "SearchResult", "Victim", "find_victims", "fits_now"]

NO_CANDIDATES = (
    "Workload requires preemption, but there are no candidate workloads allowed for preemption"
)
FITS = "the workload fits without preemption"
NO_FIT = "preempting every allowed candidate would not free enough quota for the workload"


def find_victims(
    *,
    tree: QuotaTree,
    cluster_queues: Mapping[str, ClusterQueue],
    preemptor: Preemptor,
    running: RunningOf,
    protected: Callable[[Running], bool] = never,
    fair_sharing: FairSharingSettings | None = None,
    cohorts: Mapping[str, Cohort] | None = None,
) -> SearchResult:
    """The workloads to evict so that ``preemptor`` fits, each with its Preempted reason.

    ``tree`` holds the usage of every running workload (evicting ones included); it is used
    for the simulation and left exactly as it was. ``running`` gives one ClusterQueue's running
    workloads, so that a search reads only the queues it needs.
    """
    own = preemptor.cluster_queue
    node = tree.cluster_queues.get(own)
    spec = cluster_queues.get(own)
    if node is None or spec is None:
        return SearchResult((), f"ClusterQueue {own} not found")
    contested = _contested(tree, node, preemptor.needs)
    if not contested:
        return SearchResult((), FITS)
    policy = spec.spec.preemption
    fair = fair_sharing is not None and fair_sharing.enable
    if not fair and hierarchical(tree, node):
        # Cohorts under cohorts: Kueue's hierarchical reclaim (services/preemption/hierarchical.py).
        everyone = _everyone(tree, own, running)
        found = hierarchical_victims(tree, policy, preemptor, everyone, contested, protected)
        return SearchResult(tuple(found), _summary(found)) if found else SearchResult((), NO_FIT)
    candidates = find_candidates(tree, policy, preemptor, running, contested, protected)
    if not candidates:
        return SearchResult((), NO_CANDIDATES)
    sim = Simulation(tree, own, preemptor.needs, contested)
    if fair and fair_sharing is not None and hierarchical(tree, node):
        # Shares compared at the least common ancestor (services/preemption/fair_hierarchical.py).
        weight = _weights(cluster_queues, cohorts or {})
        victims = hierarchical_fair_preemptions(
            sim, candidates, fair_sharing.preemption_strategies, weight
        )
    else:
        victims = _search(sim, node, policy, preemptor, candidates, cluster_queues, fair_sharing)
    if not victims:
        return SearchResult((), NO_FIT)
    return SearchResult(tuple(victims), _summary(victims))


def _everyone(tree: QuotaTree, own: str, running: RunningOf) -> Iterable[Running]:
    """Every running workload of the preemptor's cohort tree (all the search may look at)."""
    return chain.from_iterable(running(q) for q in (own, *cohort_members(tree, own)))


def _weights(
    cluster_queues: Mapping[str, ClusterQueue], cohorts: Mapping[str, Cohort]
) -> Callable[[QuotaNode], float]:
    """fairSharing.weight of a ClusterQueue or a Cohort (1 when unset)."""

    def weight(node: QuotaNode) -> float:
        if node.is_cluster_queue:
            return weight_of(cluster_queues.get(node.name)) / 1000
        cohort = cohorts.get(node.name)
        if cohort is None or cohort.spec.fair_sharing is None:
            return 1.0
        return parse_quantity(cohort.spec.fair_sharing.weight) / 1000

    return weight


def fits_now(
    tree: QuotaTree,
    cluster_queues: Mapping[str, ClusterQueue],
    cluster_queue: str,
    needs: Mapping[FlavorResource, int],
) -> bool:
    """Whether ``find_victims`` would answer ``FITS`` for a preemptor of ``cluster_queue``
    with these ``needs``: its ClusterQueue is known (in the config and the tree) and no need
    is contested (``_contested``). Stops at the first contested need, and builds no
    ``Preemptor`` and no candidates: most preemptors fit by the time preemption looks at
    them (the room was freed after admission asked), and this is their whole search."""
    node = tree.cluster_queues.get(cluster_queue)
    if node is None or cluster_queue not in cluster_queues:
        return False
    for fr, value in needs.items():
        if value > available_at(node, fr):  # _short, without its calls: most searches end here
            return False
    return True


def _contested(
    tree: QuotaTree, node: QuotaNode, needs: Mapping[FlavorResource, int]
) -> frozenset[FlavorResource]:
    """Flavor-resources where the preemptor does not fit now (Kueue: assignment mode Preempt)."""
    return frozenset(fr for fr, value in needs.items() if _short(tree, node, fr, value))


def _short(tree: QuotaTree, node: QuotaNode, fr: FlavorResource, value: int) -> bool:
    """Whether ``value`` of ``fr`` is more than the ClusterQueue ``node`` may use now,
    borrowing included (``QuotaTree.available``): the need is contested."""
    return value > available_at(node, fr)


def _threshold(policy: ClusterQueuePreemption, priority: int) -> int | None:
    """canBorrowWithinCohort: other-queue victims must be below this to allow borrowing."""
    borrow = policy.borrow_within_cohort
    if borrow.policy == "Never":
        return None
    limit = borrow.max_priority_threshold
    if limit is not None and limit < priority:
        return limit + 1
    return priority


def _under_nominal(node: QuotaNode, contested: frozenset[FlavorResource]) -> bool:
    """queueUnderNominalInResourcesNeedingPreemption."""
    for fr in contested:
        quota = node.quotas.get(fr)
        if node.usage.get(fr, 0) >= (0 if quota is None else quota.nominal):
            return False
    return True


def _search(
    sim: Simulation,
    node: QuotaNode,
    policy: ClusterQueuePreemption,
    preemptor: Preemptor,
    candidates: Candidates,
    cluster_queues: Mapping[str, ClusterQueue],
    fair_sharing: FairSharingSettings | None,
) -> list[Victim]:
    own = preemptor.cluster_queue
    if candidates.only_own_queue():
        return sim.minimal(candidates, allow_borrowing=True)
    threshold = _threshold(policy, preemptor.priority)
    if fair_sharing is not None and fair_sharing.enable:
        weights = {name: weight_of(cluster_queues.get(name)) for name in candidates.queues | {own}}
        return fair_preemptions(
            sim, weights, candidates, fair_sharing.preemption_strategies, threshold
        )
    under_nominal = _under_nominal(node, sim.contested)
    skip: set[str] = set()  # queues that stopped borrowing during an attempt
    if threshold is not None:
        ordered = candidates.ordered(skip)
        if not under_nominal:
            limit = threshold
            ordered = (w for w in ordered if w.cluster_queue == own or w.priority < limit)
        return sim.minimal(ordered, allow_borrowing=True, threshold=threshold, skip=skip)
    # An attempt without borrowing cannot succeed when a need exceeds the nominal quota:
    # skipping it gives the same answer, faster.
    if under_nominal and sim.within_nominal_possible():
        victims = sim.minimal(candidates.ordered(skip), allow_borrowing=False, skip=skip)
        if victims:
            return victims
    return sim.minimal(candidates.of_queue(own), allow_borrowing=True)


def _summary(victims: list[Victim]) -> str:
    counts: dict[str, int] = {}
    for victim in victims:
        counts[victim.reason] = counts.get(victim.reason, 0) + 1
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items()))
    return f"preempting {len(victims)} workload(s): {reasons}"
