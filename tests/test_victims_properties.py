"""Properties of the victim search (services.preemption.victims) over generated worlds:
victims make room, respect the policy, form a minimal set, and the tree is untouched."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings

from services.preemption.victims import Preemptor
from shared.quota import QuotaTree
from tests.victims_search import World, search, worlds


def _fits(tree: QuotaTree, p: Preemptor, allow_borrowing: bool) -> bool:
    node = tree.cluster_queues[p.cluster_queue]
    for fr, value in p.needs.items():
        if not value:
            continue
        if not allow_borrowing and node.usage.get(fr, 0) + value > node.subtree.get(fr, 0):
            return False
        if value > tree.available(p.cluster_queue, *fr):
            return False
    return True


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_search_properties(
    world: World,
) -> None:
    """Victims make room, respect the policy, form a minimal set, and the tree is untouched."""
    queues, cohorts, running, preemptor, protected, fair = world
    result = search(queues, running, preemptor, cohorts, protected, fair)  # checks the tree
    event("victims" if result.victims else result.message)
    if not result.victims:
        return
    spec = {q.metadata.name: q for q in queues}[preemptor.cluster_queue].spec.preemption
    borrow = spec.borrow_within_cohort
    threshold = preemptor.priority
    if borrow.max_priority_threshold is not None and borrow.max_priority_threshold < threshold:
        threshold = borrow.max_priority_threshold + 1
    for victim in result.victims:
        w = victim.workload
        assert w.ref.name not in protected
        if w.cluster_queue == preemptor.cluster_queue:
            assert victim.reason == "InClusterQueue"
            assert spec.within_cluster_queue != "Never"
            newer = (
                spec.within_cluster_queue == "LowerOrNewerEqualPriority"
                and w.queue_time > preemptor.queue_time
            )
            assert w.priority < preemptor.priority or (w.priority == preemptor.priority and newer)
        else:
            assert victim.reason != "InClusterQueue"
            assert spec.reclaim_within_cohort != "Never"
            if spec.reclaim_within_cohort == "LowerPriority":
                assert w.priority < preemptor.priority
            if victim.reason == "InCohortReclaimWhileBorrowing":
                assert borrow.policy == "LowerPriority" and w.priority < threshold
            if victim.reason == "InCohortFairSharing":
                assert fair is not None
    tree = QuotaTree.build(queues, cohorts)
    for w in running:
        tree.add_usage(w.cluster_queue, w.usage)
    for victim in result.victims:
        tree.remove_usage(victim.workload.cluster_queue, victim.workload.usage)
    assert _fits(tree, preemptor, True)
    strict = _fits(tree, preemptor, False)
    for victim in result.victims:  # minimal: every victim is needed
        w = victim.workload
        tree.add_usage(w.cluster_queue, w.usage)
        assert not _fits(tree, preemptor, not strict), f"{w.ref.name} was not needed"
        tree.remove_usage(w.cluster_queue, w.usage)
