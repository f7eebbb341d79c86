"""Fair sharing in admission order (services.admission.fair_order): Kueue's own cases.

Each case replays one of Kueue's TestScheduleForFairSharing cases (pkg/scheduler/
scheduler_fs_test.go, named in the id) at the level of the rule: the cohort tree and what is
admitted already, the heads of the ClusterQueues with the usage of their flavor assignment,
and which head the tournament puts first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.admission.fair_order import (
    Head,
    Weights,
    _flat_round,
    _Pass,
    _tree_round,
    tournament,
)
from shared.config import ClusterQueue, Cohort, parse_object
from shared.quota import QuotaTree

V1 = "kueue.x-k8s.io/v1beta1"
OD = "on-demand"


def cq(
    name: str, cohort: str, quotas: dict[str, tuple[int, int | None]], weight: Any = None
) -> Any:
    """A ClusterQueue with cpu quotas per flavor: flavor -> (nominal, borrowingLimit)."""
    flavors = []
    for flavor, (nominal, borrowing) in quotas.items():
        resource: dict[str, Any] = {"name": "cpu", "nominalQuota": nominal}
        if borrowing is not None:
            resource["borrowingLimit"] = borrowing
        flavors.append({"name": flavor, "resources": [resource]})
    spec: dict[str, Any] = {
        "cohort": cohort,
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavors}],
    }
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return parse_object(
        {"apiVersion": V1, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    )


def cohort(name: str, parent: str = "", cpu: int | None = None) -> Any:
    spec: dict[str, Any] = {"parentName": parent} if parent else {}
    if cpu is not None:
        spec["resourceGroups"] = [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": OD, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
            }
        ]
    return parse_object(
        {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    )


@dataclass
class Case:
    reason: str
    objects: list[Any]
    admitted: dict[str, dict[str, int]]  # ClusterQueue -> flavor -> cpu in use
    heads: dict[str, tuple[str, dict[str, int], int, float]]  # cq -> (name, usage, prio, t)
    first: str
    root: str = ""
    ranks: dict[str, int] = field(default_factory=dict)  # workload -> Berth's queue rank


FLAT_ENG = [
    cq("eng-alpha", "eng", {OD: (50, 50), "spot": (100, 0)}),
    cq("eng-beta", "eng", {OD: (50, 10), "spot": (0, 100)}),
    cq("eng-shared", "eng", {OD: (10, 0)}),
]
TWO_EMPTY = [cohort("a", cpu=8), cq("b", "a", {OD: (0, None)}), cq("c", "a", {OD: (0, None)})]

CASES = {
    "with fair sharing: schedule workload with lowest share first": Case(
        "alpha borrows 5 of 110 after admitting, beta 6: alpha goes first although beta's"
        " head is older",
        FLAT_ENG,
        {"eng-alpha": {OD: 50}, "eng-beta": {OD: 55}},
        {"eng-alpha": ("new", {OD: 5}, 0, 60.0), "eng-beta": ("older_new", {OD: 1}, 0, 0.0)},
        "new",
    ),
    "with fair sharing: nominal-first ordering admits workload fitting within nominal despite"
    " higher CQ DRS": Case(
        "fs-nom-a borrows spot (a higher share) but its head stays within its on-demand"
        " quota; fs-nom-b's head would borrow on-demand",
        [
            cq("fs-nom-a", "fs-nom", {OD: (50, 0), "spot": (50, 50)}),
            cq("fs-nom-b", "fs-nom", {OD: (10, 50), "spot": (50, 0)}),
        ],
        {"fs-nom-a": {"spot": 80}, "fs-nom-b": {OD: 5}},
        {"fs-nom-a": ("nom-wl", {OD: 45}, 0, 60.0), "fs-nom-b": ("borrow-wl", {OD: 15}, 0, 0.0)},
        "nom-wl",
    ),
    "with fair sharing: hierarchical nominal-first prefers non-borrowing subtree": Case(
        "at the root, Cohort-A stays within its own quota with wl-a; Cohort-B borrows",
        [
            cohort("root"),
            cohort("cohort-a", "root", cpu=10),
            cohort("cohort-b", "root"),
            cq("cq-a", "cohort-a", {OD: (0, None)}),
            cq("cq-b", "cohort-b", {OD: (5, None)}),
            cq("cq-c", "cohort-b", {OD: (0, None)}),
        ],
        {"cq-c": {OD: 10}},
        {"cq-a": ("wl-a", {OD: 5}, 0, 0.0), "cq-b": ("wl-b", {OD: 5}, 0, 0.0)},
        "wl-a",
        root="root",
    ),
    "hierarchical fair sharing schedule workload which wins tournament": Case(
        "d1 wins in B (80 < 81 borrowed), f1 in C (1 < 101); at A, B with d1 uses 100 of"
        " 200, C with f1 101",
        [
            cohort("a", cpu=200),
            cohort("b", "a"),
            cohort("c", "a"),
            cq("d", "b", {OD: (0, None)}),
            cq("e", "b", {OD: (0, None)}),
            cq("f", "c", {OD: (0, None)}),
            cq("g", "c", {OD: (0, None)}),
        ],
        {"d": {OD: 10}, "e": {OD: 20}, "g": {OD: 100}},
        {
            "d": ("d1", {OD: 70}, 0, 0.0),
            "e": ("e1", {OD: 61}, 0, 0.0),
            "f": ("f1", {OD: 1}, 0, 0.0),
            "g": ("g1", {OD: 1}, 0, 0.0),
        },
        "d1",
        root="a",
    ),
    "fair sharing schedule workload with lowest drf after admission": Case(
        "b would use 60 after admitting b1, c 75 after c1",
        [cohort("a", cpu=100), cq("b", "a", {OD: (0, None)}), cq("c", "a", {OD: (0, None)})],
        {"b": {OD: 10}},
        {"b": ("b1", {OD: 50}, 0, 0.0), "c": ("c1", {OD: 75}, 0, 0.0)},
        "b1",
    ),
    "fair sharing two queues with weight 0 schedules workload which borrows less": Case(
        "both weights 0: shares compare by ratio, so c (4 of 8) beats b (8 of 8) whatever"
        " b1's priority",
        [cohort("a", cpu=8), cq("b", "a", {OD: (0, None)}, 0), cq("c", "a", {OD: (0, None)}, 0)],
        {"b": {OD: 4}},
        {"b": ("b1", {OD: 4}, 9001, 0.0), "c": ("c1", {OD: 4}, 0, 0.0)},
        "c1",
    ),
    "fair sharing two queues with high weight schedules workload which borrows less": Case(
        "equal huge weights divide both shares alike: c still borrows less",
        [
            cohort("a", cpu=8),
            cq("b", "a", {OD: (0, None)}, 123456789),
            cq("c", "a", {OD: (0, None)}, 123456789),
        ],
        {"b": {OD: 4}},
        {"b": ("b1", {OD: 4}, 9001, 0.0), "c": ("c1", {OD: 4}, 0, 0.0)},
        "c1",
    ),
    "fair sharing schedule highest priority first": Case(
        "equal shares after admitting: the higher priority wins",
        TWO_EMPTY,
        {},
        {"b": ("b1", {OD: 8}, 99, 0.0), "c": ("c1", {OD: 8}, 101, 0.0)},
        "c1",
    ),
    "fair sharing schedule earliest timestamp first": Case(
        "equal shares and priorities: the earlier workload wins",
        TWO_EMPTY,
        {},
        {"b": ("b1", {OD: 8}, 101, 1.0), "c": ("c1", {OD: 8}, 101, 0.0)},
        "c1",
    ),
    "berth: weight 2 halves the share": Case(
        "b borrows 6 with weight 2 (share 375), c 4 with weight 1 (500): b goes first",
        [cohort("a", cpu=8), cq("b", "a", {OD: (0, None)}, 2), cq("c", "a", {OD: (0, None)})],
        {"b": {OD: 2}},
        {"b": ("b1", {OD: 4}, 0, 1.0), "c": ("c1", {OD: 4}, 0, 0.0)},
        "b1",
    ),
    "berth: a reserved workload goes before a lower share": Case(
        "b's head holds an ageing reservation: it keeps its rank ahead of the share",
        [cohort("a", cpu=100), cq("b", "a", {OD: (0, None)}), cq("c", "a", {OD: (0, None)})],
        {"b": {OD: 10}},
        {"b": ("b1", {OD: 50}, 0, 0.0), "c": ("c1", {OD: 5}, 0, 0.0)},
        "b1",
        ranks={"b1": 1},
    ),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_kueue_fair_sharing_admission_order(name: str) -> None:
    """The tournament picks the head Kueue's fairSharingIterator picks."""
    case = CASES[name]
    cluster_queues = [o for o in case.objects if isinstance(o, ClusterQueue)]
    cohorts = [o for o in case.objects if isinstance(o, Cohort)]
    tree = QuotaTree.build(cluster_queues, cohorts)
    for queue, usage in case.admitted.items():
        tree.add_usage(queue, {(flavor, "cpu"): cpu * 1000 for flavor, cpu in usage.items()})
    nodes = {**tree.cohorts, **tree.cluster_queues}
    before = {n: {fr: v for fr, v in node.usage.items() if v} for n, node in nodes.items()}
    heads = {
        queue: Head(
            queue,
            {(flavor, "cpu"): cpu * 1000 for flavor, cpu in usage.items()},
            (-case.ranks.get(workload, 0), 0.0, -priority, t, workload),
        )
        for queue, (workload, usage, priority, t) in case.heads.items()
    }
    root = tree.cohorts[case.root or cluster_queues[0].cohort_name]
    winner = tournament(tree, root, heads, Weights(cluster_queues, cohorts))
    assert winner is not None, case.reason
    assert winner.order[-1] == case.first, case.reason
    after = {n: {fr: v for fr, v in node.usage.items() if v} for n, node in nodes.items()}
    assert after == before, "the tournament leaves the quota tree as it found it"


def test_no_heads_under_the_root() -> None:
    """A cohort tree with no head this pass nominates nothing."""
    tree = QuotaTree.build(
        [o for o in TWO_EMPTY if isinstance(o, ClusterQueue)],
        [o for o in TWO_EMPTY if isinstance(o, Cohort)],
    )
    assert tournament(tree, tree.cohorts["a"], {}, lambda node: 1.0) is None


@dataclass
class _Job:
    name: str
    cpu: int
    priority: int
    t: float

    def __post_init__(self) -> None:
        self.key = (0, 0.0, -self.priority, self.t, self.name)  # one object, as Record.key


@dataclass
class _Fit:
    fits: bool
    usage: dict[tuple[str, str], int]


def _play(round_: Any, seed: int) -> list[str]:
    """Admit random jobs of random flat worlds through one round; the admission order."""
    rng = random.Random(seed)
    names = [f"q{i}" for i in range(rng.randint(2, 6))]
    objects = [cohort("a", cpu=rng.randint(4, 30))] + [
        cq(n, "a", {OD: (rng.choice((0, 0, 2, 5)), None)}, rng.choice((None, 1, 2, 0.5)))
        for n in names
    ]
    cluster_queues = [o for o in objects if isinstance(o, ClusterQueue)]
    tree = QuotaTree.build(cluster_queues, [o for o in objects if isinstance(o, Cohort)])
    queues = {
        n: sorted(
            (
                _Job(f"{n}-{j}", rng.randint(1, 5), rng.choice((0, 10)), rng.random())
                for j in range(5)
            ),
            key=lambda job: (-job.priority, job.t),
        )
        for n in names
    }
    order: list[str] = []

    def head_of(name: str) -> tuple[_Job, tuple[Any, ...]] | None:
        if not queues[name]:
            return None
        job = queues[name][0]
        return job, job.key

    def assign(name: str, job: _Job) -> _Fit:
        usage = {(OD, "cpu"): job.cpu * 1000}
        return _Fit(tree.fits(name, usage), usage)

    def decide(name: str, job: _Job, result: _Fit) -> None:
        queues[name].pop(0)
        if result.fits:
            tree.add_usage(name, result.usage)
            order.append(job.name)

    weights = Weights(cluster_queues, [])
    round_(_Pass(tree, tree.cohorts["a"], weights, head_of, assign, decide), names)
    return order


@pytest.mark.parametrize("seed", range(40))
def test_the_flat_shortcut_admits_in_the_tournament_order(seed: int) -> None:
    """A cohort of ClusterQueues only takes a heap instead of a tournament per admission;
    on random worlds both admit the same workloads in the same order."""
    assert _play(_flat_round, seed) == _play(_tree_round, seed)
