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
from tests.test_scheduler import config, flavor, group, lq, scheduler, wl
from tests.test_victims import cohort, cq, run, search, victims_of, wants

D = "default/cpu"
LOWER_ANY = {"within": "LowerPriority", "reclaim": "Any"}


@dataclass
class Case:
    why: str  # the rule the case pins down, in one sentence
    cohorts: list[Cohort]
    queues: list[ClusterQueue]
    running: list[Running]
    incoming: tuple[int, int]  # (priority, CPUs) of the workload coming to queue q
    expected: dict[str, str]


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
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_kueue_hierarchical_preemption(name: str) -> None:
    """The victims and reasons of Kueue's case of the same name (the why says which rule)."""
    case = CASES[name]
    priority, cpus = case.incoming
    result = search(case.queues, case.running, wants("q", priority, {D: cpus}), case.cohorts)
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
