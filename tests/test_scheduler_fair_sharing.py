"""Fair sharing in the admission pass (Scheduler with Configuration fairSharing.enable).

Each case replays one of Kueue's TestScheduleForFairSharing cases (pkg/scheduler/
scheduler_fs_test.go, named in the id) through the whole admission core: config, the
workloads admitted already, the pending ones, one pass. Berth's pass admits everything that
fits (a Kueue cycle admits one head per ClusterQueue), so a case checks the *order* of the
admissions and what is left; where Kueue's "left" workload would fit on a later Kueue cycle,
it is admitted later in the same pass here, after the one Kueue admits first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from services.admission.queue_gauges import queue_samples
from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from shared.config import ClusterQueue
from shared.events import FlavorAssignment
from tests.scheduler_world import V1, admitted, config, cq, flavor, group, lq, pending, ref, wl

OD = "on-demand"


def configuration(enable: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "Configuration",
        "metadata": {"name": "berth"},
        "spec": {"fairSharing": {"enable": enable}},
    }


def cohort(name: str, parent: str = "", cpu: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentName": parent} if parent else {}
    if cpu is not None:
        spec["resourceGroups"] = [group(["cpu"], (OD, {"cpu": cpu}))]
    return {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def queue(name: str, parent: str, cpu: Any = 0, **spec: Any) -> list[dict[str, Any]]:
    """A ClusterQueue with on-demand cpu in ``parent`` and its LocalQueue of the same name."""
    return [cq(name, group(["cpu"], (OD, {"cpu": cpu})), cohort=parent, **spec), lq(name, name)]


@dataclass
class Case:
    reason: str
    documents: list[dict[str, Any]]
    running: list[tuple[str, str, int]]  # (workload, ClusterQueue, on-demand cpu)
    waiting: list[QueuedWorkload]
    order: list[str]  # admissions of the pass, in order
    left: set[str] = field(default_factory=set)
    ordered: bool = True  # False: different cohort trees, in no particular order


SHARED_8 = [cohort("a", cpu=8), *queue("b", "a"), *queue("c", "a")]
SHARED_10 = [cohort("a", cpu=10), *queue("b", "a"), *queue("c", "a")]

CASES = {
    "with fair sharing: schedule workload with lowest share first": Case(
        "alpha would borrow 5 of the cohort's 110, beta 56-50=6: alpha's newer head first",
        [
            *queue("eng-alpha", "eng", (50, 50, None)),
            *queue("eng-beta", "eng", (50, 10, None)),
            *queue("eng-shared", "eng", (10, 0, None)),
        ],
        [("all-nominal", "eng-alpha", 50), ("borrowing", "eng-beta", 55)],
        [
            wl("older-new", "eng-beta", t=0, cpu="1"),
            wl("new", "eng-alpha", t=60, cpu="5"),
        ],
        ["new"],
        {"older-new"},
    ),
    "hierarchical fair sharing schedule workload which wins tournament": Case(
        "d1 wins in b, f1 in c; at a, b's 100 of 200 beats c's 101; then the cohort is full",
        [
            cohort("a", cpu=200),
            cohort("b", "a"),
            cohort("c", "a"),
            *queue("d", "b"),
            *queue("e", "b"),
            *queue("f", "c"),
            *queue("g", "c"),
        ],
        [("d0", "d", 10), ("e0", "e", 20), ("g0", "g", 100)],
        [
            wl("d1", "d", cpu="70"),
            wl("e1", "e", cpu="61"),
            wl("f1", "f", cpu="1"),
            wl("g1", "g", cpu="1"),
        ],
        ["d1"],
        {"e1", "f1", "g1"},
    ),
    "fair sharing schedule workload with lowest drf after admission": Case(
        "b with b1 would use 60, c with c1 75: b1 first, and then c1 no longer fits",
        [cohort("a", cpu=100), *queue("b", "a"), *queue("c", "a")],
        [("b0", "b", 10)],
        [wl("b1", "b", cpu="50"), wl("c1", "c", cpu="75")],
        ["b1"],
        {"c1"},
    ),
    "fair sharing two queues with weight 0 schedules workload which borrows less": Case(
        "both weights 0: c (4 of 8) beats b (8 of 8) whatever b1's priority",
        [
            cohort("a", cpu=8),
            *queue("b", "a", fairSharing={"weight": 0}),
            *queue("c", "a", fairSharing={"weight": 0}),
        ],
        [("b0", "b", 4)],
        [wl("b1", "b", cpu="4", priority=9001), wl("c1", "c", cpu="4", priority=0)],
        ["c1"],
        {"b1"},
    ),
    "fair sharing two queues with high weight schedules workload which borrows less": Case(
        "equal huge weights divide both shares alike: c still borrows less",
        [
            cohort("a", cpu=8),
            *queue("b", "a", fairSharing={"weight": 123456789}),
            *queue("c", "a", fairSharing={"weight": 123456789}),
        ],
        [("b0", "b", 4)],
        [wl("b1", "b", cpu="4", priority=9001), wl("c1", "c", cpu="4", priority=0)],
        ["c1"],
        {"b1"},
    ),
    "fair sharing schedule singleton cqs and cq without cohort": Case(
        "a borrows from its cohort's quota, b has its own, c has no cohort: all three fit",
        [
            cohort("ca", cpu=10),
            cohort("cb"),
            *queue("a", "ca"),
            *queue("b", "cb", 10),
            cq("c", group(["cpu"], (OD, {"cpu": 10}))),
            lq("c", "c"),
        ],
        [],
        [wl("a1", "a", cpu="10"), wl("b1", "b", cpu="10"), wl("c1", "c", cpu="10")],
        ["a1", "b1", "c1"],
        ordered=False,
    ),
    "fair sharing schedule highest priority first": Case(
        "equal shares after admitting: the higher priority wins",
        SHARED_10,
        [],
        [wl("b1", "b", cpu="10", priority=99), wl("c1", "c", cpu="10", priority=101)],
        ["c1"],
        {"b1"},
    ),
    "fair sharing schedule earliest timestamp first": Case(
        "equal shares and priorities: the earlier workload wins",
        SHARED_10,
        [],
        [
            wl("b1", "b", t=1, cpu="10", priority=101),
            wl("c1", "c", t=0, cpu="10", priority=101),
        ],
        ["c1"],
        {"b1"},
    ),
    "with fair sharing: hierarchical nominal-first prefers non-borrowing subtree": Case(
        "cohort-a stays within its own 10 with wl-a; cohort-b already borrows",
        [
            cohort("root"),
            cohort("cohort-a", "root", cpu=10),
            cohort("cohort-b", "root"),
            *queue("cq-a", "cohort-a"),
            *queue("cq-b", "cohort-b", 5),
            *queue("cq-c", "cohort-b"),
        ],
        [("c0", "cq-c", 10)],
        [wl("wl-b", "cq-b", t=0, cpu="5"), wl("wl-a", "cq-a", t=1, cpu="5")],
        ["wl-a"],
        {"wl-b"},
    ),
    "berth: after each admission the shares are compared again": Case(
        "b, c and d borrow alike: the pass takes one from each in turn, not b's backlog first",
        [cohort("a", cpu=6), *queue("b", "a"), *queue("c", "a"), *queue("d", "a")],
        [],
        [
            wl("b1", "b", t=0, cpu="1"),
            wl("b2", "b", t=1, cpu="1"),
            wl("b3", "b", t=2, cpu="1"),
            wl("c1", "c", t=3, cpu="1"),
            wl("c2", "c", t=4, cpu="1"),
            wl("d1", "d", t=5, cpu="1"),
        ],
        ["b1", "c1", "d1", "b2", "c2", "b3"],
    ),
}


def _run(case: Case, *, enable: bool) -> tuple[list[str], set[str]]:
    s = Scheduler()
    s.set_config(config(flavor(OD), *case.documents, configuration(enable)))
    for name, cluster_queue, cpu in case.running:
        usage = {"cpu": cpu * 1000}
        assignment = FlavorAssignment("main", 1, {"cpu": OD}, usage)
        s.restore_admission(ref(name), cluster_queue, [assignment])
        s.submit(wl(name, cluster_queue, cpu=str(cpu)))
    for workload in case.waiting:
        s.submit(workload)
    decisions = s.schedule()
    return admitted(decisions), set(pending(decisions))


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_kueue_fair_sharing_admission_pass(name: str) -> None:
    """The pass admits in Kueue's fair-sharing order and leaves what no longer fits."""
    case = CASES[name]
    order, left = _run(case, enable=True)
    if not case.ordered:
        order = sorted(order)
    assert order[: len(case.order)] == case.order, case.reason
    assert left == case.left, case.reason


def test_without_fair_sharing_the_classical_order_holds() -> None:
    """Kueue's first case with fairSharing off: both heads borrow, so the older one goes
    first (the case would not tell the two orders apart otherwise)."""
    case = CASES["with fair sharing: schedule workload with lowest share first"]
    order, _ = _run(case, enable=False)
    assert order[0] == "older-new"
    s = Scheduler()
    s.set_config(config(flavor(OD), *case.documents, configuration(False)))
    s.submit(wl("new", "eng-alpha", cpu="5"))
    [decision] = s.schedule()
    assert isinstance(decision, Admission) and decision.weighted_share is None


def test_weighted_share_in_the_cluster_queue_status() -> None:
    """status.fairSharing.weightedShare: borrowed over lendable per mille, over the weight,
    rounded up; absent when fair sharing is off."""
    case = CASES["fair sharing schedule workload with lowest drf after admission"]
    s = Scheduler()
    s.set_config(config(flavor(OD), *case.documents, configuration(True)))
    s.submit(wl("b1", "b", cpu="30"))
    s.submit(wl("c1", "c", cpu="0.5"))
    decisions = s.schedule()
    assert admitted(decisions) == ["c1", "b1"]
    # Each admission carries its ClusterQueue's share once admitted (the service logs it).
    assert [d.weighted_share for d in decisions if isinstance(d, Admission)] == [5, 300]
    shares = {n: s.cluster_queue_status(n)["fairSharing"]["weightedShare"] for n in "bc"}
    assert shares == {"b": 300, "c": 5}
    s.set_config(config(flavor(OD), *case.documents, configuration(False)))
    assert "fairSharing" not in s.cluster_queue_status("b")


def test_the_tournament_does_not_admit_past_quota() -> None:
    """A newcomer of a queue that borrows less passes a backlog; the cohort is never
    over-committed."""
    case = CASES["berth: after each admission the shares are compared again"]
    s = Scheduler()
    s.set_config(config(flavor(OD), *case.documents, configuration(True)))
    for workload in case.waiting:
        s.submit(workload)
    s.submit(wl("late", "d", t=9, cpu="1"))
    decisions = s.schedule()
    # d with late would borrow 2 of 6, b with b3 3 of 6: late passes b3, which waits.
    assert admitted(decisions) == ["b1", "c1", "d1", "b2", "c2", "late"]
    assert set(pending(decisions)) == {"b3"}
    assert s.quota.violations() == []
    assert all(isinstance(d, Admission) for d in decisions if d.ref.name != "b3")


def test_weighted_share_and_fair_usage_gauges() -> None:
    """berth_cluster_queue_weighted_share (Kueue's kueue_cluster_queue_weighted_share) carries
    each ClusterQueue's share with its cohort; none with fair sharing off."""
    case = CASES["fair sharing schedule workload with lowest drf after admission"]
    objects = config(flavor(OD), *case.documents, configuration(True))
    s = Scheduler()
    s.set_config(objects)
    s.submit(wl("b1", "b", cpu="30"))
    s.schedule()
    queues = [o for o in objects if isinstance(o, ClusterQueue)]
    samples = queue_samples(s.queue_stats(), queues, [])
    assert sorted(samples["berth_cluster_queue_weighted_share"]) == [
        (("b", "a"), 300),
        (("c", "a"), 0),
    ]
    s.set_config(config(flavor(OD), *case.documents, configuration(False)))
    assert queue_samples(s.queue_stats(), queues, [])["berth_cluster_queue_weighted_share"] == []


def test_a_queue_without_cohort_named_like_a_cohort_is_still_scheduled() -> None:
    """A ClusterQueue with no cohort keeps the classical order even when a cohort of the
    same name takes the tournament (names of ClusterQueues and Cohorts are apart)."""
    s = Scheduler()
    s.set_config(
        config(
            flavor(OD),
            cq("shared", group(["cpu"], (OD, {"cpu": 4}))),
            lq("shared", "shared"),
            cohort("shared", cpu=4),
            *queue("member", "shared"),
            configuration(True),
        )
    )
    s.submit(wl("alone", "shared", cpu="4"))
    s.submit(wl("in-cohort", "member", cpu="4"))
    assert sorted(admitted(s.schedule())) == ["alone", "in-cohort"]
