"""The pure admission core (services.admission.scheduler), one rule per test: borrowing
that yields to a waiting higher-priority workload, and wait targets (deadlines) ordering
the queue."""

from __future__ import annotations

from typing import Any

from services.admission.scheduler import QueuedWorkload, Scheduler
from tests.scheduler_world import (
    admitted,
    config,
    cq,
    flavor,
    group,
    lq,
    pending,
    ref,
    scheduler,
    simple,
    wl,
)


def berth_configuration(**admission: Any) -> dict[str, Any]:
    return {
        "apiVersion": "berth.dev/v1alpha1",
        "kind": "Configuration",
        "metadata": {"name": "berth"},
        "spec": {"admission": admission},
    }


def _cohort_with_a_waiter(waiter: QueuedWorkload, **admission: Any) -> Scheduler:
    """Cohort c: a and b with 4 CPU each. a-run (2) and b-run (3) are admitted; then
    ``waiter`` (4 CPU) waits in a, which has only 3 CPU it could use."""
    documents = [
        flavor("f"),
        cq("a", group(["cpu"], ("f", {"cpu": 4})), cohort="c"),
        cq("b", group(["cpu"], ("f", {"cpu": 4})), cohort="c"),
        lq("qa", "a"),
        lq("qb", "b"),
    ]
    if admission:
        documents.append(berth_configuration(**admission))
    s = scheduler(
        config(*documents), wl("a-run", "qa", cpu="2", t=1), wl("b-run", "qb", cpu="3", t=2)
    )
    assert admitted(s.schedule()) == ["a-run", "b-run"]
    s.submit(waiter)
    assert "1 more needed" in pending(s.schedule())[waiter.ref.name].message
    return s


def _yield_setup(yields: bool) -> Scheduler:
    admission = {"borrowingYieldsToHigherPriority": True} if yields else {}
    return _cohort_with_a_waiter(wl("big", "qa", cpu="4", t=3, priority=10), **admission)


def test_by_default_a_lower_priority_workload_borrows_the_room_a_higher_one_waits_for() -> None:
    """Kueue's BestEffortFIFO: whatever fits is admitted."""
    s = _yield_setup(yields=False)
    s.submit(wl("borrower", "qb", cpu="2", t=4))
    assert admitted(s.schedule()) == ["borrower"]


def test_borrowing_yields_to_a_waiting_higher_priority_workload() -> None:
    """Opt-in: a lower-priority workload may use its own nominal quota, not borrow the room a
    higher-priority one of the cohort waits for; it is retried when that one is admitted."""
    s = _yield_setup(yields=True)
    s.submit(wl("borrower", "qb", cpu="2", t=4))
    s.submit(wl("own", "qb", cpu="1", t=5))
    decisions = s.schedule()
    assert admitted(decisions) == ["own"]
    assert "priority 10 waits for quota in cohort c" in pending(decisions)["borrower"].message
    s.finish(ref("a-run"))
    assert admitted(s.schedule()) == ["big"]
    s.finish(ref("b-run"))
    assert admitted(s.schedule()) == ["borrower"]


def test_borrowing_does_not_yield_to_an_equal_priority() -> None:
    s = _yield_setup(yields=True)
    s.submit(wl("peer", "qb", cpu="2", t=4, priority=10))
    assert admitted(s.schedule()) == ["peer"]


# Larges (priority 200) are due 1 s after creation, everything else 25 s after.
TARGETS: list[dict[str, Any]] = [{"minPriority": 200, "wait": "1s"}, {"wait": "25s"}]


def one_at_a_time(targets: list[dict[str, Any]], *queued: tuple[str, float, int]) -> list[str]:
    """The order in which ``queued`` (name, queue time, priority), each taking the whole
    4 CPU ClusterQueue, get in, one finishing after the other."""
    objects = simple(cpu=4) + config(berth_configuration(waitTargets=targets))
    s = scheduler(objects, wl("running", cpu="4", t=0))
    assert admitted(s.schedule()) == ["running"]
    for name, t, priority in queued:
        s.submit(wl(name, cpu="4", t=t, priority=priority))
    assert admitted(s.schedule()) == []
    order: list[str] = []
    for _ in queued:
        s.finish(ref(order[-1] if order else "running"))
        order += admitted(s.schedule())
    return order


def test_wait_targets_order_by_deadline_not_priority() -> None:
    """An old low-priority workload is due before a large created 30 s later, and goes first;
    a large created before it was due goes before it."""
    order = one_at_a_time(
        TARGETS,
        ("old-small", 1, 50),  # due at 26
        ("late-large", 30, 200),  # due at 31
        ("early-large", 20, 200),  # due at 21
    )
    assert order == ["early-large", "old-small", "late-large"]


def test_a_workload_no_target_covers_queues_after_every_covered_one() -> None:
    order = one_at_a_time(
        [{"minPriority": 100, "wait": "10s"}],
        ("uncovered-high", 1, 99),
        ("uncovered-low", 0, 1),
        ("covered", 50, 100),  # due at 60
    )
    assert order == ["covered", "uncovered-high", "uncovered-low"]


def test_with_wait_targets_borrowing_yields_to_an_earlier_deadline() -> None:
    """Yielding goes by deadline: a large created at 30 (due at 31) does not borrow the room
    a small due at 28 waits for, though its priority is higher."""
    s = _cohort_with_a_waiter(
        wl("small", "qa", cpu="4", t=3, priority=50),  # due at 28
        borrowingYieldsToHigherPriority=True,
        waitTargets=TARGETS,
    )
    s.submit(wl("late-large", "qb", cpu="2", t=30, priority=200))  # would borrow 1 CPU
    decisions = s.schedule()
    assert admitted(decisions) == []
    assert "priority 50 due earlier waits for quota in cohort c" in (
        pending(decisions)["late-large"].message
    )
    s.finish(ref("a-run"))
    assert admitted(s.schedule()) == ["small"]
    s.finish(ref("b-run"))
    assert admitted(s.schedule()) == ["late-large"]
