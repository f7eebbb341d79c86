"""A restored admission whose submit has not been seen yet is a placeholder
(queues.py ``Record.placeholder``: told by its workload's pod sets, no flag of its own): the
first submit seen takes its place; a submitted workload is never a placeholder, so a later
submit of the same uid changes nothing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from services.admission.scheduler import QueuedWorkload, Scheduler
from shared.events import FlavorAssignment
from tests.scheduler_world import config, cq, flavor, group, lq, ref, wl

FIRST = wl("x", "qa", t=1.0, cpu=1)
SECOND = wl("x", "qb", t=2.0, cpu=1)
NO_PODS = QueuedWorkload(ref=ref("x"), local_queue="qa", pod_sets=[], queue_time=1.0)


@dataclass
class Case:
    reason: str
    restored: bool  # the admission is restored before any submit
    submits: list[QueuedWorkload]
    kept: QueuedWorkload | None  # the workload the record holds at the end (None: a placeholder)


CASES = [
    Case(
        "restored, then submitted: the submit takes the placeholder's place", True, [FIRST], FIRST
    ),
    Case("restored, submitted twice: the second is a duplicate", True, [FIRST, SECOND], FIRST),
    Case("restored, never submitted: still a placeholder", True, [], None),
    Case("submitted, then again: a duplicate changes nothing", False, [FIRST, SECOND], FIRST),
    Case(
        "a submitted workload with no pod sets is not a placeholder (an empty list, but not "
        "the placeholder's): the next submit is a duplicate",
        False,
        [NO_PODS, SECOND],
        NO_PODS,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason[:50])
def test_a_placeholder_takes_the_first_submit(case: Case) -> None:
    s = Scheduler()
    od = ("on-demand", {"cpu": 4})
    s.set_config(
        config(flavor("on-demand"), cq("a", group(["cpu"], od)), lq("qa", "a"), lq("qb", "a"))
    )
    if case.restored:
        assignment = FlavorAssignment("main", 1, {"cpu": "on-demand"}, {"cpu": 1000})
        s.restore_admission(ref("x"), "a", [assignment], 1)
    for submitted in case.submits:
        s.submit(submitted)
    record = s._records["uid-x"]
    assert record.placeholder is (case.kept is None), case.reason
    if case.kept is not None:
        assert record.wl is case.kept, case.reason
