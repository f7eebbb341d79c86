"""The pure preemption victim search (services.preemption.victims), case by case against
Kueue's classical and fair-sharing preemption semantics: which workloads go, for which
reason, and what the search says when none does."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from services.preemption.victims import NO_CANDIDATES, NO_FIT, Preemptor, Running
from shared.config import ClusterQueue, Cohort, FairSharingSettings
from tests.victims_search import FAIR, S2A_ONLY, F, cohort, cq, run, search, victims_of, wants


@dataclass
class Case:
    why: str  # one sentence: the rule this case pins down
    queues: list[ClusterQueue]
    running: list[Running]
    preemptor: Preemptor
    expected: dict[str, str]  # victim name -> reason; empty: no preemption
    cohorts: list[Cohort] = field(default_factory=list)
    protected: frozenset[str] = frozenset()
    fair: FairSharingSettings | None = None
    message: str | None = None


CASES: dict[str, Case] = {
    "within_never": Case(
        "withinClusterQueue Never: nothing in the preemptor's own queue is a candidate.",
        [cq("a", {F: 4}, within="Never")],
        [run("low", "a", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {},
        message=NO_CANDIDATES,
    ),
    "within_lower": Case(
        "withinClusterQueue LowerPriority preempts a lower-priority workload in the queue.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("low", "a", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {"low": "InClusterQueue"},
    ),
    "within_lower_not_equal": Case(
        "withinClusterQueue LowerPriority never preempts an equal priority, even newer.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("same", "a", 100, {F: 4}, created=200)],
        wants("a", 100, {F: 4}),
        {},
    ),
    "within_newer_equal": Case(
        "LowerOrNewerEqualPriority preempts an equal-priority workload created after the preemptor.",
        [cq("a", {F: 4}, within="LowerOrNewerEqualPriority")],
        [run("newer", "a", 100, {F: 4}, created=200)],
        wants("a", 100, {F: 4}, created=100),
        {"newer": "InClusterQueue"},
    ),
    "within_older_equal": Case(
        "LowerOrNewerEqualPriority spares an equal-priority workload created before the preemptor.",
        [cq("a", {F: 4}, within="LowerOrNewerEqualPriority")],
        [run("older", "a", 100, {F: 4}, created=50)],
        wants("a", 100, {F: 4}, created=100),
        {},
    ),
    "within_never_higher": Case(
        "No policy ever preempts a higher priority inside the queue.",
        [cq("a", {F: 4}, within="LowerOrNewerEqualPriority")],
        [run("high", "a", 200, {F: 4}, created=200)],
        wants("a", 100, {F: 4}),
        {},
    ),
    "lowest_priority_first": Case(
        "Among candidates, the lowest priority goes first.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("p5", "a", 5, {F: 2}), run("p1", "a", 1, {F: 2})],
        wants("a", 100, {F: 2}),
        {"p1": "InClusterQueue"},
    ),
    "most_recent_first": Case(
        "At equal priority, the most recently admitted goes first.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("old", "a", 1, {F: 2}, admitted=1), run("recent", "a", 1, {F: 2}, admitted=9)],
        wants("a", 100, {F: 2}),
        {"recent": "InClusterQueue"},
    ),
    "uid_tie_break": Case(
        "At equal priority and admission time, the smaller UID goes first.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("b", "a", 1, {F: 2}), run("a", "a", 1, {F: 2})],
        wants("a", 100, {F: 2}),
        {"a": "InClusterQueue"},
    ),
    "least_preempted_first": Case(
        "At equal priority, the one preempted least in the last hour goes first, even if"
        " Kueue's most-recently-admitted rule would pick the one that just came back.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [
            run("steady", "a", 1, {F: 2}, admitted=1),
            run("came-back", "a", 1, {F: 2}, admitted=9, preemptions=2),
        ],
        wants("a", 100, {F: 2}),
        {"steady": "InClusterQueue"},
    ),
    "least_preempted_then_recent": Case(
        "Preempted as often, Kueue's order decides: the most recently admitted goes first.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [
            run("old", "a", 1, {F: 2}, admitted=1, preemptions=1),
            run("recent", "a", 1, {F: 2}, admitted=9, preemptions=1),
        ],
        wants("a", 100, {F: 2}),
        {"recent": "InClusterQueue"},
    ),
    "priority_before_preemptions": Case(
        "How often a workload was preempted never overrules priority: the lower one goes.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("low-often", "a", 1, {F: 2}, preemptions=5), run("mid-never", "a", 5, {F: 2})],
        wants("a", 100, {F: 2}),
        {"low-often": "InClusterQueue"},
    ),
    "least_preempted_across_queues": Case(
        "Across lending queues of one rank, the least preempted goes first as well.",
        [
            cq("a", {F: 4}, "c", reclaim="Any"),
            cq("b", {F: 0}, "c"),
            cq("d", {F: 0}, "c"),
        ],
        [
            run("b-often", "b", 1, {F: 2}, admitted=9, preemptions=3),
            run("d-never", "d", 1, {F: 2}, admitted=1),
        ],
        wants("a", 100, {F: 2}),
        {"d-never": "InCohortReclamation"},
    ),
    "evicting_first": Case(
        "A candidate already being evicted goes before a lower-priority one.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("low", "a", 1, {F: 2}), run("evicting", "a", 50, {F: 2}, evicting=True)],
        wants("a", 100, {F: 2}),
        {"evicting": "InClusterQueue"},
    ),
    "fill_back": Case(
        "Fill-back returns a removed workload the preemptor does not need gone.",
        [cq("a", {F: 5}, within="LowerPriority")],
        [run("small", "a", 1, {F: 1}), run("big", "a", 2, {F: 4})],
        wants("a", 100, {F: 4}),
        {"big": "InClusterQueue"},
    ),
    "protected": Case(
        "A protected workload (minimum run time not reached) is never a victim.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("young", "a", 1, {F: 2}), run("old", "a", 5, {F: 2})],
        wants("a", 100, {F: 2}),
        {"old": "InClusterQueue"},
        protected=frozenset({"young"}),
    ),
    "all_protected": Case(
        "With every candidate protected there is nothing to preempt.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("young", "a", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {},
        protected=frozenset({"young"}),
        message=NO_CANDIDATES,
    ),
    "not_enough": Case(
        "When preempting every candidate would not make room, nothing is preempted.",
        [cq("a", {F: 4}, within="LowerPriority")],
        [run("low", "a", 1, {F: 2}), run("high", "a", 500, {F: 2})],
        wants("a", 100, {F: 4}),
        {},
        message=NO_FIT,
    ),
    "reclaim_never": Case(
        "reclaimWithinCohort Never leaves other queues' workloads alone, even borrowed ones.",
        [cq("a", {F: 4}, "c"), cq("b", {F: 0}, "c")],
        [run("borrower", "b", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {},
    ),
    "reclaim_lower": Case(
        "reclaimWithinCohort LowerPriority reclaims from a lower-priority borrower.",
        [cq("a", {F: 4}, "c", reclaim="LowerPriority"), cq("b", {F: 0}, "c")],
        [run("borrower", "b", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {"borrower": "InCohortReclamation"},
    ),
    "reclaim_lower_spares_higher": Case(
        "reclaimWithinCohort LowerPriority spares a borrower of higher or equal priority.",
        [cq("a", {F: 4}, "c", reclaim="LowerPriority"), cq("b", {F: 0}, "c")],
        [run("borrower", "b", 100, {F: 4})],
        wants("a", 100, {F: 4}),
        {},
    ),
    "reclaim_any": Case(
        "reclaimWithinCohort Any reclaims from a borrower whatever its priority.",
        [cq("a", {F: 4}, "c", reclaim="Any"), cq("b", {F: 0}, "c")],
        [run("borrower", "b", 9999, {F: 4})],
        wants("a", 100, {F: 4}),
        {"borrower": "InCohortReclamation"},
    ),
    "reclaim_only_borrowers": Case(
        "A queue within its nominal quota lends nothing, so nothing is reclaimed from it.",
        [cq("a", {F: 2}, "c", reclaim="Any"), cq("b", {F: 4}, "c")],
        [run("owner", "b", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {},
    ),
    "reclaim_stops_at_nominal": Case(
        "Once a lender is back at nominal its other workloads are skipped (checked while removing).",
        [cq("a", {F: 4}, "c", within="LowerPriority", reclaim="Any"), cq("b", {F: 4}, "c")],
        [
            run("b1", "b", 1, {F: 2}, admitted=3),
            run("b2", "b", 1, {F: 2}, admitted=2),
            run("b3", "b", 1, {F: 2}, admitted=1),
            run("a-own", "a", 1, {F: 2}),
        ],
        wants("a", 100, {F: 4}),
        {"b1": "InCohortReclamation", "a-own": "InClusterQueue"},
    ),
    "no_reclaim_while_borrowing": Case(
        "Without borrowWithinCohort, a preemptor that must borrow only preempts in its own queue.",
        [
            cq("a", {F: 4}, "c", within="LowerPriority", reclaim="Any"),
            cq("b", {F: 4}, "c"),
            cq("s", {F: 4}, "c"),
        ],
        [run("a-own", "a", 1, {F: 2}), run("b1", "b", 1, {F: 5}), run("s1", "s", 1, {F: 3})],
        wants("a", 100, {F: 6}),
        {},
    ),
    "borrow_within_cohort": Case(
        "borrowWithinCohort LowerPriority reclaims from a lower-priority queue while borrowing.",
        [
            cq("a", {F: 4}, "c", within="LowerPriority", reclaim="Any", borrow=None),
            cq("b", {F: 4}, "c"),
            cq("s", {F: 4}, "c"),
        ],
        [run("a-own", "a", 1, {F: 2}), run("b1", "b", 1, {F: 5}), run("s1", "s", 1, {F: 3})],
        wants("a", 100, {F: 6}),
        {"b1": "InCohortReclaimWhileBorrowing"},
    ),
    "borrow_threshold_excludes": Case(
        "Above maxPriorityThreshold, other queues' workloads cannot be preempted to borrow.",
        [
            cq("a", {F: 0}, "c", reclaim="Any", borrow=100),
            cq("b", {F: 0}, "c"),
            cq("s", {F: 10}, "c"),
        ],
        [run("b1", "b", 101, {F: 5})],
        wants("a", 1000, {F: 7}),
        {},
        message=NO_FIT,
    ),
    "borrow_threshold_at": Case(
        "A workload exactly at maxPriorityThreshold may be preempted while borrowing.",
        [
            cq("a", {F: 0}, "c", reclaim="Any", borrow=100),
            cq("b", {F: 0}, "c"),
            cq("s", {F: 10}, "c"),
        ],
        [run("b1", "b", 100, {F: 5})],
        wants("a", 1000, {F: 7}),
        {"b1": "InCohortReclaimWhileBorrowing"},
    ),
    "borrow_threshold_preemptor_priority": Case(
        "Without a threshold, borrowing reclaim still needs a strictly lower priority.",
        [
            cq("a", {F: 0}, "c", reclaim="Any", borrow=None),
            cq("b", {F: 0}, "c"),
            cq("s", {F: 10}, "c"),
        ],
        [run("b1", "b", 1000, {F: 5})],
        wants("a", 1000, {F: 7}),
        {},
    ),
    "borrow_threshold_under_nominal": Case(
        "Under nominal, a borrower above the threshold is reclaimed without borrowing (InCohortReclamation).",
        [
            cq("a", {F: 4}, "c", reclaim="Any", borrow=100),
            cq("b", {F: 0}, "c"),
            cq("s", {F: 4}, "c"),
        ],
        [run("b1", "b", 500, {F: 6})],
        wants("a", 1000, {F: 4}),
        {"b1": "InCohortReclamation"},
    ),
    "other_queues_before_own": Case(
        "Other queues' candidates go before the preemptor's own, whatever the priorities.",
        [cq("a", {F: 4}, "c", within="LowerPriority", reclaim="Any"), cq("b", {F: 0}, "c")],
        [run("a-own", "a", 1, {F: 2}), run("b1", "b", 50, {F: 2})],
        wants("a", 100, {F: 2}),
        {"b1": "InCohortReclamation"},
    ),
    "contested_flavor_only": Case(
        "Only workloads using a flavor-resource where the preemptor does not fit are candidates.",
        [cq("a", {"f/cpu": 4, "g/cpu": 4}, within="LowerPriority")],
        [run("on-g", "a", 1, {"g/cpu": 4}), run("on-f", "a", 50, {"f/cpu": 4})],
        wants("a", 100, {"f/cpu": 4}),
        {"on-f": "InClusterQueue"},
    ),
    "two_pod_sets": Case(
        "A preemptor whose pod sets need cpu and gpu frees both, one victim each.",
        [cq("a", {"f/cpu": 4, "gpu/nvidia.com/gpu": 1}, within="LowerPriority")],
        [run("cpu-job", "a", 1, {"f/cpu": 4}), run("gpu-job", "a", 2, {"gpu/nvidia.com/gpu": 1})],
        wants("a", 100, {"f/cpu": 2, "gpu/nvidia.com/gpu": 1}),
        {"cpu-job": "InClusterQueue", "gpu-job": "InClusterQueue"},
    ),
    "lending_limit": Case(
        "A lending limit keeps quota for its owner: reclaiming the lent part is enough.",
        [cq("a", {F: 2}, "c"), cq("b", {F: (6, None, 2)}, "c", reclaim="Any")],
        [run("a1", "a", 1, {F: 2}, admitted=1), run("a2", "a", 1, {F: 2}, admitted=2)],
        wants("b", 100, {F: 6}),
        {"a2": "InCohortReclamation"},
    ),
    "borrowing_limit": Case(
        "A borrowing limit caps what reclaim can give: nothing is preempted when it cannot suffice.",
        [
            cq("a", {F: (0, 2, None)}, "c", reclaim="Any", borrow=None),
            cq("b", {F: 0}, "c"),
            cq("s", {F: 10}, "c"),
        ],
        [run("b1", "b", 1, {F: 10})],
        wants("a", 100, {F: 3}),
        {},
    ),
    "hierarchical": Case(
        "In a hierarchy, a queue reclaims from a borrower in a sibling sub-cohort.",
        [cq("a", {F: 4}, "x", reclaim="Any"), cq("b", {F: 0}, "x"), cq("c", {F: 0}, "y")],
        [run("c1", "c", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {"c1": "InCohortReclamation"},
        cohorts=[cohort("root"), cohort("x", "root"), cohort("y", "root")],
    ),
    "hierarchical_cohort_quota": Case(
        "Quota held by a parent cohort is shared: the preemptor reclaims it from a borrower.",
        [cq("a", {F: 0}, "x", reclaim="Any", borrow=None), cq("c", {F: 0}, "y")],
        [run("c1", "c", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {"c1": "InCohortReclaimWhileBorrowing"},
        cohorts=[cohort("root", quotas={F: 4}), cohort("x", "root"), cohort("y", "root")],
    ),
    "no_cohort": Case(
        "A queue outside any cohort only preempts in itself.",
        [cq("a", {F: 4}, within="LowerPriority", reclaim="Any")],
        [run("low", "a", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {"low": "InClusterQueue"},
    ),
    # --- fair sharing ---
    "fair_final_share": Case(
        "S2-a takes from the queue with the highest share while it stays >= the preemptor's.",
        [cq("a", {F: 3}, "c", reclaim="Any"), cq("b", {F: 3}, "c"), cq("s", {F: 3}, "c")],
        [run(f"b{i}", "b", 1, {F: 2}, admitted=i) for i in range(3)] + [run("s1", "s", 1, {F: 3})],
        wants("a", 100, {F: 3}),
        {"b2": "InCohortFairSharing", "b1": "InCohortFairSharing"},
        fair=FAIR,
    ),
    "fair_initial_share": Case(
        "When S2-a refuses, S2-b preempts if the preemptor's share stays below the target's initial one.",
        [cq("a", {F: 0}, "c", reclaim="Any"), cq("b", {F: 0}, "c"), cq("s", {F: 10}, "c")],
        [run("b1", "b", 1, {F: 6})],
        wants("a", 100, {F: 5}),
        {"b1": "InCohortFairSharing"},
        fair=FAIR,
    ),
    "fair_s2a_only": Case(
        "With only LessThanOrEqualToFinalShare configured, S2-b is never tried.",
        [cq("a", {F: 0}, "c", reclaim="Any"), cq("b", {F: 0}, "c"), cq("s", {F: 10}, "c")],
        [run("b1", "b", 1, {F: 6})],
        wants("a", 100, {F: 5}),
        {},
        fair=S2A_ONLY,
    ),
    "fair_refuses_larger_share": Case(
        "Fair sharing does not preempt for a preemptor that would end with a larger share.",
        [cq("a", {F: 0}, "c", reclaim="Any"), cq("b", {F: 0}, "c"), cq("s", {F: 10}, "c")],
        [run("b1", "b", 1, {F: 6})],
        wants("a", 100, {F: 7}),
        {},
        fair=FAIR,
    ),
    "fair_weight": Case(
        "A lower fairSharing.weight raises a queue's share, making it a target.",
        [
            cq("a", {F: 0}, "c", reclaim="Any"),
            cq("b", {F: 0}, "c", weight="500m"),
            cq("s", {F: 10}, "c"),
        ],
        [run("b1", "b", 1, {F: 6})],
        wants("a", 100, {F: 7}),
        {"b1": "InCohortFairSharing"},
        fair=FAIR,
    ),
    "fair_below_threshold": Case(
        "Under fair sharing, a workload below the borrowWithinCohort threshold is reclaimed while borrowing.",
        [
            cq("a", {F: 0}, "c", reclaim="Any", borrow=100),
            cq("b", {F: 0}, "c"),
            cq("s", {F: 10}, "c"),
        ],
        [run("b1", "b", 50, {F: 6})],
        wants("a", 1000, {F: 7}),
        {"b1": "InCohortReclaimWhileBorrowing"},
        fair=FAIR,
    ),
    "fair_own_queue": Case(
        "Under fair sharing, candidates only in the own queue follow the classical path.",
        [cq("a", {F: 4}, "c", within="LowerPriority"), cq("b", {F: 0}, "c")],
        [run("low", "a", 1, {F: 4})],
        wants("a", 100, {F: 4}),
        {"low": "InClusterQueue"},
        fair=FAIR,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str) -> None:
    """Each table case yields exactly its expected victims and reasons."""
    case = CASES[name]
    result = search(
        case.queues, case.running, case.preemptor, case.cohorts, case.protected, case.fair
    )
    assert victims_of(result) == case.expected, case.why
    if case.message is not None:
        assert result.message == case.message
    if case.expected:
        assert result.message.startswith(f"preempting {len(case.expected)} workload(s)")


# --- odds and ends ---------------------------------------------------------------------------


def test_fits_already() -> None:
    """A preemptor that fits needs no victims."""
    result = search([cq("a", {F: 4}, within="LowerPriority")], [], wants("a", 100, {F: 4}))
    assert result.victims == ()
    assert "fits" in result.message


def test_unknown_queue() -> None:
    """A preemptor in an unknown ClusterQueue gets no victims and a reason."""
    result = search([cq("a", {F: 4})], [], wants("zzz", 100, {F: 4}))
    assert result.victims == () and "zzz" in result.message
