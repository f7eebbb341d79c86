"""Offered parked heads (Scheduler.schedule with queues.offer_parked): a parked head that would
fail again exactly as it did, with the same message, is left parked instead of moved and tried.
Every case runs with the shortcut on and off: the decisions and the queues must be the same."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.admission import partial
from services.admission.scheduler import Admission, Inadmissible, QueuedWorkload, Scheduler
from shared.config import ConfigObject
from tests.scheduler_world import config as parse
from tests.scheduler_world import cq, flavor, group, lq, ref, wl
from tests.test_scheduler_fair_sharing import configuration
from tests.test_scheduler_properties import SETTINGS, operation, tree_config, workload

OD = "on-demand"


def world(a_cpu: Any = 4, *extra: dict[str, Any]) -> list[ConfigObject]:
    """ClusterQueues a and b (BestEffortFIFO, 4 cpu each unless told) in cohort co."""
    return parse(
        flavor(OD),
        cq("a", group(["cpu"], (OD, {"cpu": a_cpu})), cohort="co"),
        cq("b", group(["cpu"], (OD, {"cpu": 4})), cohort="co"),
        lq("qa", "a"),
        lq("qb", "b"),
        *extra,
    )


NO_BORROWING = (4, 0, None)  # a's nominal 4, borrowing limit 0
A_FULL = [wl("a1", "qa", cpu=4), wl("b1", "qb", cpu=2)]  # a full, 2 cpu free in the cohort
BIG = [wl("big", "qa", t=1, cpu=2)]
COHORT_FULL = [wl("a1", "qa", cpu=4), wl("b1", "qb", cpu=4)]  # no cpu free in the cohort


@dataclass
class Case:
    reason: str
    documents: list[ConfigObject]
    running: list[QueuedWorkload]  # admitted first
    waiting: list[QueuedWorkload]  # then pending (parked after the second pass)
    change: list[Step]  # between the second and the third pass
    left_parked: int  # offered heads the third pass left parked (shortcut on)
    admitted: list[str]  # the third pass's admissions
    pending: dict[str, str]  # the third pass's new pending messages, by workload (a part)


Step = tuple[str, Any]  # ("finish" | "reserve" | "nominate", name), ("submit", workload),
# ("schedule", None), ("config", objects)


def apply(s: Scheduler, step: Step) -> None:
    kind, value = step
    if kind == "finish":
        s.finish(ref(value))
    elif kind == "submit":
        s.submit(value)
    elif kind == "schedule":
        s.schedule()
    elif kind == "config":
        s.set_config(value)
    elif kind == "reserve":
        s.set_boost(ref(value), 0, reserved=True, since=1.0)
    elif kind == "nominate":
        s.nominate(ref(value))
    else:
        raise ValueError(f"unknown step {kind!r}")


def finish(name: str) -> list[Step]:
    return [("finish", name)]


CASES = [
    Case(
        "another ClusterQueue's release leaves a's reading as it was (a may not borrow, the "
        "cohort's free quota stays at or above what big asks): big is left parked",
        world(NO_BORROWING),
        A_FULL,
        BIG,
        finish("b1"),
        1,
        [],
        {},
    ),
    Case(
        "a release in big's own ClusterQueue changes what it reads: it is tried and fits",
        world(NO_BORROWING),
        A_FULL,
        BIG,
        finish("a1"),
        0,
        ["big"],
        {},
    ),
    Case(
        "the cohort's free quota rises but stays below what big asks: a new message",
        world(),
        [wl("a1", "qa", cpu=4), wl("b1", "qb", cpu=3), wl("b2", "qb", cpu=1)],
        [wl("big", "qa", t=1, cpu=2)],
        finish("b2"),
        0,
        [],
        {"big": "1 more needed"},
    ),
    Case(
        "big's shape failed since with the reading of now (big2, behind it), but big's own "
        "message is from an older reading: it is tried, for its new message",
        world(),
        [wl("a1", "qa", cpu=4), wl("b1", "qb", cpu=2), wl("b2", "qb", cpu=1)],
        [wl("big", "qa", t=1, cpu=3)],
        [
            ("submit", wl("b3", "qb", t=4, cpu=1)),
            ("submit", wl("big2", "qa", t=5, cpu=3)),
            ("schedule", None),
            ("finish", "b2"),
            ("submit", wl("b4", "qb", t=0.5, cpu=1)),
        ],
        0,
        ["b4"],
        {"big": "3 more needed"},
    ),
    Case(
        "n1 (ahead of p1 and p2, their shape) is admitted while p1 is offered: p1 counted as "
        "queued already, so p2 is released too; both get the new message",
        world(),
        COHORT_FULL,
        [wl("p1", "qa", t=5, cpu=3), wl("p2", "qa", t=6, cpu=3)],
        [("finish", "a1"), ("submit", wl("n1", "qa", t=1, cpu=3))],
        0,
        ["n1"],
        {"p1": "2 more needed", "p2": "2 more needed"},
    ),
    Case(
        "a reserved head blocks a (its release was spent elsewhere): what was offered behind "
        "it is queued again at the end of the pass, as moving it would have left it",
        world(NO_BORROWING),
        [wl("a1", "qa", cpu=4), wl("b1", "qb", cpu=2)],
        [wl("p1", "qa", t=5, cpu=1), wl("p2", "qa", t=6, cpu=2)],
        [
            ("submit", wl("r", "qa", t=7, cpu=3)),
            ("schedule", None),
            ("reserve", "r"),
            *finish("b1"),
        ],
        0,
        [],
        {},
    ),
    Case(
        "the quota changed (a new configuration): nothing is parked, big is tried and fits",
        world(NO_BORROWING),
        A_FULL,
        BIG,
        [("config", world((6, 0, None))), *finish("b1")],
        0,
        ["big"],
        {},
    ),
    Case(
        "a reserved head blocks its queue rather than park: it is tried as it is",
        world(NO_BORROWING),
        A_FULL,
        BIG,
        [("reserve", "big"), *finish("b1")],
        0,
        [],
        {},
    ),
    Case(
        "a nominated head (its victims leaving) is tried as it is",
        world(NO_BORROWING),
        A_FULL,
        BIG,
        [("nominate", "big"), *finish("b1")],
        0,
        [],
        {},
    ),
    Case(
        "fair sharing on: heads are moved and tried (the shortcut is off)",
        world(NO_BORROWING, configuration()),
        A_FULL,
        BIG,
        finish("b1"),
        0,
        [],
        {},
    ),
    Case(
        "two shapes parked in a; the release lets the small one borrow, and changes what the "
        "big one (tried first) reads: both tried",
        world(),
        COHORT_FULL,
        [wl("big", "qa", t=1, cpu=5), wl("small", "qa", t=2, cpu=1)],
        finish("b1"),
        0,
        ["small"],
        {"big": "1 more needed"},
    ),
]


def run(case: Case, offers: bool) -> tuple[list[list[Any]], list[Any], int]:
    """The case's three passes on workloads of its own (the scheduler changes the ones it
    is handed: nominated, reserved), so no run sees another's."""
    case = copy.deepcopy(case)
    s = Scheduler()
    s.offers = offers
    s.set_config(case.documents)
    passes = []
    for running in case.running:
        s.submit(running)
    passes.append(s.schedule())
    for waiting in case.waiting:
        s.submit(waiting)
    passes.append(s.schedule())
    for step in case.change:
        apply(s, step)
    passes.append(s.schedule())
    return passes, [s.workload_views(), s.queue_stats()], s.left_parked


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason[:60])
def test_offered_heads(case: Case) -> None:
    passes, views, left = run(case, offers=True)
    assert (passes, views) == run(case, offers=False)[:2], case.reason
    assert left == case.left_parked, case.reason
    last = passes[-1]
    assert [d.ref.name for d in last if isinstance(d, Admission)] == case.admitted, case.reason
    notes = {d.ref.name: d.message for d in last if isinstance(d, Inadmissible)}
    assert notes.keys() == case.pending.keys(), (case.reason, notes)
    for name, part in case.pending.items():
        assert part in notes[name], (case.reason, notes[name])


# Events for the lockstep tests (test_settled_failures uses them too).
OPS = st.lists(
    st.one_of(
        operation,
        st.tuples(st.just("nominate"), st.integers(0, 1000)),
        st.tuples(st.just("reserve"), st.integers(0, 1000)),
        # What the shortcut is for: quota freed and taken again by the same shape.
        st.tuples(st.just("churn"), st.integers(0, 1000)),
        st.tuples(st.just("churn"), st.integers(0, 1000)),
    ),
    min_size=10,
    max_size=40,
)


@SETTINGS
@given(
    configs=st.lists(tree_config(), min_size=1, max_size=2),
    ops=OPS,
)
def test_offers_decide_as_moving_every_head(
    configs: list[list[ConfigObject]], ops: list[tuple[Any, ...]]
) -> None:
    """Under any sequence of events (borrowing and lending limits, hierarchies, StrictFIFO,
    configuration changes, nominations, reservations), the shortcut decides as without it.
    ``churn``: an admitted workload finishes and one of the same shape and ClusterQueue, of
    the highest priority, takes its place in the next pass, so that the others read the usage
    they read before (a few passes of the examples leave heads parked; the cases above
    pin each way it applies or must not)."""
    schedulers = [Scheduler(), Scheduler()]
    schedulers[1].offers = False
    lockstep(schedulers, configs, ops)


def lockstep(
    schedulers: list[Scheduler], configs: list[list[ConfigObject]], ops: list[tuple[Any, ...]]
) -> None:
    """Apply ``ops`` to both ``schedulers``; they must decide and queue alike throughout."""
    for s in schedulers:
        s.set_config(configs[0])
    count = config_index = 0
    shapes: dict[str, tuple[int, int]] = {}  # workload -> (LocalQueue index, cpu)
    for op in ops:
        views = schedulers[0].workload_views()
        admitted = [v.ref for v in views if v.state == "admitted"]
        waiting = [v.ref for v in views if v.state == "pending"]
        known = [v.ref for v in views]
        if op[0] == "submit":
            for s in schedulers:
                s.submit(workload(count, op[1], op[2], op[3]))
            shapes[f"w{count}"] = (op[1], op[2])
            count += 1
        elif op[0] == "schedule" or (op[0] == "churn" and admitted):
            if op[0] == "churn":
                gone = admitted[op[1] % len(admitted)]
                for s in schedulers:
                    s.finish(gone)
                    s.submit(workload(count, *shapes[gone.name], 3))
                shapes[f"w{count}"] = shapes[gone.name]
                count += 1
            assert schedulers[0].schedule() == schedulers[1].schedule()
        elif op[0] in ("finish", "evict") and admitted:
            for s in schedulers:
                (s.finish if op[0] == "finish" else s.evict)(admitted[op[1] % len(admitted)])
        elif op[0] == "delete" and known:
            for s in schedulers:
                s.delete(known[op[1] % len(known)])
        elif op[0] == "config" and len(configs) > 1:
            config_index = (config_index + 1) % len(configs)
            for s in schedulers:
                s.set_config(configs[config_index])
        elif op[0] == "nominate" and waiting:
            for s in schedulers:
                s.nominate(waiting[op[1] % len(waiting)])
        elif op[0] == "reserve" and waiting:
            for s in schedulers:
                s.set_boost(waiting[op[1] % len(waiting)], 1, reserved=True, since=float(op[1]))
        first, second = ((s.workload_views(), s.queue_stats()) for s in schedulers)
        assert first == second


@dataclass
class Raising:
    reason: str
    case: Case  # its world, passes and change; then a pass whose first flavor search raises
    after: list[Step]  # then, before the pass compared with the shortcut off


RAISING = [
    Raising(
        "big is offered, taken to be tried (the cohort's free quota rose: a reading not "
        "remembered) and its search raises: nothing is left offered, and the taken record, "
        "never parked back, is forgotten (release_offered)",
        CASES[2],
        [("submit", wl("late", "qa", t=9, cpu=1)), ("finish", "b1")],
    ),
    Raising(
        "big and small offered; big, taken first, raises: small, still offered, is queued "
        "again (release_offered), as moving every head would have left it",
        CASES[10],
        [("submit", wl("late", "qa", t=9, cpu=1))],
    ),
]


def _after_a_failed_pass(
    raising: Raising, offers: bool
) -> tuple[list[Any], list[Any], list[Any], bool]:
    """``raising``'s passes, the one that raises, its steps after and a pass: that pass's
    decisions, the views, what the queues hold of offers after the pass that raised, and
    whether it raised with an offered record taken (the offered path)."""
    case = copy.deepcopy(raising.case)
    s = Scheduler()
    s.offers = offers
    s.set_config(case.documents)
    for running in case.running:
        s.submit(running)
    s.schedule()
    for waiting in case.waiting:
        s.submit(waiting)
    s.schedule()
    for step in case.change:
        apply(s, step)
    taken: list[bool] = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        taken.append(any(queue._taken is not None for queue in s._queues.values()))
        raise RuntimeError("a bug in the flavor search")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partial, "assign", broken)
        with pytest.raises(RuntimeError):
            s.schedule()
    left = [
        (name, queue.offered, queue._taken)
        for name, queue in s._queues.items()
        if queue.offered or queue._taken is not None
    ]
    for step in copy.deepcopy(raising.after):
        apply(s, step)
    return s.schedule(), [s.workload_views(), s.queue_stats()], left, taken == [True]


@pytest.mark.parametrize("raising", RAISING, ids=lambda r: r.reason[:60])
def test_a_pass_that_raises_leaves_no_offer(raising: Raising) -> None:
    """A pass cut short by an exception on the offered path (after an offered record was
    taken) leaves nothing offered or taken behind for a later pass to read as current, and
    the next pass decides as without the shortcut."""
    decisions, views, left, on_offered_path = _after_a_failed_pass(raising, offers=True)
    assert on_offered_path, f"else the case proves nothing: {raising.reason}"
    assert left == [], raising.reason
    assert (decisions, views) == _after_a_failed_pass(raising, offers=False)[:2], raising.reason
