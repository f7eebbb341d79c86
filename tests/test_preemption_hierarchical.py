"""Preemption in hierarchical cohorts replays Kueue's TestHierarchicalPreemptions
(pkg/scheduler/preemption/preemption_hierarchical_test.go): same trees, same workloads, same
victims and reasons. Case ids are Kueue's names (its queue names with "-" for "_", which
Kubernetes names do not allow). Quotas in whole CPUs of flavor "default"."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from services.admission.scheduler import Inadmissible
from services.preemption.model import Running
from shared.config import ClusterQueue, Cohort
from tests.scheduler_world import config, flavor, group, lq, scheduler, wl
from tests.victims_search import cohort, cq, run, search, victims_of, wants

D = "default/cpu"
M = "default/memory"  # in Gi
LOWER_ANY = {"within": "LowerPriority", "reclaim": "Any"}


@dataclass
class Case:
    why: str  # the rule the case pins down, in one sentence
    cohorts: list[Cohort]
    queues: list[ClusterQueue]
    running: list[Running]
    incoming: tuple[int, int]  # (priority, CPUs) of the incoming workload
    expected: dict[str, str]
    queue: str = "q"  # where the incoming workload queues
    needs: dict[str, int] | None = None  # its requests, when more than CPUs


def _r_and_c(c_quota: int) -> list[Cohort]:
    """Kueue's trees: root R without quota, cohort C (with ``c_quota`` CPUs) under it."""
    return [cohort("r"), cohort("c", parent="r", quotas={D: c_quota})]


CASES: dict[str, Case] = {
    "preempt with hierarchical advantage": Case(
        "q's need fits in C's quota, which q_borrowing (under R) borrows: reclaimed at equal"
        " priority, although q has no quota of its own",
        _r_and_c(2),
        [
            cq("q", {D: 0}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
        ],
        [run("admitted2", "q-borrowing", 0, {D: 2})],
        (0, 2),
        {"admitted2": "InCohortReclamation"},
    ),
    "avoid queues within nominal quota": Case(
        "q_nominal uses only its own quota: its lower-priority workload is not touched",
        _r_and_c(2),
        [
            cq("q-nominal", {D: 2}, cohort="r", **LOWER_ANY),
            cq("q", {D: 0}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
        ],
        [run("admitted1", "q-nominal", -10, {D: 2}), run("admitted2", "q-borrowing", 0, {D: 2})],
        (0, 2),
        {"admitted2": "InCohortReclamation"},
    ),
    "preempt multiple with hierarchical advantage": Case(
        "both borrowers of C's quota go, though both have a higher priority than the preemptor",
        _r_and_c(2),
        [
            cq("q", {D: 0}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
        ],
        [run("admitted1", "q-borrowing", 1, {D: 1}), run("admitted2", "q-borrowing", 2, {D: 1})],
        (0, 2),
        {"admitted1": "InCohortReclamation", "admitted2": "InCohortReclamation"},
    ),
    "preempt in cohort and own CQ": Case(
        "no advantage inside C (all of it is used): the lower-priority workload of the sibling"
        " queue is reclaimed while borrowing, and q's own lower one goes too; the equal one stays",
        _r_and_c(3),
        [
            cq("q", {D: 0}, cohort="c", borrow=0, **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_not_preemptible", "q-same-cohort", 1, {D: 1}),
            run("admitted_preemptible", "q-same-cohort", 0, {D: 1}),
            run("admitted_own_queue", "q", -1, {D: 1}),
        ],
        (1, 2),
        {
            "admitted_own_queue": "InClusterQueue",
            "admitted_preemptible": "InCohortReclaimWhileBorrowing",
        },
    ),
    "prefer to preempt hierarchical candidate": Case(
        "a borrower of C's quota (priority 1) goes before q's own lower-priority workload",
        _r_and_c(2),
        [
            cq("q", {D: 0}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing", "q-borrowing", 1, {D: 1}),
            run("admitted_same_queue", "q", -2, {D: 1}),
        ],
        (0, 1),
        {"admitted_borrowing": "InCohortReclamation"},
    ),
    "forced to preempt priority candidate": Case(
        "C's quota is used inside C, so only a priority candidate there can make room; the"
        " lowest priority in the tree (q_nominal's, within its quota) is not touched",
        _r_and_c(2),
        [
            cq("q", {D: 0}, cohort="c", borrow=0, **LOWER_ANY),
            cq("q-nominal", {D: 2}, cohort="r", **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_nominal", "q-nominal", -10, {D: 2}),
            run("admitted_same_cohort", "q-same-cohort", -1, {D: 2}),
        ],
        (0, 2),
        {"admitted_same_cohort": "InCohortReclaimWhileBorrowing"},
    ),
    "incoming workload fits in CQ nominal quota": Case(
        "q's need fits in its own nominal quota: everyone borrowing it is reclaimed, even at"
        " priority 10",
        _r_and_c(2),
        [
            cq("q", {D: 4}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing", "q-borrowing", 10, {D: 3}),
            run("admitted_same_cohort", "q-same-cohort", 10, {D: 3}),
        ],
        (0, 4),
        {
            "admitted_borrowing": "InCohortReclamation",
            "admitted_same_cohort": "InCohortReclamation",
        },
    ),
    "preempt hierarchical and priority candidates": Case(
        "the need fits in C: the borrower outside C is reclaimed by advantage, the sibling inside"
        " C by priority while borrowing; reclaimWithinCohort LowerPriority spares priority 1",
        [cohort("r", quotas={D: 1}), cohort("c", parent="r", quotas={D: 4})],
        [
            cq("q", {D: 0}, cohort="c", within="LowerPriority", reclaim="LowerPriority", borrow=0),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing", "q-borrowing", -1, {D: 2}),
            run("admitted_same_cohort_preemptible", "q-same-cohort", -1, {D: 1}),
            run("admitted_borrowing_not_preemptible", "q-borrowing", 1, {D: 2}),
        ],
        (0, 3),
        {
            "admitted_borrowing": "InCohortReclamation",
            "admitted_same_cohort_preemptible": "InCohortReclaimWhileBorrowing",
        },
    ),
    "preempt hierarchical candidates and inside CQ": Case(
        "as above with the lower-priority workload in q itself",
        [cohort("r", quotas={D: 1}), cohort("c", parent="r", quotas={D: 4})],
        [
            cq("q", {D: 0}, cohort="c", within="LowerPriority", reclaim="LowerPriority", borrow=0),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing", "q-borrowing", -1, {D: 2}),
            run("admitted_same_queue_preemptible", "q", -1, {D: 1}),
            run("admitted_borrowing_not_preemptible", "q-borrowing", 1, {D: 2}),
        ],
        (0, 3),
        {
            "admitted_borrowing": "InCohortReclamation",
            "admitted_same_queue_preemptible": "InClusterQueue",
        },
    ),
    "reclaim nominal quota from lowest priority workload, excluding non-borrowing": Case(
        "of the borrowers the lowest priority goes; q-nominal's lower one, within quota, stays",
        _r_and_c(3),
        [
            cq("q", {D: 0}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
            cq("q-nominal", {D: 2}, cohort="r", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing_prio_8", "q-borrowing", 8, {D: 1}),
            run("admitted_borrowing_prio_9", "q-borrowing", 9, {D: 1}),
            run("admitted_borrowing_prio_10", "q-borrowing", 9, {D: 1}),
            run("admitted_nominal", "q-nominal", -2, {D: 2}),
        ],
        (0, 1),
        {"admitted_borrowing_prio_8": "InCohortReclamation"},
    ),
    "infeasible preemption all available workloads in pruned subtrees": Case(
        "C_other is within its quota (pruned); the sibling at equal priority could go only if q"
        " then borrowed nothing, which it would: no preemption",
        [
            cohort("r"),
            cohort("c", parent="r", quotas={D: 2}),
            cohort("c-other", parent="r", quotas={D: 2}),
        ],
        [
            cq("q-other", {D: 0}, cohort="c-other", **LOWER_ANY),
            cq("q", {D: 0}, cohort="c", **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_other_1", "q-other", -10, {D: 1}),
            run("admitted_other_2", "q-other", -10, {D: 1}),
            run("admitted_same_cohort", "q-same-cohort", 0, {D: 2}),
        ],
        (0, 2),
        {},
    ),
    "respect lending limits": Case(
        "q lends only 2 of its 3: its need of 5 fits in C with what it keeps, so the borrower"
        " of a higher priority is reclaimed",
        _r_and_c(2),
        [
            cq("q", {D: (3, None, 2)}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
        ],
        [run("admitted_borrowing", "q-borrowing", 0, {D: 4})],
        (-2, 5),
        {"admitted_borrowing": "InCohortReclamation"},
    ),
    "reclaim in complex hierarchy": Case(
        "q5 needs 7 of its cohorts' quota: one borrower from each subtree above quota goes"
        " (q1's lowest, q2's lowest); after one, c23 is back within quota and its other stays",
        [
            cohort("r"),
            cohort("c11", parent="r", quotas={D: 4}),
            cohort("c12", parent="r", quotas={D: 4}),
            cohort("c21", parent="c11", quotas={D: 4}),
            cohort("c22", parent="c11", quotas={D: 4}),
            cohort("c23", parent="c11", quotas={D: 4}),
            cohort("c31", parent="c21", quotas={D: 4}),
            cohort("c32", parent="c21", quotas={D: 4}),
        ],
        [
            cq("q1", {D: 0}, cohort="c12", **LOWER_ANY),
            cq("q2", {D: 0}, cohort="c23", **LOWER_ANY),
            cq("q3", {D: 0}, cohort="c22", **LOWER_ANY),
            cq("q4", {D: 0}, cohort="c32", **LOWER_ANY),
            cq("q5", {D: 0}, cohort="c31", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing_1", "q1", -6, {D: 4}),
            run("admitted_borrowing_2", "q1", -5, {D: 4}),
            run("admitted_borrowing_3", "q2", -9, {D: 4}),
            run("admitted_borrowing_4", "q2", -10, {D: 4}),
            run("admitted_borrowing_5", "q3", -4, {D: 4}),
            run("admitted_borrowing_6", "q3", -3, {D: 3}),
            run("admitted_borrowing_7", "q4", 4, {D: 2}),
            run("admitted_borrowing_8", "q4", 2, {D: 3}),
        ],
        (-2, 7),
        {
            "admitted_borrowing_1": "InCohortReclamation",
            "admitted_borrowing_4": "InCohortReclamation",
        },
        "q5",
    ),
    "hiearchical preemption with multiple resources": Case(
        "only memory needs room; the need fits in C, so the borrower outside C goes at a higher"
        " priority, and the equal-priority sibling inside C stays",
        [
            cohort("r", quotas={D: 3, M: 0}),
            cohort("c", parent="r", quotas={D: 4, M: 4}),
        ],
        [
            cq("q", {D: 0, M: 0}, cohort="c", **LOWER_ANY),
            cq("q-borrowing", {D: 0, M: 0}, cohort="r", **LOWER_ANY),
            cq("q-same-cohort", {D: 0, M: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing", "q-borrowing", 0, {D: 3, M: 1}),
            run("admitted_same_cohort", "q-same-cohort", -2, {D: 1, M: 3}),
        ],
        (-2, 2),
        {"admitted_borrowing": "InCohortReclamation"},
        needs={D: 2, M: 1},
    ),
    "prefer to preempt evicted workloads": Case(
        "a workload already being evicted goes first, before the hierarchy candidate",
        _r_and_c(2),
        [
            cq("q", {D: 0}, cohort="c", borrow=0, **LOWER_ANY),
            cq("q-borrowing", {D: 0}, cohort="r", **LOWER_ANY),
            cq("q-same-cohort", {D: 0}, cohort="c", **LOWER_ANY),
        ],
        [
            run("admitted_borrowing", "q-borrowing", -10, {D: 1}),
            run("evicted_same_cohort", "q-same-cohort", -1, {D: 1}, evicting=True),
        ],
        (0, 1),
        {"evicted_same_cohort": "InCohortReclaimWhileBorrowing"},
    ),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_kueue_hierarchical_preemption(name: str) -> None:
    """The victims and reasons of Kueue's case of the same name (the why says which rule)."""
    case = CASES[name]
    priority, cpus = case.incoming
    needs = case.needs or {D: cpus}
    result = search(case.queues, case.running, wants(case.queue, priority, needs), case.cohorts)
    assert victims_of(result) == case.expected, case.why


def test_admission_offers_hierarchical_reclaim_to_preemption() -> None:
    """kueue: preempt with hierarchical advantage, seen from admission: q has no quota and no
    borrowWithinCohort, yet its need fits in C's quota that q_borrowing borrows, so the
    workload is offered to preemption instead of waiting for q_borrowing to finish."""
    cohorts = [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Cohort", "metadata": {"name": "r"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": "c"},
            "spec": {
                "parentName": "r",
                "resourceGroups": [group(["cpu"], ("default", {"cpu": 2}))],
            },
        },
    ]
    preemption = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}

    def queue(name: str, parent: str) -> dict[str, object]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "cohort": parent,
                "namespaceSelector": {},
                "preemption": preemption,
                "resourceGroups": [group(["cpu"], ("default", {"cpu": 0}))],
            },
        }

    objects = config(
        flavor("default"),
        *cohorts,
        queue("q", "c"),
        queue("q-borrowing", "r"),
        lq("lq", "q"),
        lq("lq-borrowing", "q-borrowing"),
    )
    s = scheduler(objects, wl("admitted2", queue="lq-borrowing", cpu=2))
    s.schedule()
    s.submit(wl("in", queue="lq", cpu=2, t=1.0))
    [decision] = [d for d in s.schedule() if isinstance(d, Inadmissible)]
    assert decision.preemption_may_help, decision.message
    assert decision.contested == (("default", "cpu", 2000),)
