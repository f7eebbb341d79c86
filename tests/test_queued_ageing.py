"""services/admission/model.py: a queued workload's ageing (boost, reservation, clock,
nomination) is one value, shared while it has none; each change keeps what it does not set."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.admission.model import NO_AGEING, QueuedWorkload
from shared.events import WorkloadRef

Step = Callable[[QueuedWorkload], object]


def _workload() -> QueuedWorkload:
    return QueuedWorkload(WorkloadRef("ns", "a", "uid-a"), "lq", [], 1.0)


# (why, the steps, (boost, reserved, since, nominated) after them, whether it is NO_AGEING)
CASES: list[tuple[str, list[Step], tuple[int, bool, float, bool], bool]] = [
    ("never aged: the shared value", [], (0, False, 0.0, False), True),
    ("nominated", [lambda w: w.nominate(True)], (0, False, 0.0, True), False),
    (
        "a nomination ended: the shared value again",
        [lambda w: w.nominate(True), lambda w: w.nominate(False)],
        (0, False, 0.0, False),
        True,
    ),
    (
        "aged: boost, reservation, clock",
        [lambda w: w.age(5, True, 9.0)],
        (5, True, 9.0, False),
        False,
    ),
    (
        "aged while nominated: the nomination kept",
        [lambda w: w.nominate(True), lambda w: w.age(5, False, 9.0)],
        (5, False, 9.0, True),
        False,
    ),
    (
        "nominated while aged: the boost, reservation and clock kept",
        [lambda w: w.age(5, True, 9.0), lambda w: w.nominate(True)],
        (5, True, 9.0, True),
        False,
    ),
    (
        "ageing taken back to nothing: the shared value again",
        [lambda w: w.age(5, True, 9.0), lambda w: w.age(0, False, 0.0)],
        (0, False, 0.0, False),
        True,
    ),
]


@pytest.mark.parametrize(("why", "steps", "after", "shared"), CASES, ids=[c[0] for c in CASES])
def test_ageing_changes_keep_what_they_do_not_set(
    why: str, steps: list[Step], after: tuple[int, bool, float, bool], shared: bool
) -> None:
    workload = _workload()
    for step in steps:
        step(workload)
    assert (workload.boost, workload.reserved, workload.since, workload.nominated) == after, why
    assert (workload.ageing is NO_AGEING) is shared, why


# (boost, reserved, since given again, whether age() reports a change, why)
AGE_CASES = [
    (5, True, 9.0, False, "the same values: no change (the queue is not touched)"),
    (6, True, 9.0, True, "another boost"),
    (5, False, 9.0, True, "the reservation ended"),
    (5, True, 10.0, True, "another clock"),
]


@pytest.mark.parametrize(
    ("boost", "reserved", "since", "changed", "why"), AGE_CASES, ids=[c[4] for c in AGE_CASES]
)
def test_age_reports_whether_anything_changed(
    boost: int, reserved: bool, since: float, changed: bool, why: str
) -> None:
    workload = _workload()
    assert workload.age(5, True, 9.0)
    assert workload.age(boost, reserved, since) is changed, why
