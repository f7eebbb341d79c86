"""Fair-sharing preemption in hierarchical cohorts replays the hierarchical cases of Kueue's
TestFairPreemptions (pkg/scheduler/preemption/preemption_fair_test.go): shares compared at
the least common ancestor, Cohort weights counted. Case ids are Kueue's names; CPUs in whole
units of flavor "default"; every workload is 1 CPU (Kueue's unitWl) unless said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from services.preemption.model import Running
from services.preemption.victims import find_victims
from shared.config import ClusterQueue, Cohort, FairSharingSettings, parse_object
from shared.quota import QuotaTree
from tests.victims_search import by_queue, cq, run, snapshot, victims_of, wants

D = "default/cpu"
FAIR = FairSharingSettings(enable=True)


def cohort(
    name: str, parent: str = "", cpu: int | None = None, weight: str | None = None
) -> Cohort:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if cpu is not None:
        resources = [{"name": "cpu", "nominalQuota": cpu}]
        spec["resourceGroups"] = [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": resources}]}
        ]
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    obj = parse_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Cohort",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    assert isinstance(obj, Cohort)
    return obj


def units(queue: str, names: str, priorities: range | list[int] | None = None) -> list[Running]:
    """Kueue's unitWl: one CPU each; ``names`` like "b1 b2"."""
    split = names.split()
    prios = list(priorities) if priorities is not None else [0] * len(split)
    return [run(n, queue, p, {D: 1}) for n, p in zip(split, prios, strict=True)]


@dataclass
class Case:
    why: str
    queues: list[ClusterQueue]
    cohorts: list[Cohort]
    running: list[Running]
    incoming: tuple[str, int, int]  # queue, priority, CPUs
    expected: dict[str, str]
    fair: FairSharingSettings = field(default_factory=lambda: FAIR)


ANY = {"reclaim": "Any"}
CASES: dict[str, Case] = {
    "hierarchical preemption": Case(
        "LEFT (weight 2) takes from the highest shares below ROOT: b in LEFT by priority,"
        " then c and the lighter e of RIGHT",
        [
            cq("a", {D: 1}, cohort="left", weight="2", **ANY),
            cq("b", {D: 1}, cohort="left"),
            cq("c", {D: 1}, cohort="root"),
            cq("d", {D: 1}, cohort="right"),
            cq("e", {D: 1}, cohort="right", weight="0.99"),
        ],
        [
            cohort("root", cpu=5),
            cohort("left", "root", cpu=5, weight="2"),
            cohort("right", "root", cpu=5),
        ],
        [
            r
            for q in "bcde"
            for r in units(q, " ".join(f"{q}{i}" for i in range(1, 6)), range(1, 6))
        ],
        ("a", 0, 5),
        {n: "InCohortFairSharing" for n in ("b1", "b2", "c1", "c2", "e1")},
    ),
    "borrowing cq in non-borrowing cohort is protected": Case(
        "b borrows, but RIGHT does not: b1 is out of reach and a preempts its own",
        [
            cq("a", {D: 5}, cohort="root", weight="10", within="LowerPriority", **ANY),
            cq("b", {D: 0}, cohort="right", weight="0.1"),
        ],
        [cohort("root"), cohort("right", "root", cpu=1, weight="0.1")],
        [*units("a", "a1 a2 a3", [-1, -1, -1]), *units("b", "b1", [-1])],
        ("a", 0, 5),
        {"a1": "InClusterQueue", "a2": "InClusterQueue", "a3": "InClusterQueue"},
    ),
    "forced to preempt within clusterqueue because borrowing workload too important": Case(
        "the only borrower has priority 100 (reclaimWithinCohort LowerPriority): own ones go",
        [
            cq(
                "a",
                {D: 5},
                cohort="root",
                weight="10",
                within="LowerPriority",
                reclaim="LowerPriority",
            ),
            cq("b", {D: 0}, cohort="right", weight="0.1"),
        ],
        [cohort("root"), cohort("right", "root", cpu=3, weight="0.1")],
        [*units("a", "a1 a2 a3", [-1, -1, -1]), run("b1", "b", 100, {D: 4})],
        ("a", 0, 4),
        {"a1": "InClusterQueue", "a2": "InClusterQueue", "a3": "InClusterQueue"},
    ),
    "deep preemption": Case(
        "shares compared at ROOT between A (1.01) and B (0.99), three levels up: B gives",
        [cq("a", {D: 0}, cohort="aaa", **ANY), cq("b", {D: 0}, cohort="bbb")],
        [
            cohort("root"),
            cohort("a", "root", weight="1.01"),
            cohort("aa", "a"),
            cohort("aaa", "aa"),
            cohort("b", "root", weight="0.99"),
            cohort("bb", "b"),
            cohort("bbb", "bb"),
            cohort("c", "root"),
            cohort("cc", "c"),
            cohort("ccc", "cc"),
            cohort("cccc", "ccc", cpu=1),
        ],
        units("b", "b1"),
        ("a", 0, 1),
        {"b1": "InCohortFairSharing"},
    ),
    "cohort with zero weight can reclaim nominal quota": Case(
        "A (weight 0) stays within its own quota with the workload: its share is 0, not +inf",
        [cq("a", {D: 0}, cohort="a-cohort", weight="0", **ANY), cq("b", {D: 0}, cohort="root")],
        [cohort("root"), cohort("a-cohort", "root", cpu=1, weight="0")],
        units("b", "b1"),
        ("a", 0, 1),
        {"b1": "InCohortFairSharing"},
    ),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_kueue_hierarchical_fair_preemption(name: str) -> None:
    """The victims of Kueue's case of the same name (the why says which rule)."""
    case = CASES[name]
    tree = QuotaTree.build(case.queues, case.cohorts)
    for w in case.running:
        tree.add_usage(w.cluster_queue, w.usage)
    before = snapshot(tree)
    queue, priority, cpus = case.incoming
    result = find_victims(
        tree=tree,
        cluster_queues={q.metadata.name: q for q in case.queues},
        preemptor=wants(queue, priority, {D: cpus}),
        running=by_queue(case.running),
        fair_sharing=case.fair,
        cohorts={c.metadata.name: c for c in case.cohorts},
    )
    assert snapshot(tree) == before
    assert victims_of(result) == case.expected, case.why
