"""services/admission/decisions.py Decisions.events: a pass's decisions become their events
in order, and the list is emptied as they are (a first pass makes half a million decisions;
each is let go once turned into its events)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import cast

import msgspec
import pytest

from services.admission import decisions
from services.admission.decisions import Decisions
from services.admission.exec_time import ExecutionLimits
from services.admission.gates import Gates
from services.admission.model import Admission, Inadmissible
from services.admission.pending_throttle import PendingThrottle
from services.admission.scheduler import Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.events import Event, WorkloadAdmitted, WorkloadPending, WorkloadRef
from tests.conftest import captured_logs
from tests.scheduler_world import scheduler, simple, wl

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


# (reason, workloads of 1 cpu in an 8-cpu queue, events already due, piece size, the sizes
# of the pieces made)
PIECES: list[tuple[str, int, int, int, list[int]]] = [
    ("fewer events than a piece: one piece", 3, 0, 512, [3]),
    ("exactly a piece: one piece, no empty one after it", 4, 0, 4, [4]),
    ("more than a piece: full pieces, then the rest", 7, 0, 3, [3, 3, 1]),
    ("events already due go first, in the first piece", 2, 2, 3, [3, 1]),
    ("events already due, nothing decided: they alone", 0, 2, 3, [2]),
    ("nothing at all: no piece", 0, 0, 3, []),
]


@pytest.mark.parametrize(
    ("reason", "workloads", "due", "size", "sizes"), PIECES, ids=[c[0] for c in PIECES]
)
def test_a_passs_events_in_pieces(
    reason: str, workloads: int, due: int, size: int, sizes: list[int]
) -> None:
    """A large pass's events are made piece by piece (its first admissions are published
    while the rest are made): the pieces joined are the events of ``events``, in order,
    after the events already due, and share the pass's moment."""
    names = [f"w{i}" for i in range(workloads)]

    def made() -> tuple[Decisions, list[Admission | Inadmissible]]:
        s = scheduler(simple(cpu=8), *(wl(n, cpu="1", t=i) for i, n in enumerate(names)))
        return Decisions(s, {}, Gates(), ExecutionLimits(), PendingThrottle(1.0)), s.schedule()

    already = [_due(i) for i in range(due)]
    making, decisions = made()
    pieces = list(making.pieces(decisions, list(already), size=size))
    assert [len(piece) for piece in pieces] == sizes, reason
    assert decisions == [], reason
    joined = [event for piece in pieces for event in piece]
    whole_making, whole_decisions = made()
    whole = whole_making.events(whole_decisions, list(already))
    assert [(type(e), e.workload.name) for e in joined] == [
        (type(e), e.workload.name) for e in whole
    ], reason
    assert joined[:due] == already, reason
    admitted = [e for e in joined if isinstance(e, WorkloadAdmitted)]
    assert len({e.time for e in admitted}) <= 1, reason


def _due(index: int) -> Event:
    """An event due before the pass's own (a drain, a deactivation)."""
    return WorkloadPending(
        id=f"due-{index}",
        source="admission",
        workload=WorkloadRef(namespace="default", name=f"due-{index}", uid=f"u-due-{index}"),
        cluster_queue="cq",
        reason="Inactive",
        message="drained",
    )


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
    # A new message (the same one again is no news: never sent, test_pending_throttle.py)
    again = Inadmissible(released.workload, "cq", released.reason, f"{released.message}, again")
    second = made.events([again], [])
    reports = [e for e in second if isinstance(e, WorkloadPending)]
    assert [e.workload.name for e in reports] == (["b"] if published else []), reason
    ids = [e.id for e in [*first, released, *reports]]
    assert all(len(i) > 0 for i in ids) and len(set(ids)) == len(ids), reason
    assert all(len(e.id) == 32 and int(e.id, 16) for e in reports), reason  # a UUID's hex


# (reason, the admission's deadline from now in s or None, its weighted share, the line's
# keys after component, in order)
_ADMITTED_KEYS = ["workload", "queue", "reason", "priority", "generation", "waited_s"]
LINES: list[tuple[str, float | None, int | None, list[str]]] = [
    ("a plain admission", None, None, _ADMITTED_KEYS),
    ("fair sharing: its share after the wait", None, 7, [*_ADMITTED_KEYS, "weighted_share"]),
    ("a deadline passed: late_s last", -2.0, None, [*_ADMITTED_KEYS, "late_s"]),
    ("a deadline not passed: late_s 0", 60.0, None, [*_ADMITTED_KEYS, "late_s"]),
    ("both: the share, then late_s", -2.0, 3, [*_ADMITTED_KEYS, "weighted_share", "late_s"]),
]


@pytest.mark.parametrize(("reason", "due", "share", "keys"), LINES, ids=[c[0] for c in LINES])
def test_an_admissions_line(
    reason: str, due: float | None, share: int | None, keys: list[str]
) -> None:
    """One line per admission: workload, queue, reason, then what it was admitted with, in
    this order (tools read the JSON by key; people read the order)."""
    s = scheduler(simple(cpu=4), wl("a", cpu="1", t=0))
    (decided,) = s.schedule()
    assert isinstance(decided, Admission), reason
    wall = time.time()
    decision = msgspec.structs.replace(
        decided,
        queue_time=wall - 5.0,
        due=None if due is None else wall + due,
        weighted_share=share,
    )
    made = Decisions(s, {}, Gates(), ExecutionLimits(), PendingThrottle(1.0))
    with captured_logs(decisions) as logs:
        (event,) = made.events([decision], [])
    assert isinstance(event, WorkloadAdmitted), reason
    (line,) = logs
    assert list(line) == ["component", *keys, "event", "log_level"], reason
    assert (line["event"], line["workload"], line["queue"]) == ("admitted", "default/a", "cq")
    assert (line["reason"], line["generation"]) == ("fits", event.generation), reason
    assert 5.0 <= line["waited_s"] < 6.0, reason
    assert line.get("weighted_share") == share, reason
    if due is not None:
        assert line["late_s"] == (0.0 if due > 0 else pytest.approx(2.0, abs=0.5)), reason


# (reason, the contested resources of two reports, whether they share one list)
CONTESTED: list[tuple[str, list[tuple[tuple[str, str, int], ...]], bool]] = [
    ("none: the one empty list", [(), ()], True),
    ("the same: one list", [(("f", "cpu", 1000),), (("f", "cpu", 1000),)], True),
    ("another amount: its own", [(("f", "cpu", 1000),), (("f", "cpu", 2000),)], False),
    ("another flavor: its own", [(("f", "cpu", 1000),), (("g", "cpu", 1000),)], False),
]


@pytest.mark.parametrize(
    ("reason", "contested", "shared"), CONTESTED, ids=[c[0] for c in CONTESTED]
)
def test_a_reports_contested_resources(
    reason: str, contested: list[tuple[tuple[str, str, int], ...]], shared: bool
) -> None:
    """A published report says what it contests, as the decision had it; reports that
    contest alike share one list (never written), others have their own. Published at once
    (preemption may help), each logged: workload, queue, reason, message."""
    s = scheduler(simple(cpu=4))
    made = Decisions(s, {}, Gates(), ExecutionLimits(), PendingThrottle(1.0))
    asked = [
        Inadmissible(WorkloadRef("ns", n, f"uid-{n}"), "cq", "Why", "msg", True, (), c)
        for n, c in zip("ab", contested, strict=True)
    ]
    with captured_logs(decisions) as logs:
        reports = made.events(list(asked), [])
    assert [e.workload.name for e in reports] == ["a", "b"], reason
    for report, c in zip(reports, contested, strict=True):
        assert isinstance(report, WorkloadPending), reason
        assert [(r.flavor, r.resource, r.amount) for r in report.contested] == list(c), reason
    first, second = (cast(WorkloadPending, r).contested for r in reports)
    assert (first is second) == shared, reason
    assert [(x["event"], x["workload"], x["queue"], x["reason"]) for x in logs] == [
        ("pending", "ns/a", "cq", "Why"),
        ("pending", "ns/b", "cq", "Why"),
    ], reason
    assert all(
        list(x) == ["component", "workload", "queue", "reason", "message", "event", "log_level"]
        for x in logs
    ), reason


def test_a_released_reports_line() -> None:
    """A held report released later is logged through the module's logger as configured
    then (a capture sees it)."""
    reason = "through the module's logger"
    report = WorkloadPending(
        source="admission",
        workload=WorkloadRef("ns", "a", "u"),
        cluster_queue="cq",
        reason="Why",
        message="msg",
    )
    with captured_logs(decisions) as logs:
        decisions.log_pending(report)
    assert logs == [
        {
            "component": "admission",
            "workload": "ns/a",
            "queue": "cq",
            "reason": "Why",
            "message": "msg",
            "event": "pending",
            "log_level": "info",
        }
    ], reason


def _inadmissible(
    name: str,
    message: str = "2 more needed",
    cluster_queue: str = "cq",
    reason: str = "Pending",
    preemption_may_help: bool = False,
) -> Inadmissible:
    return Inadmissible(
        ref=WorkloadRef("ns", name, name),
        cluster_queue=cluster_queue,
        reason=reason,
        message=message,
        preemption_may_help=preemption_may_help,
    )


# (reason, the pass's waiting decisions, their preempting priorities by name)
ALIKE: list[tuple[str, list[Inadmissible], dict[str, int]]] = [
    ("alike but for the workload: one report each", [_inadmissible("a"), _inadmissible("b")], {}),
    ("another message: its own", [_inadmissible("a"), _inadmissible("b", "3 more")], {}),
    ("another priority: its own", [_inadmissible("a"), _inadmissible("b")], {"b": 5}),
    (
        "another ClusterQueue: its own",
        [_inadmissible("a"), _inadmissible("b", cluster_queue="cq2")],
        {},
    ),
    (
        "another reason: its own",
        [_inadmissible("a"), _inadmissible("b", reason="QuotaReserved")],
        {},
    ),
    (
        "preemption may help one only: its own",
        [_inadmissible("a"), _inadmissible("b", preemption_may_help=True)],
        {},
    ),
    (
        "alike again after another (only the last is kept): made again, the same",
        [_inadmissible("a"), _inadmissible("b", "3 more"), _inadmissible("c")],
        {},
    ),
]


@pytest.mark.parametrize(("reason", "waiting", "priorities"), ALIKE, ids=[c[0] for c in ALIKE])
def test_reports_alike_in_a_pass_are_each_their_own(
    reason: str, waiting: list[Inadmissible], priorities: dict[str, int]
) -> None:
    """A pass's reports alike in all but their workload are made once: each released
    report is its own decision's (workload, ClusterQueue, reason, message, priority,
    whether preemption may help), as if made alone."""
    core = cast(
        Scheduler, SimpleNamespace(preempting_priority=lambda ref: priorities.get(ref.name, 0))
    )
    throttle = PendingThrottle(1.0)
    made = Decisions(core, {}, Gates(), ExecutionLimits(), throttle).events(list(waiting), [])
    # A first report is held, unless preemption may help (then it goes out at once).
    now = [d.ref.name for d in waiting if d.preemption_may_help]
    assert [e.workload.name for e in made] == now, reason
    pending = cast(list[WorkloadPending], made) + throttle.due(time.monotonic() + 2.0)
    released = {e.workload.name: e for e in pending}
    for decision in waiting:
        own = released[decision.ref.name]
        assert own.workload == decision.ref, reason
        said = (own.cluster_queue, own.reason, own.message, own.preemption_may_help)
        wanted = (
            decision.cluster_queue,
            decision.reason,
            decision.message,
            decision.preemption_may_help,
        )
        assert said == wanted, reason
        assert own.priority == priorities.get(decision.ref.name, 0), reason
