"""The candidates of a victim search (services.preemption.ordering.find_candidates):
their order, and the lazy per-queue filtering against filtering every queue at once."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.preemption.borrowing import cohort_members
from services.preemption.ordering import find_candidates, sort_key
from services.preemption.victims import Preemptor, Running
from shared.config import ClusterQueue
from shared.quota import FlavorResource, QuotaTree
from tests.victims_search import F, World, by_queue, cq, run, wants, worlds


def test_candidate_order() -> None:
    """Candidates come evicting first, other queues first, lower priority, recent, UID."""
    queues = [cq("a", {F: 10}, "c", within="LowerPriority", reclaim="Any"), cq("b", {F: 0}, "c")]
    running = [
        run("own-low", "a", 1, {F: 1}),
        run("b-high", "b", 50, {F: 1}),
        run("b-low-old", "b", 1, {F: 1}, admitted=1),
        run("b-low-new", "b", 1, {F: 1}, admitted=2),
        run("own-evicting", "a", 60, {F: 1}, evicting=True),
    ]
    tree = QuotaTree.build(queues, [])
    for w in running:
        tree.add_usage(w.cluster_queue, w.usage)
    found = find_candidates(
        tree,
        queues[0].spec.preemption,
        wants("a", 100, {F: 10}),
        by_queue(running),
        frozenset({("f", "cpu")}),
        lambda _: False,
    )
    assert [w.ref.name for w in found] == [
        "own-evicting",
        "b-low-new",
        "b-low-old",
        "b-high",
        "own-low",
    ]


def _eager_candidates(
    tree: QuotaTree,
    spec: ClusterQueue,
    p: Preemptor,
    running: Sequence[Running],
    contested: frozenset[FlavorResource],
    protected: frozenset[str],
) -> list[Running]:
    """The candidates as Kueue lists them, every queue filtered at once, in candidatesOrdering:
    the oracle for the lazy Candidates."""
    policy = spec.spec.preemption
    own = p.cluster_queue
    members = cohort_members(tree, own)
    lenders = {
        q
        for q in members
        if any(
            tree.cluster_queues[q].usage.get(fr, 0) > tree.cluster_queues[q].subtree.get(fr, 0)
            for fr in contested
        )
    }
    found = []
    for w in running:
        if w.cluster_queue == own:
            within = policy.within_cluster_queue
            newer = within == "LowerOrNewerEqualPriority" and p.queue_time < w.queue_time
            if within == "Never" or not (
                w.priority < p.priority or (w.priority == p.priority and newer)
            ):
                continue
        elif w.cluster_queue in lenders and policy.reclaim_within_cohort != "Never":
            if policy.reclaim_within_cohort == "LowerPriority" and w.priority >= p.priority:
                continue
        else:
            continue
        if contested.isdisjoint(w.usage.keys()) or w.ref.name in protected:
            continue
        found.append(w)
    return sorted(found, key=sort_key(own))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    worlds(),
    st.permutations(["bool", "only_own", "own", "other", "queues", "all"]),
)
def test_lazy_candidates_answer_as_eager(world: World, questions: list[str]) -> None:
    """find_candidates filters each ClusterQueue only when a question needs it: whatever the
    questions and their order, every answer is what filtering every queue at once gives."""
    queues, cohorts, running, preemptor, protected, _ = world
    tree = QuotaTree.build(queues, cohorts)
    for w in running:
        tree.add_usage(w.cluster_queue, w.usage)
    spec = {q.metadata.name: q for q in queues}[preemptor.cluster_queue]
    node = tree.cluster_queues[preemptor.cluster_queue]
    contested = frozenset(
        fr for fr, v in preemptor.needs.items() if v > tree.available(node.name, *fr)
    )
    expected = _eager_candidates(tree, spec, preemptor, running, contested, protected)
    found = find_candidates(
        tree,
        spec.spec.preemption,
        preemptor,
        by_queue(running),
        contested,
        lambda w: w.ref.name in protected,
    )
    own = preemptor.cluster_queue
    other = next((q.metadata.name for q in queues if q.metadata.name != own), own)
    for question in questions:
        match question:
            case "bool":
                assert bool(found) == bool(expected)
            case "only_own":
                assert found.only_own_queue() == all(w.cluster_queue == own for w in expected)
            case "own" | "other":
                queue = own if question == "own" else other
                assert list(found.of_queue(queue)) == [
                    w for w in expected if w.cluster_queue == queue
                ]
            case "queues":
                assert found.queues == {w.cluster_queue for w in expected}
            case "all":
                assert list(found) == expected
