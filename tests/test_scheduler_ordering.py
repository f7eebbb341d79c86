"""The pure admission core (services.admission.scheduler), one rule per test: priorities,
the order of pending workloads and the queueing strategies."""

from __future__ import annotations

from typing import Any

import pytest

from services.admission.queues import MINUS_PRIORITY, order_key
from services.admission.scheduler import Admission
from shared.events import WorkloadSubmitted, now
from tests.scheduler_world import (
    admitted,
    config,
    cq,
    flavor,
    group,
    lq,
    pc,
    pending,
    ref,
    scheduler,
    simple,
    wl,
    wpc,
)

# --- priorities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"priority_class": "wpc", "priority_class_name": "pc", "priority": 7}, 500),
        ({"priority_class_name": "pc", "priority": 7}, 300),
        ({"priority": 7}, 7),
        ({}, 50),
    ],
)
def test_priority_resolution_order(fields: dict[str, Any], expected: int) -> None:
    """WorkloadPriorityClass, then PriorityClass, then direct priority, then globalDefault."""
    objects = simple() + config(wpc("wpc", 500), pc("pc", 300), pc("default", 50, default=True))
    s = scheduler(objects, wl("w", cpu="1", **fields))
    decision = s.schedule()[0]
    assert isinstance(decision, Admission)
    assert decision.priority == expected


# (the submitted workload's priority fields, what class_priority says, why)
CLASS_PRIORITY_CASES = [
    ({"priority_class": "wpc"}, 500, "a WorkloadPriorityClass's value"),
    ({"priority_class_name": "pc", "priority": 7}, 300, "a PriorityClass before the pod's priority"),
    ({}, 0, "no class and no globalDefault: 0"),
    ({"priority_class": "gone"}, None, "a class that does not exist: none, not 0"),
]


@pytest.mark.parametrize(
    ("fields", "expected", "why"), CLASS_PRIORITY_CASES, ids=[c[2] for c in CLASS_PRIORITY_CASES]
)
def test_class_priority_of_a_workload_it_does_not_hold(
    fields: dict[str, Any], expected: int | None, why: str
) -> None:
    """What an inactive workload (not queued) shows: its priority as its class resolves."""
    s = scheduler(simple() + config(wpc("wpc", 500), pc("pc", 300)))
    submitted = WorkloadSubmitted(
        source="watcher",
        workload=ref("w"),
        kind="Job",
        queue_name="user-queue",
        pod_sets=[],
        created=now(),
        **fields,
    )
    assert s.class_priority(submitted) == expected, why


def test_priority_defaults_to_zero() -> None:
    """Without any class or globalDefault the priority is 0."""
    s = scheduler(simple(), wl("w", cpu="1"))
    assert s.workload_views()[0].priority == 0


def test_set_config_re_resolves_pending_priorities() -> None:
    """A WorkloadPriorityClass added later makes its pending workloads admissible."""
    s = scheduler(simple(), wl("w", cpu="1", priority_class="gold"))
    assert "gold" in pending(s.schedule())["w"].message
    s.set_config(simple() + config(wpc("gold", 9)))
    decision = s.schedule()[0]
    assert isinstance(decision, Admission) and decision.priority == 9


# --- ordering and queueing strategies ---------------------------------------------------------


def test_order_priority_then_queue_time_then_uid() -> None:
    """Higher priority first, then older, then uid."""
    s = scheduler(
        simple(cpu=3, strategy="StrictFIFO"),
        wl("late", cpu="1", t=5, priority=1),
        wl("old", cpu="1", t=1),
        wl("high", cpu="1", t=9, priority=10),
        wl("b-same", cpu="1", t=2),
        wl("a-same", cpu="1", t=2),
    )
    assert admitted(s.schedule()) == ["high", "late", "old"]
    positions = {v.ref.name: v.position_in_cluster_queue for v in s.workload_views()}
    assert positions["a-same"] == 0 and positions["b-same"] == 1


@pytest.mark.parametrize(
    ("priority", "why"),
    [
        (300, "beyond the ints Python keeps once: the keys share the one negated value"),
        (-1000, "a negative priority too"),
        (5, "-5 is an int Python keeps once anyway: the table changes nothing"),
    ],
)
def test_keys_share_their_negated_priority(priority: int, why: str) -> None:
    first = order_key(priority, 1.0, "uid-a")
    second = order_key(int(str(priority)), 2.0, "uid-b")  # an equal int, not the same one
    assert first[MINUS_PRIORITY] == -priority, why
    assert first[MINUS_PRIORITY] is second[MINUS_PRIORITY], why
    assert first < second, "still ordered by queue time among equals"


def test_strict_fifo_head_blocks_the_queue() -> None:
    """StrictFIFO: a head that does not fit blocks smaller workloads behind it."""
    s = scheduler(
        simple(cpu=4, strategy="StrictFIFO"),
        wl("a", cpu="3", t=1),
        wl("big", cpu="4", t=2),
        wl("small", cpu="1", t=3),
    )
    decisions = s.schedule()
    assert admitted(decisions) == ["a"]
    assert set(pending(decisions)) == {"big"}
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["big"]


def test_best_effort_fifo_lets_smaller_ones_pass() -> None:
    """BestEffortFIFO: a head that does not fit steps aside for later ones that do."""
    s = scheduler(
        simple(cpu=4), wl("a", cpu="3", t=1), wl("big", cpu="4", t=2), wl("small", cpu="1", t=3)
    )
    decisions = s.schedule()
    assert admitted(decisions) == ["a", "small"]
    assert set(pending(decisions)) == {"big"}


def test_parked_workload_is_retried_after_quota_release() -> None:
    """A parked BestEffortFIFO workload is retried once quota is released."""
    s = scheduler(simple(cpu=4), wl("a", cpu="4", t=1), wl("b", cpu="4", t=2))
    s.schedule()
    assert s.schedule() == []
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b"]


def test_new_higher_priority_workload_unblocks_strict_fifo() -> None:
    """A new head in a blocked StrictFIFO queue is tried at once."""
    s = scheduler(
        simple(cpu=4, strategy="StrictFIFO"), wl("a", cpu="3", t=1), wl("big", cpu="4", t=2)
    )
    s.schedule()
    s.submit(wl("urgent", cpu="1", t=3, priority=5))
    assert admitted(s.schedule()) == ["urgent"]


def test_boost_reorders_pending() -> None:
    """set_boost raises the effective priority of a pending workload."""
    s = scheduler(
        simple(cpu=1, strategy="StrictFIFO"),
        wl("x", cpu="2", t=0),
        wl("a", cpu="1", t=1),
        wl("b", cpu="1", t=2),
    )
    s.schedule()
    s.set_boost(ref("b"), 10)
    view = {v.ref.name: v for v in s.workload_views()}
    assert view["b"].effective_priority == 10 and view["b"].priority == 0
    assert admitted(s.schedule()) == ["b"]


def test_decisions_are_emitted_only_on_change() -> None:
    """An unchanged pending reason is not emitted twice."""
    s = scheduler(simple(cpu=1), wl("a", cpu="1", t=1), wl("b", cpu="1", t=2))
    assert set(pending(s.schedule())) == {"b"}
    s.submit(wl("c", cpu="1", t=3))
    assert set(pending(s.schedule())) == {"c"}
    s.set_config(simple(cpu=1))
    assert s.schedule() == []


def test_one_pass_admits_across_cluster_queues_in_priority_order() -> None:
    """One pass admits everything that fits across queues, highest priority first."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 2})), cohort="c"),
        cq("y", group(["cpu"], ("f", {"cpu": 0})), cohort="c"),
        lq("qx", "x"),
        lq("qy", "y"),
    )
    s = scheduler(
        objects,
        wl("low", "qx", cpu="1", t=1),
        wl("high", "qy", cpu="1", t=2, priority=9),
        wl("mid", "qx", cpu="1", t=3, priority=5),
    )
    assert admitted(s.schedule()) == ["mid", "low"]


def test_non_borrowing_heads_go_first() -> None:
    """Among heads, one that needs no borrowing is admitted before a borrowing one."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 1})), cohort="c"),
        cq("y", group(["cpu"], ("f", {"cpu": 1})), cohort="c"),
        lq("qx", "x"),
        lq("qy", "y"),
    )
    s = scheduler(
        objects, wl("borrower", "qx", cpu="2", t=1, priority=9), wl("modest", "qy", cpu="1", t=2)
    )
    assert admitted(s.schedule()) == ["modest"]


def test_strict_fifo_not_broken_by_global_order() -> None:
    """Within a StrictFIFO queue nothing passes a blocked head even with other queues active."""
    objects = config(
        flavor("f"),
        cq("x", group(["cpu"], ("f", {"cpu": 2})), queueingStrategy="StrictFIFO"),
        cq("y", group(["cpu"], ("f", {"cpu": 2}))),
        lq("qx", "x"),
        lq("qy", "y"),
    )
    s = scheduler(
        objects,
        wl("x-big", "qx", cpu="3", t=1),
        wl("x-small", "qx", cpu="1", t=2),
        wl("y", "qy", cpu="1", t=3),
    )
    assert admitted(s.schedule()) == ["y"]


def test_parked_workloads_of_one_shape_are_retried_one_after_another() -> None:
    """A release retries the first parked workload of each shape; each admission releases
    the next of its shape, so everything that fits still gets in, in queue order."""
    s = scheduler(simple(cpu=4), wl("a", cpu="4", t=1))
    assert admitted(s.schedule()) == ["a"]
    for name, cpu, t in [("b1", "1", 2), ("b2", "1", 3), ("c", "2", 4), ("b3", "1", 5)]:
        s.submit(wl(name, cpu=cpu, t=t))
    assert admitted(s.schedule()) == []
    views = {v.ref.name: v for v in s.workload_views()}
    assert [views[n].position_in_cluster_queue for n in ("b1", "b2", "c", "b3")] == [0, 1, 2, 3]
    s.finish(ref("a"))
    assert admitted(s.schedule()) == ["b1", "b2", "c"]
    s.finish(ref("c"))
    assert admitted(s.schedule()) == ["b3"]
