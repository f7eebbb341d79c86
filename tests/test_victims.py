"""The pure preemption victim search (services.preemption.victims), against Kueue's classical
and fair-sharing preemption semantics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from services.preemption.borrowing import BorrowingTree, cohort_members
from services.preemption.ordering import RunningOf, find_candidates, sort_key
from services.preemption.victims import (
    NO_CANDIDATES,
    NO_FIT,
    Preemptor,
    Running,
    SearchResult,
    find_victims,
)
from shared.config import (
    ClusterQueue,
    Cohort,
    FairSharingSettings,
    load_documents,
    parse_object,
)
from shared.events import WorkloadRef
from shared.quota import FlavorResource, QuotaTree

V1 = "kueue.x-k8s.io/v1beta1"
FIXTURES = Path(__file__).parent / "fixtures"
Quota = int | tuple[int, int | None, int | None]  # nominal, or (nominal, borrowing, lending)


# --- builders --------------------------------------------------------------------------------


def _groups(quotas: Mapping[str, Quota]) -> list[dict[str, Any]]:
    """One resource group per flavor; quotas keyed "flavor/resource", in whole units."""
    by_flavor: dict[str, list[dict[str, Any]]] = {}
    for key, quota in quotas.items():
        flavor, resource = key.split("/", 1)
        nominal, borrowing, lending = quota if isinstance(quota, tuple) else (quota, None, None)
        entry: dict[str, Any] = {"name": resource, "nominalQuota": nominal}
        if borrowing is not None:
            entry["borrowingLimit"] = borrowing
        if lending is not None:
            entry["lendingLimit"] = lending
        by_flavor.setdefault(flavor, []).append(entry)
    return [
        {
            "coveredResources": [r["name"] for r in resources],
            "flavors": [{"name": f, "resources": resources}],
        }
        for f, resources in by_flavor.items()
    ]


def cq(
    name: str,
    quotas: Mapping[str, Quota],
    cohort: str = "",
    within: str = "Never",
    reclaim: str = "Never",
    borrow: int | str | None = "Never",
    weight: str | None = None,
) -> ClusterQueue:
    """A ClusterQueue; ``borrow`` is "Never", or borrowWithinCohort LowerPriority with that
    maxPriorityThreshold (None: no threshold)."""
    preemption: dict[str, Any] = {"withinClusterQueue": within, "reclaimWithinCohort": reclaim}
    if borrow != "Never":
        preemption["borrowWithinCohort"] = {"policy": "LowerPriority"}
        if borrow is not None:
            preemption["borrowWithinCohort"]["maxPriorityThreshold"] = borrow
    spec: dict[str, Any] = {"resourceGroups": _groups(quotas), "preemption": preemption}
    if cohort:
        spec["cohort"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    obj = parse_object(
        {"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    )
    assert isinstance(obj, ClusterQueue)
    return obj


def cohort(name: str, parent: str = "", quotas: Mapping[str, Quota] | None = None) -> Cohort:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if quotas:
        spec["resourceGroups"] = _groups(quotas)
    obj = parse_object(
        {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    )
    assert isinstance(obj, Cohort)
    return obj


def _usage(units: Mapping[str, int]) -> dict[FlavorResource, int]:
    result: dict[FlavorResource, int] = {}
    for key, value in units.items():
        flavor, resource = key.split("/", 1)
        result[(flavor, resource)] = value * 1000
    return result


def run(
    name: str,
    queue: str,
    priority: int,
    usage: Mapping[str, int],
    admitted: float = 0.0,
    created: float = 0.0,
    evicting: bool = False,
    preemptions: int = 0,
) -> Running:
    return Running(
        ref=WorkloadRef("ns", name, name),
        cluster_queue=queue,
        priority=priority,
        queue_time=created,
        admitted_at=admitted,
        usage=_usage(usage),
        evicting=evicting,
        preemptions=preemptions,
    )


def wants(queue: str, priority: int, needs: Mapping[str, int], created: float = 100.0) -> Preemptor:
    return Preemptor(
        WorkloadRef("ns", "preemptor", "preemptor"), queue, priority, created, _usage(needs)
    )


def snapshot(tree: QuotaTree) -> dict[str, dict[FlavorResource, int]]:
    nodes = {**tree.cluster_queues, **{f"cohort:{k}": v for k, v in tree.cohorts.items()}}
    return {name: {fr: v for fr, v in node.usage.items() if v} for name, node in nodes.items()}


def by_queue(running: Sequence[Running]) -> RunningOf:
    """``running`` one ClusterQueue at a time, the form the search takes (Cluster.choosable)."""
    of: dict[str, list[Running]] = {}
    for w in running:
        of.setdefault(w.cluster_queue, []).append(w)
    return lambda queue: of.get(queue, ())


def search(
    queues: Sequence[ClusterQueue],
    running: Sequence[Running],
    preemptor: Preemptor,
    cohorts: Sequence[Cohort] = (),
    protected: frozenset[str] = frozenset(),
    fair: FairSharingSettings | None = None,
) -> SearchResult:
    """Run the search on a tree charged with ``running``, checking the tree comes back intact;
    on preemption's own tree too (its index of borrowing queues), which must answer alike."""
    results = []
    for build in (QuotaTree.build, BorrowingTree.build):
        tree = build(queues, cohorts)
        for w in running:
            tree.add_usage(w.cluster_queue, w.usage)
        before = snapshot(tree)
        results.append(
            find_victims(
                tree=tree,
                cluster_queues={q.metadata.name: q for q in queues},
                preemptor=preemptor,
                running=by_queue(running),
                protected=lambda w: w.ref.name in protected,
                fair_sharing=fair,
            )
        )
        assert snapshot(tree) == before
    assert results[0] == results[1]
    return results[0]


def victims_of(result: SearchResult) -> dict[str, str]:
    return {v.workload.ref.name: v.reason for v in result.victims}


# --- table-driven cases ----------------------------------------------------------------------

F = "f/cpu"
FAIR = FairSharingSettings(enable=True)
S2A_ONLY = FairSharingSettings(enable=True, preemption_strategies=["LessThanOrEqualToFinalShare"])


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


# --- seed scenarios --------------------------------------------------------------------------


def _fixture_queues(name: str) -> list[ClusterQueue]:
    text = (FIXTURES / name).read_text()
    objects = [parse_object(doc) for doc in load_documents(text, source=name)]
    return [obj for obj in objects if isinstance(obj, ClusterQueue)]


def test_seed004_team_a_reclaims_while_borrowing() -> None:
    """Seed 004: team A's prod job (7 cpu + 2 gpu) evicts team B's borrowed dev job."""
    queues = _fixture_queues("seed004-kueue-resources.yaml")
    team_b = run("team-b-job", "team-b-cq", 100, {"default-flavor/cpu": 5})
    preemptor = wants("team-a-cq", 1000, {"default-flavor/cpu": 7, "gpu-flavor/nvidia.com/gpu": 2})
    result = search(queues, [team_b], preemptor)
    assert victims_of(result) == {"team-b-job": "InCohortReclaimWhileBorrowing"}


def test_seed003_prod_preempts_dev() -> None:
    """Seed 003: prod (1000) preempts dev (100) in the same ClusterQueue."""
    queues = _fixture_queues("seed003-kueue-resources.yaml")
    usage = {
        "default-flavor/cpu": 1,
        "default-flavor/memory": 1,
        "default-flavor/nvidia.com/gpu": 1,
    }
    dev = run("dev", "cluster-queue", 100, usage)
    result = search(queues, [dev], wants("cluster-queue", 1000, usage))
    assert victims_of(result) == {"dev": "InClusterQueue"}


def test_seed002_high_preempts_low() -> None:
    """Seed 002: a 6-cpu high-priority job preempts the 6-cpu low one in a 9-cpu queue."""
    queues = [cq("cluster-queue", {"default-flavor/cpu": 9}, within="LowerPriority")]
    low = run("low", "cluster-queue", 100, {"default-flavor/cpu": 6})
    result = search(queues, [low], wants("cluster-queue", 1000, {"default-flavor/cpu": 6}))
    assert victims_of(result) == {"low": "InClusterQueue"}


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


# --- property test ---------------------------------------------------------------------------

# Biased towards policies that preempt, so that most examples exercise a search.
POLICIES_WITHIN = ["Never", "LowerPriority", "LowerOrNewerEqualPriority", "LowerPriority"]
POLICIES_RECLAIM = ["Never", "LowerPriority", "Any", "Any"]


# A generated world: queues, cohorts, running workloads, the preemptor, the protected
# workloads' uids and the fair-sharing settings.
World = tuple[
    list[ClusterQueue],
    list[Cohort],
    list[Running],
    Preemptor,
    frozenset[str],
    FairSharingSettings | None,
]


@st.composite
def worlds(
    draw: st.DrawFn,
) -> World:
    flavors = ["f", "g"][: draw(st.integers(1, 2))]
    hierarchical = draw(st.booleans())
    cohorts = [cohort("root"), cohort("x", "root"), cohort("y", "root")] if hierarchical else []
    queues: list[ClusterQueue] = []
    for i in range(draw(st.integers(1, 4))):
        quotas: dict[str, Quota] = {}
        for flavor in flavors:
            nominal = draw(st.integers(0, 6))
            borrowing = draw(st.one_of(st.none(), st.integers(0, 6)))
            lending = draw(st.one_of(st.none(), st.integers(0, nominal)))
            quotas[f"{flavor}/cpu"] = (nominal, borrowing, lending)
        parent = draw(st.sampled_from(["x", "y", "root"] if hierarchical else ["c", "c", ""]))
        borrow = draw(st.sampled_from(["Never", None, 0, 5, 10]))
        queues.append(
            cq(
                f"q{i}",
                quotas,
                parent,
                within=draw(st.sampled_from(POLICIES_WITHIN)),
                reclaim=draw(st.sampled_from(POLICIES_RECLAIM)),
                borrow=borrow,
                weight=draw(st.sampled_from([None, "1", "2", "500m", "0"])),
            )
        )
    names = [q.metadata.name for q in queues]
    tree = QuotaTree.build(queues, cohorts)
    running: list[Running] = []
    for j in range(draw(st.integers(2, 16))):
        queue = draw(st.sampled_from(names))
        usage = {f"{flavor}/cpu": draw(st.integers(0, 3)) for flavor in flavors}
        w = run(
            f"w{j}",
            queue,
            draw(st.integers(0, 8)),
            usage,
            admitted=draw(st.integers(0, 5)),
            created=draw(st.integers(0, 5)),
            evicting=draw(st.booleans()),
            preemptions=draw(st.integers(0, 2)),
        )
        if any(w.usage.values()) and tree.fits(queue, w.usage):
            tree.add_usage(queue, w.usage)
            running.append(w)
    queue = draw(st.sampled_from(names))
    # Needs within what the queue could ever get: admission only asks when preemption may help.
    needs = {
        f"{flavor}/cpu": draw(
            st.integers(1, max(1, tree.potential_available(queue, flavor, "cpu") // 1000))
        )
        for flavor in flavors
    }
    preemptor = wants(queue, draw(st.integers(4, 12)), needs, created=draw(st.integers(0, 5)))
    protected = frozenset(
        w.ref.name for w in running if draw(st.booleans()) and draw(st.booleans())
    )
    fair = draw(st.sampled_from([None, FAIR, S2A_ONLY]))
    return queues, cohorts, running, preemptor, protected, fair


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
