"""services/admission/decisions.py Decisions.events: a pass's decisions become their events
in order, and the list is emptied as they are (a first pass makes half a million decisions;
each is let go once turned into its events)."""

from __future__ import annotations

import pytest

from services.admission.decisions import Decisions
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.pending_throttle import PendingThrottle
from services.admission.workload_objects import WorkloadRecord
from shared.events import Event, WorkloadAdmitted, WorkloadPending
from tests.test_scheduler import scheduler, simple, wl

# (reason, cpu per workload of a, b, c in a 4-cpu queue, the events' kinds and workloads)
CASES: list[tuple[str, list[str], list[tuple[str, str]]]] = [
    ("all fit: admitted in order", ["1", "1", "1"], [("A", "a"), ("A", "b"), ("A", "c")]),
    (
        "the last does not fit: its first report is held, the others in order",
        ["2", "2", "2"],
        [("A", "a"), ("A", "b")],
    ),
]


@pytest.mark.parametrize(("reason", "cpus", "expected"), CASES, ids=[c[0] for c in CASES])
def test_events_in_order_and_the_list_emptied(
    reason: str, cpus: list[str], expected: list[tuple[str, str]]
) -> None:
    names = zip("abc", cpus, strict=True)
    s = scheduler(simple(cpu=4), *(wl(n, cpu=c, t=i) for i, (n, c) in enumerate(names)))
    records: dict[str, WorkloadRecord] = {}
    throttle = PendingThrottle(1.0)
    decisions = s.schedule()
    made = Decisions(s, records, Gates(), ExecutionLimits(), throttle)
    outgoing: list[Event] = []
    assert made.events(decisions, outgoing) is outgoing, reason
    assert decisions == [], reason
    kinds = [("A" if isinstance(e, WorkloadAdmitted) else "P", e.workload.name) for e in outgoing]
    assert kinds == expected, reason
    held = throttle.due(float("inf"))
    assert all(isinstance(e, WorkloadPending) for e in held), reason
    assert [e.workload.name for e in held] == (["c"] if len(expected) == 2 else []), reason
