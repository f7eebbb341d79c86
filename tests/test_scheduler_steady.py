"""The million-pending bench's world in small (bench/million_pending.py: ClusterQueues of
two flavors in cohorts, StrictFIFO and BestEffortFIFO alternating, six shapes, four
priorities), through a first pass and steady passes where a few admitted workloads finish:
the scheduler with its shortcuts (offered heads left parked, presumed ahead of their turn,
queues left parked whole, borrowers left offered) must decide exactly as one that moves and
tries every parked head. Fixed seeds, so a failure is reproduced by its id."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from bench.admission_core import build_config
from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from shared.events import PodSet, WorkloadRef


@dataclass
class Scenario:
    reason: str
    seed: int
    cluster_queues: int
    per_cohort: int
    workloads: int
    finishes: int  # admitted workloads finished before each steady pass
    passes: int  # steady passes


SCENARIOS = [
    Scenario("the bench's proportions: 100 workloads per ClusterQueue", 1, 12, 4, 1200, 3, 8),
    Scenario("one big cohort: every release reaches every ClusterQueue", 2, 10, 10, 800, 2, 8),
    Scenario("many small cohorts, few workloads each: short queues", 3, 24, 2, 300, 4, 6),
    Scenario(
        "a release per pass larger than a shape: several admissions per cohort", 4, 8, 4, 900, 8, 6
    ),
]


def _workload(i: int, queues: int, rng: random.Random) -> QueuedWorkload:
    """bench/million_pending.py's ``submitted``, as the core gets it."""
    queue = rng.randrange(queues)
    count, cpu = rng.choice((1, 2, 4)), rng.choice((1, 2))
    return QueuedWorkload(
        ref=WorkloadRef(f"ns-{queue % 100}", f"job-{i}", f"uid-{i:07d}"),
        local_queue=f"lq-{queue}",
        pod_sets=[PodSet("main", count, {"cpu": cpu * 1000, "memory": (2 << 30) * 1000})],
        queue_time=1_700_000_000.0 + i,
        priority=rng.randrange(4) * 100,
    )


def _run(scenario: Scenario, offers: bool) -> tuple[list[list[Any]], list[Any], list[int]]:
    """Every pass's decisions, the queues at the end, and per steady pass the offered heads
    it left parked."""
    s = Scheduler()
    s.offers = offers
    s.set_config(build_config(scenario.cluster_queues, lambda i: i // scenario.per_cohort))
    rng = random.Random(scenario.seed)
    for i in range(scenario.workloads):
        s.submit(_workload(i, scenario.cluster_queues, rng))
    passes = [s.schedule()]
    admitted = [d.ref for d in passes[0] if isinstance(d, Admission)]
    left = []
    for _ in range(scenario.passes):
        for ref in admitted[: scenario.finishes]:
            s.finish(ref)
        del admitted[: scenario.finishes]
        passes.append(s.schedule())
        admitted.extend(d.ref for d in passes[-1] if isinstance(d, Admission))
        left.append(s.left_parked)
    return passes, [s.workload_views(), s.queue_stats()], left


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.reason[:50])
def test_steady_passes_decide_as_trying_every_head(scenario: Scenario) -> None:
    passes, views, left = _run(scenario, offers=True)
    reference, reference_views, _ = _run(scenario, offers=False)
    for index, (got, want) in enumerate(zip(passes, reference, strict=True)):
        assert got == want, (scenario.reason, f"pass {index}")
    assert views == reference_views, scenario.reason
    # The scenario exercises the shortcuts: steady passes admit and leave heads parked.
    assert sum(left) > 0, scenario.reason
    assert all(any(isinstance(d, Admission) for d in p) for p in passes[1:]), scenario.reason
