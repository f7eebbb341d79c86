"""Recovery's fold of every workload's wait (services/recovery/waiting.py): which workloads get
an ageing clock, and when, from the facts on the bus."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from msgspec.structs import replace

from services.recovery.waiting import Aged, Waits, earlier_totals, least_reserve_after
from shared.config import AgeingPolicy, ClusterQueuePolicy, ClusterQueuePolicySpec, ObjectMeta
from shared.events import (
    AnyEvent,
    PodSet,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
    WorkloadStarted,
    WorkloadSubmitted,
)

REF = WorkloadRef("ns", "w", "u1")
AFTER = 60.0  # reserveAfter


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def submitted(t: float) -> WorkloadSubmitted:
    pod_sets = [PodSet(name="main", count=2, requests={"cpu": 500})]
    return WorkloadSubmitted(id="s", source="watcher", time=at(t), workload=REF, kind="Job",
                             queue_name="lq", pod_sets=pod_sets, created=at(t))  # fmt: skip


def pending(t: float) -> WorkloadPending:
    return WorkloadPending(id="p", source="admission", time=at(t), workload=REF,
                           cluster_queue="cq", reason="Pending", message="")  # fmt: skip


def admitted(t: float, generation: int) -> WorkloadAdmitted:
    return WorkloadAdmitted(id="a", source="admission", time=at(t), workload=REF,
                            cluster_queue="cq", local_queue="lq", priority=0, assignments=[],
                            generation=generation)  # fmt: skip


def evicted(t: float, generation: int) -> WorkloadEvicted:
    return WorkloadEvicted(id="e", source="watcher", time=at(t), workload=REF,
                           generation=generation, reason="Preempted")  # fmt: skip


def finished(t: float) -> WorkloadFinished:
    return WorkloadFinished(id="f", source="watcher", time=at(t), workload=REF, generation=1,
                            succeeded=True)  # fmt: skip


def started() -> WorkloadStarted:
    return WorkloadStarted(id="st", source="watcher", workload=REF, generation=1)


def deleted() -> WorkloadDeleted:
    return WorkloadDeleted(id="d", source="watcher", workload=REF)


def boosted(clock: float) -> PriorityBoosted:
    return PriorityBoosted(id="b", source="recovery", time=at(clock), workload=REF, boost=5,
                           reserved=True, since=at(clock))  # fmt: skip


CASES: list[tuple[str, list[AnyEvent], float, float | None]] = [
    # (why, facts, now, its clock then)
    ("waiting less than reserveAfter: no clock yet",
     [submitted(100), pending(101)], 159.0, None),
    ("waiting reserveAfter since its creation: the creation is its clock",
     [submitted(100), pending(101)], 160.0, 100.0),
    ("admitted before reserveAfter, then evicted: the clock counts from the eviction",
     [submitted(100), pending(101), admitted(120, 1), evicted(200, 1)], 259.0, None),
    ("... and is that eviction once the new wait lasted reserveAfter",
     [submitted(100), pending(101), admitted(120, 1), evicted(200, 1)], 260.0, 200.0),
    ("running: it does not age however long ago it was created",
     [submitted(100), pending(101), admitted(120, 1)], 10_000.0, None),
    ("an eviction of an older run changes nothing",
     [submitted(100), pending(101), admitted(120, 2), evicted(130, 1)], 10_000.0, None),
    ("no ClusterQueue known yet (admission has not queued it): no clock",
     [submitted(100)], 10_000.0, None),
    ("finished: forgotten", [submitted(100), pending(101), finished(150)], 10_000.0, None),
    ("its announced clock, read back at a restart, is kept through a later wait",
     [submitted(100), pending(101), boosted(100), admitted(170, 1), evicted(200, 1)], 201.0,
     100.0),
    ("an announcement for a workload already finished brings back nothing",
     [submitted(100), pending(101), finished(150), boosted(100)], 10_000.0, None),
    # Waits.apply looks a fold up by the event's exact type: kinds it does not fold change
    # nothing, and each guarded kind still passes its guard only.
    ("a start is no fact of its wait (no fold for it): it still ages",
     [submitted(100), pending(101), started()], 160.0, 100.0),
    ("a reservation of quota only is no run: it still ages",
     [submitted(100), pending(101), replace(admitted(120, 1), reserved_only=True)], 160.0,
     100.0),
    ("a pending report from preemption does not queue it",
     [submitted(100), replace(pending(101), source="preemption")], 10_000.0, None),
    ("deleted: forgotten", [submitted(100), pending(101), deleted()], 10_000.0, None),
    ("a boost announced by another service sets no clock",
     [submitted(100), pending(101), replace(boosted(50), source="admission")], 120.0, None),
    ("... one of recovery's own does",
     [submitted(100), pending(101), boosted(50)], 120.0, 50.0),
]


@pytest.mark.parametrize(("why", "facts", "now", "clock"), CASES, ids=[c[0] for c in CASES])
def test_clock_from_the_facts(
    why: str, facts: list[AnyEvent], now: float, clock: float | None
) -> None:
    """Each workload's clock, as recovery sets it at its ageing tick."""
    waits = Waits()
    for fact in facts:
        waits.apply(fact)
        waits.apply(fact)  # idempotent: a redelivery changes nothing
    aged = {w.ref.uid: w.since for w in waits.ageing(now, lambda _: AFTER)}
    assert aged.get("u1") == clock, why
    if clock is not None:
        assert waits.waits["u1"].request == {"cpu": 1000}, "its whole request"


def test_a_clock_is_kept() -> None:
    """Once set, a clock stays: a later admission and eviction do not move it."""
    waits = Waits()
    for fact in (submitted(100), pending(101)):
        waits.apply(fact)
    assert [w.since for w in waits.ageing(200.0, lambda _: AFTER)] == [100.0]
    waits.apply(admitted(210, 1))
    waits.apply(evicted(300, 1))
    assert [w.since for w in waits.ageing(301.0, lambda _: AFTER)] == [100.0]


def test_reservations_off() -> None:
    """reserveAfter null: nothing gets a clock."""
    waits = Waits()
    for fact in (submitted(100), pending(101)):
        waits.apply(fact)
    assert list(waits.ageing(10_000.0, lambda _: None)) == []


def test_earlier_totals() -> None:
    """The share rule counts the clocks of the same ClusterQueue that go first, summed."""
    aged = [
        Aged((2.0, "b"), "cq", {"cpu": 2}),
        Aged((1.0, "a"), "cq", {"cpu": 1}),
        Aged((3.0, "d"), "cq", {"cpu": 8, "memory": 1}),
        Aged((1.0, "c"), "other", {"cpu": 4}),
    ]
    totals = earlier_totals(aged)
    assert totals == {"a": {}, "b": {"cpu": 1}, "d": {"cpu": 3}, "c": {}}


def not_looked_up(queue: str) -> float | None:
    raise AssertionError(f"reserveAfter of {queue} looked up for a wait shorter than the least")


# (why, facts, now, least reserveAfter, its queue's reserveAfter (None: must not be looked
# up), its clock then): Waits.ageing skips the lookup of a wait shorter than every queue's.
LEAST_CASES: list[tuple[str, list[AnyEvent], float, float | None, float | None, float | None]] = [
    ("shorter than the least: no clock, its queue's not looked up",
     [submitted(100), pending(101)], 159.0, 60.0, None, None),
    ("exactly the least: looked up, and its clock",
     [submitted(100), pending(101)], 160.0, 60.0, 60.0, 100.0),
    ("past a shorter least: looked up, its queue's longer one not reached yet",
     [submitted(100), pending(101)], 140.0, 30.0, 60.0, None),
    ("reservations off everywhere (None): no clock, nothing looked up",
     [submitted(100), pending(101)], 10_000.0, None, None, None),
    ("a clock it has stays whatever the least",
     [submitted(100), pending(101), boosted(100)], 110.0, None, None, 100.0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("why", "facts", "now", "least", "after", "clock"), LEAST_CASES, ids=[c[0] for c in LEAST_CASES]
)
def test_waits_shorter_than_the_least_reserve_after_are_not_looked_up(
    why: str,
    facts: list[AnyEvent],
    now: float,
    least: float | None,
    after: float | None,
    clock: float | None,
) -> None:
    waits = Waits()
    for fact in facts:
        waits.apply(fact)
    reserve_after = not_looked_up if after is None else (lambda _: after)
    aged = {w.ref.uid: w.since for w in waits.ageing(now, reserve_after, least=least)}
    assert aged.get("u1") == clock, why


def policy(
    *names: str, reserve_after: str | None = "10m", ageing: bool = True
) -> ClusterQueuePolicy:
    spec = ClusterQueuePolicySpec(
        cluster_queues=list(names),
        ageing=AgeingPolicy(reserve_after=reserve_after) if ageing else None,
    )
    return ClusterQueuePolicy(api_version="berth.dev/v1alpha1", metadata=ObjectMeta(name="p"),
                              spec=spec)  # fmt: skip


LEAST_OF: list[tuple[str, list[ClusterQueuePolicy], float | None]] = [
    ("no policy: the built-in 10m", [], 600.0),
    ("a policy's shorter one", [policy("cq", reserve_after="5m")], 300.0),
    ("a longer one: a queue no policy names keeps the built-in 10m",
     [policy("cq", reserve_after="1h")], 600.0),
    ("off (null) in a policy: the built-in still counts", [policy(reserve_after=None)], 600.0),
    ("a policy without ageing has the built-in ageing", [policy("cq", ageing=False)], 600.0),
    ("the shortest of several", [policy("a", reserve_after="2m"), policy("b", reserve_after="90s")],
     90.0),
]  # fmt: skip


@pytest.mark.parametrize(("why", "policies", "least"), LEAST_OF, ids=[c[0] for c in LEAST_OF])
def test_least_reserve_after(why: str, policies: list[ClusterQueuePolicy], least: float) -> None:
    assert least_reserve_after(policies) == least, why
