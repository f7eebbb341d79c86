"""Which ClusterQueues' parked workloads a pass retries after quota is released
(``Placement.take_dirty_queues``): a release notes its cohort's root once, and the pass
retries every member of each cohort noted, once; a config change judges every queue again
anyway, so nothing noted before it is kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from bench.admission_core import build_config
from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from shared.events import PodSet, WorkloadRef

# cq-0 and cq-1 share cohort-0; cq-2 and cq-3 are each alone in their cohort.
CONFIG = build_config(4, lambda index: 0 if index < 2 else index)


def _workload(index: int) -> QueuedWorkload:
    return QueuedWorkload(
        ref=WorkloadRef(f"ns-{index}", f"job-{index}", f"uid-{index}"),
        local_queue=f"lq-{index}",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        queue_time=1_700_000_000.0 + index,
    )


def _finish(*indexes: int) -> Callable[[Scheduler], None]:
    def finish(scheduler: Scheduler) -> None:
        for index in indexes:
            scheduler.finish(_workload(index).ref)

    return finish


def _reconfigure(scheduler: Scheduler) -> None:
    _finish(0)(scheduler)
    scheduler.set_config(CONFIG)


def _taken_twice(scheduler: Scheduler) -> None:
    _finish(0)(scheduler)
    scheduler.take_dirty_queues()


@dataclass(frozen=True)
class Case:
    why: str
    after_pass: Callable[[Scheduler], None]  # what happens between the first pass and the take
    retried: set[str]


CASES = [
    Case("a release retries every member of its cohort", _finish(0), {"cq-0", "cq-1"}),
    Case("two releases in one cohort note it once", _finish(0, 1), {"cq-0", "cq-1"}),
    Case("a ClusterQueue alone in its cohort retries itself", _finish(2), {"cq-2"}),
    Case("releases in two cohorts retry both", _finish(1, 3), {"cq-0", "cq-1", "cq-3"}),
    Case("nothing released: nothing retried", lambda scheduler: None, set()),
    Case("a config change after the release judges every queue again: nothing kept noted",
         _reconfigure, set()),
    Case("what a pass took is not taken again", _taken_twice, set()),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_the_queues_a_pass_retries(case: Case) -> None:
    scheduler = Scheduler()
    scheduler.set_config(CONFIG)
    for index in range(4):
        scheduler.submit(_workload(index))
    admitted = [d for d in scheduler.schedule() if isinstance(d, Admission)]
    assert len(admitted) == 4, "each fits its own queue"
    case.after_pass(scheduler)
    assert scheduler.take_dirty_queues() == case.retried, case.why
