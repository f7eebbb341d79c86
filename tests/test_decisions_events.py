"""services/admission/decisions.py Decisions.events: a pass's decisions become their events
in order, and the list is emptied as they are (a first pass makes half a million decisions;
each is let go once turned into its events)."""

from __future__ import annotations

import time

import pytest

from services.admission.decisions import Decisions
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.model import Inadmissible
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


# (reason, the throttle's interval, whether the second report goes out in the pass)
REPORTS: list[tuple[str, float, bool]] = [
    ("the interval has passed: published, with an id of its own", 0.0, True),
    ("within the interval: held, no event (its id is given when it goes out)", 3600.0, False),
]


@pytest.mark.parametrize(("reason", "interval", "published"), REPORTS, ids=[c[0] for c in REPORTS])
def test_a_report_is_given_its_id_when_published(
    reason: str, interval: float, published: bool
) -> None:
    """A pending report is made without an id; the one published in the pass gets a new
    UUID (the first report of a workload is held, then released by due with its own)."""
    s = scheduler(simple(cpu=4), wl("a", cpu="3", t=0), wl("b", cpu="3", t=1))
    throttle = PendingThrottle(interval)
    made = Decisions(s, {}, Gates(), ExecutionLimits(), throttle)
    first = made.events(s.schedule(), [])
    # b's first report, held for the interval, goes out at its end
    (released,) = throttle.due(time.monotonic() + interval)
    again = Inadmissible(released.workload, "cq", released.reason, released.message)
    second = made.events([again], [])
    reports = [e for e in second if isinstance(e, WorkloadPending)]
    assert [e.workload.name for e in reports] == (["b"] if published else []), reason
    ids = [e.id for e in [*first, released, *reports]]
    assert all(len(i) > 0 for i in ids) and len(set(ids)) == len(ids), reason
    assert all(len(e.id) == 32 and int(e.id, 16) for e in reports), reason  # a UUID's hex
