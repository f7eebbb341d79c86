"""Preemption and ageing: reservations, runs ageing brought back, preemption budgets
(services/preemption/deciding.py on a folded Cluster)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.preemption.cluster import Cluster
from services.preemption.deciding import decide
from services.preemption.victims import NO_CANDIDATES
from shared.config import ClusterQueuePolicy, parse_object
from shared.events import (
    AnyEvent,
    ContestedResource,
    EvictionRequested,
    FlavorAssignment,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPending,
    WorkloadRef,
)
from tests.victims_search import cq


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _ref(name: str) -> WorkloadRef:
    return WorkloadRef("default", name, name)


def world() -> Cluster:
    """One 4-CPU ClusterQueue preempting lower priorities; protectFor 10s, budget 2/hour."""
    policy = parse_object(
        {
            "apiVersion": "berth.dev/v1alpha1",
            "kind": "ClusterQueuePolicy",
            "metadata": {"name": "p"},
            "spec": {"maxPreemptionsPerHour": 2, "ageing": {"protectFor": "10s"}},
        }
    )
    assert isinstance(policy, ClusterQueuePolicy)
    cluster = Cluster()
    cluster.set_config([cq("cq", {"rf/cpu": 4}, within="LowerPriority"), policy])
    return cluster


def fold(cluster: Cluster, *events: AnyEvent) -> None:
    for event in events:
        cluster.apply(event)


def admitted(name: str, cpus: int, priority: int, at: float, generation: int = 1) -> AnyEvent:
    return WorkloadAdmitted(
        source="admission",
        time=_at(at),
        workload=_ref(name),
        cluster_queue="cq",
        local_queue="lq",
        priority=priority,
        assignments=[FlavorAssignment("main", 1, {"cpu": "rf"}, {"cpu": cpus * 1000})],
        generation=generation,
    )


def aged(name: str, since: float, *, boost: int = 0, reserved: bool = False) -> AnyEvent:
    return PriorityBoosted(
        source="recovery", workload=_ref(name), boost=boost, reserved=reserved, since=_at(since)
    )


def asks(name: str, cpus: int, priority: int) -> AnyEvent:
    return WorkloadPending(
        source="admission",
        workload=_ref(name),
        cluster_queue="cq",
        reason="Pending",
        message="insufficient unused quota",
        priority=priority,
        preemption_may_help=True,
        contested=[ContestedResource("rf", "cpu", cpus * 1000)],
    )


def preempted(name: str, generation: int, at: float, by: str = "someone") -> list[AnyEvent]:
    return [
        EvictionRequested(
            source="preemption",
            time=_at(at),
            workload=_ref(name),
            cluster_queue="cq",
            generation=generation,
            reason="Preempted",
            preemptor=_ref(by),
        ),
        WorkloadEvicted(
            source="watcher", time=_at(at), workload=_ref(name), generation=generation,
            reason="Preempted",
        ),
    ]  # fmt: skip


def victims(cluster: Cluster, name: str, wall: float) -> set[str]:
    return {v.workload.ref.name for v in decide(cluster, name, wall).victims}


def test_a_reservation_preempts_whatever_the_priority() -> None:
    """A waiting reservation takes room from a higher priority once it is unprotected."""
    cluster = world()
    fold(cluster, admitted("high", 4, 1000, at=0), aged("w", 10, reserved=True), asks("w", 2, 100))
    decision = decide(cluster, "w", 100)
    assert {v.workload.ref.name for v in decision.victims} == {"high"} and decision.reservation


def test_a_reservation_never_preempts_an_earlier_clock() -> None:
    """The workload that started ageing first keeps its run: no back and forth."""
    cluster = world()
    fold(cluster, aged("first", 5), admitted("first", 4, 100, at=50))
    fold(cluster, aged("w", 10, reserved=True), asks("w", 2, 100))
    assert decide(cluster, "w", 100).message == NO_CANDIDATES


def test_a_later_clock_waits_for_its_protection() -> None:
    """A run of a later clock is protected for protectFor, then the reservation takes it."""
    cluster = world()
    fold(cluster, aged("later", 20), admitted("later", 4, 100, at=95))
    fold(cluster, aged("w", 10, reserved=True), asks("w", 2, 100))
    waiting = decide(cluster, "w", 100)
    assert not waiting.victims and waiting.retry_at == 105
    assert "protected by the minimum run time" in waiting.message
    assert victims(cluster, "w", 106) == {"later"}


def test_other_preemptors_wait_behind_a_reservation() -> None:
    """Only the earliest reservation of a ClusterQueue gets victims there."""
    cluster = world()
    fold(cluster, admitted("low", 4, 1, at=0), asks("high", 2, 1000))
    fold(cluster, aged("w", 10, reserved=True), asks("w", 2, 100))
    fold(cluster, aged("w2", 20, reserved=True), asks("w2", 2, 100))
    assert "ageing reservation" in decide(cluster, "high", 100).message
    assert "ageing reservation" in decide(cluster, "w2", 100).message
    assert victims(cluster, "w", 100) == {"low"}


def test_the_budget_shields_from_priority_not_from_a_reservation() -> None:
    """Preempted twice this hour: no priority preemption, but a reservation may."""
    cluster = world()
    fold(cluster, admitted("low", 4, 1, at=0, generation=1), *preempted("low", 1, at=10))
    fold(cluster, admitted("low", 4, 1, at=20, generation=2), *preempted("low", 2, at=30))
    fold(cluster, admitted("low", 4, 1, at=40, generation=3), asks("high", 2, 1000))
    shielded = decide(cluster, "high", 100)
    assert not shielded.victims and "preemption budget" in shielded.message
    assert shielded.retry_at == 10 + 3600
    fold(cluster, aged("w", 50, reserved=True), asks("w", 2, 100))
    assert victims(cluster, "w", 100) == {"low"}


def test_a_boost_shields_a_run_only_while_it_is_protected() -> None:
    """A run ageing brought back: protected for protectFor, then at its base priority."""
    cluster = world()
    fold(cluster, aged("back", 1, boost=5000), admitted("back", 4, 5100, at=50))
    fold(cluster, asks("high", 2, 1000))
    assert decide(cluster, "high", 55).retry_at == 60
    assert victims(cluster, "high", 61) == {"back"}


def test_a_preemptor_does_not_evict_the_same_workload_twice() -> None:
    """Made to wait again (a reservation took its room), a preemptor takes another victim,
    though Kueue's order (then UID) would pick the one it already evicted."""
    cluster = world()
    for name, by in (("low", "high"), ("other", "someone")):  # alike but for who evicted it
        fold(cluster, admitted(name, 2, 1, at=0, generation=1), *preempted(name, 1, 10, by))
        fold(cluster, admitted(name, 2, 1, at=40, generation=2))
    fold(cluster, asks("high", 2, 1000))
    assert victims(cluster, "high", 100) == {"other"}
