"""A Cohort's status.fairSharing.weightedShare (services.admission.fairness.Fairness.
cohort_status), as Kueue's cohort controller writes it from CohortStats: the Cohort's dominant
resource share (what its subtree uses above its subtree quota, over what its parent could
lend, over its own fair weight), rounded up; 0 for a root; absent with fair sharing off.
The same number is the metric berth_cohort_weighted_share{cohort} (Kueue's
kueue_cohort_weighted_share), absent with fair sharing off.

The cases replay the Cohort rows of Kueue's TestDominantResourceShare
(pkg/cache/scheduler/fair_sharing_test.go, named in the ids); the ``berth:`` ones add the
switch and the zero weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from services.admission.queue_gauges import cohort_shares, queue_samples
from services.admission.scheduler import Scheduler
from shared.config import ClusterQueue, Cohort
from tests.scheduler_world import V1, config, cq, flavor, group

GPU = "example.com/gpu"


def _cohort(name: str, parent: str = "", weight: str | None = None, **gpu: Any) -> dict[str, Any]:
    """A Cohort object; ``gpu``: nominal (and borrowing) quota of example.com/gpu."""
    spec: dict[str, Any] = {"parentName": parent} if parent else {}
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if gpu:
        quota = {"name": GPU, "nominalQuota": gpu["nominal"]}
        if "borrowing" in gpu:
            quota["borrowingLimit"] = gpu["borrowing"]
        spec["resourceGroups"] = [
            {"coveredResources": [GPU], "flavors": [{"name": "default", "resources": [quota]}]}
        ]
    return {"apiVersion": V1, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def _queue(name: str, cohort: str, gpu: int, weight: str = "1") -> dict[str, Any]:
    return cq(
        name,
        group([GPU], ("default", {GPU: gpu})),
        cohort=cohort,
        fairSharing={"weight": weight},
    )


def _child_of_root(cq_gpu: int, weight: str, root_gpu: int) -> list[dict[str, Any]]:
    """Kueue's case shape: ClusterQueue cq (``cq_gpu``) in child-cohort (``weight``) under
    root (``root_gpu``)."""
    return [
        _queue("cq", "child-cohort", cq_gpu),
        _cohort("child-cohort", "root", weight),
        _cohort("root", nominal=root_gpu),
    ]


@dataclass
class Case:
    name: str
    objects: list[dict[str, Any]]
    usage: int  # example.com/gpu in use by ClusterQueue "cq"
    shares: dict[str, int | None]  # cohort -> weightedShare (None: no fairSharing status)
    fair: bool = True


CASES = [
    Case(
        "TestDominantResourceShare/cohort has resource share: child-cohort borrows 5 of the"
        " root's 50, weight 2 halves it; the root borrows from nobody",
        _child_of_root(5, "2", 45),
        10,
        {"child-cohort": 50, "root": 0},
    ),
    Case(
        "TestDominantResourceShare/resource share defined for resources only available at the"
        " root cohort: 10 above child-cohort's empty subtree, of 50, over weight 2",
        _child_of_root(0, "2", 50),
        10,
        {"child-cohort": 100, "root": 0},
    ),
    Case(
        "TestDominantResourceShare/resource share affected by borrowing limit: the root could"
        " lend child-cohort 50 (its borrowing limit binds the ClusterQueue, not itself)",
        [
            _queue("cq", "child-cohort", 0),
            _cohort("child-cohort", "root", nominal=0, borrowing=10),
            _cohort("root", nominal=50),
        ],
        10,
        {"child-cohort": 200, "root": 0},
    ),
    Case(
        "TestDominantResourceShare/usage above nominal: the ClusterQueue borrows, its cohort"
        " is a root and has share 0",
        [
            _queue("cq", "test-cohort", 5),
            _queue("lending-cq", "test-cohort", 5),
            _cohort("test-cohort"),
        ],
        7,
        {"test-cohort": 0},
    ),
    Case(
        "TestDominantResourceShare/usage below nominal: nobody borrows, every share is 0",
        _child_of_root(5, "2", 45),
        4,
        {"child-cohort": 0, "root": 0},
    ),
    Case(
        "berth: a zero-weight Cohort that borrows has the largest share (Kueue's +inf as"
        " the largest int64, as for a ClusterQueue)",
        _child_of_root(5, "0", 45),
        10,
        {"child-cohort": 2**63 - 1, "root": 0},
    ),
    Case(
        "berth: a cohort only ClusterQueues name (no Cohort object) is a root: 0, and its"
        " metric is served, as Kueue's cache holds such a cohort too",
        [_queue("cq", "implicit", 5), _queue("lending-cq", "implicit", 5)],
        10,
        {"implicit": 0},
    ),
    Case(
        "berth: fair sharing off, no fairSharing in a Cohort's status (Kueue sets it nil)",
        _child_of_root(5, "2", 45),
        10,
        {"child-cohort": None, "root": None},
        fair=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cohort_weighted_share(case: Case) -> None:
    s = Scheduler()
    configuration = {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "Configuration",
        "metadata": {"name": "berth"},
        "spec": {"fairSharing": {"enable": case.fair}},
    }
    objects = config(flavor("default"), configuration, *case.objects)
    s.set_config(objects)
    s.quota.add_usage("cq", {("default", GPU): case.usage * 1000})
    queues = [o for o in objects if isinstance(o, ClusterQueue)]
    shares = cohort_shares(s.cohort_status, queues, [o for o in objects if isinstance(o, Cohort)])
    samples = dict(
        queue_samples(s.queue_stats(), queues, [], shares)["berth_cohort_weighted_share"]
    )
    for name, share in case.shares.items():
        status = s.cohort_status(name)
        expected = {} if share is None else {"fairSharing": {"weightedShare": share}}
        assert status == expected, case.name
        assert samples.get((name,)) == share, f"the metric: {case.name}"
