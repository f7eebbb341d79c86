"""Preemption's fold by event type (Cluster.apply looks an event's fold up by its exact
type) and the touched-queue bookkeeping it skips when no reservation can be looked at
(services.preemption.service.touches_reservations)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest

from services.preemption.cluster import Cluster
from services.preemption.model import Running
from services.preemption.service import PreemptionService, touches_reservations
from shared.events import (
    AdmissionCheckUpdated,
    AnyEvent,
    EvictionRequested,
    FlavorAssignment,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadPodsReady,
    WorkloadStarted,
    WorkloadSubmitted,
)
from shared.service import Runtime
from tests.test_preemption_due import pending, reserved
from tests.test_preemption_holds import CPU, admit, ask, deleted, evict, evicted, finished, ref
from tests.victims_search import cq

CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def submitted(name: str) -> AnyEvent:
    return WorkloadSubmitted(
        source="watcher",
        workload=ref(name),
        kind="Job",
        queue_name="lq",
        pod_sets=[],
        created=CREATED,
    )


def boost(name: str, *, granted: bool) -> AnyEvent:
    return PriorityBoosted(
        source="recovery", workload=ref(name), boost=5, reserved=granted, since=CREATED
    )


def folded(events: list[AnyEvent]) -> Cluster:
    """A cluster of one ClusterQueue ``a`` that has folded ``events``."""
    cluster = Cluster()
    cluster.set_config([cq("a", {"rf/cpu": 4})])
    for event in events:
        cluster.apply(event)
    return cluster


def books(cluster: Cluster) -> tuple[Any, ...]:
    """Everything the fold keeps, comparable."""
    return (
        dict(cluster.running),
        dict(cluster.generations),
        dict(cluster.queue_times),
        dict(cluster.waiting),
        {uid: set(flight.victims) for uid, flight in cluster.in_flight.items()},
        dict(cluster.victim_of),
        set(cluster.reserved),
        dict(cluster.since),
        dict(cluster.boosts),
        {uid: dict(at) for uid, at in cluster.preempted_at.items()},
        dict(cluster.queue_of),
        dict(cluster.tree.usage("a")),
    )


@dataclass(frozen=True)
class FoldCase:
    why: str
    before: list[AnyEvent]
    event: AnyEvent
    changes: bool  # whether folding ``event`` changes what the cluster keeps


FOLD_CASES = {
    "submitted": FoldCase(
        "A submission gives the workload its queue time.", [], submitted("w"), True
    ),
    "admitted": FoldCase("An admission makes a running workload.", [], admit("w", "a", 1), True),
    "pending": FoldCase("A request preemption may help waits.", [], ask("p", "a", 1), True),
    "pending_of_preemption": FoldCase(
        "Preemption's own 'cannot help' report changes nothing.",
        [],
        msgspec.structs.replace(ask("p", "a", 1), source="preemption"),
        False,
    ),
    "evicted": FoldCase(
        "An eviction of the running generation frees its room.",
        [admit("w", "a", 1)],
        evicted("w"),
        True,
    ),
    "evicted_old_generation": FoldCase(
        "An eviction of an older generation changes nothing.",
        [admit("w", "a", 1, generation=2)],
        evicted("w", generation=1),
        False,
    ),
    "finished": FoldCase("A finish frees its room.", [admit("w", "a", 1)], finished("w"), True),
    "deleted": FoldCase(
        "A deletion forgets the workload.", [admit("w", "a", 1)], deleted("w"), True
    ),
    "eviction_requested": FoldCase(
        "An eviction request makes a victim of a running workload.",
        [admit("v", "a", 1), ask("p", "a", 1)],
        evict("v", "a", "p"),
        True,
    ),
    "boosted": FoldCase("A boost is kept with its clock.", [], boost("w", granted=False), True),
    "started": FoldCase(
        "A start holds the quota its admission held: nothing to fold.",
        [admit("w", "a", 1)],
        WorkloadStarted(source="watcher", workload=ref("w"), generation=1),
        False,
    ),
    "pods_ready": FoldCase(
        "Pod readiness is not preemption's to fold.",
        [admit("w", "a", 1)],
        WorkloadPodsReady(source="watcher", workload=ref("w"), generation=1),
        False,
    ),
    "check": FoldCase(
        "An admission check's answer is not preemption's to fold.",
        [],
        AdmissionCheckUpdated(
            source="checks", workload=ref("w"), check="c", state="Ready", generation=1
        ),
        False,
    ),
}


@pytest.mark.parametrize("name", FOLD_CASES)
def test_each_kind_of_event_folds_as_its_case(name: str) -> None:
    case = FOLD_CASES[name]
    cluster = folded(case.before)
    before = books(cluster)
    cluster.apply(case.event)
    assert (books(cluster) != before) == case.changes, case.why
    cluster.apply(case.event)  # idempotent: a redelivery changes nothing more
    again = books(cluster)
    cluster.apply(case.event)
    assert books(cluster) == again, case.why


@dataclass(frozen=True)
class TouchCase:
    why: str
    before: list[AnyEvent]
    batch: list[AnyEvent]
    touches: bool


TOUCH_CASES = {
    "nothing_reserved": TouchCase(
        "No reservation held and no boost in the batch: none can be looked at after it.",
        [pending("p")],
        [admit("other", "a", 1), finished("other")],
        False,
    ),
    "reservation_held": TouchCase(
        "A reservation held before the batch: its queue's changes count.",
        [pending("r"), reserved("r")],
        [admit("other", "a", 1)],
        True,
    ),
    "boost_in_batch": TouchCase(
        "A boost in the batch may grant a reservation after the queue changed.",
        [pending("r")],
        [admit("other", "a", 1), reserved("r")],
        True,
    ),
    "boost_without_reservation": TouchCase(
        "Any boost counts, granted or not: the fold does not look inside.",
        [],
        [boost("w", granted=False)],
        True,
    ),
    "reservation_ended": TouchCase(
        "A reservation whose workload finished is held no more.",
        [pending("r"), reserved("r"), admit("r", "a", 1), finished("r")],
        [admit("other", "a", 1)],
        False,
    ),
}


@pytest.mark.parametrize("name", TOUCH_CASES)
def test_touched_queues_are_kept_only_when_a_reservation_can_be_due(name: str) -> None:
    case = TOUCH_CASES[name]
    cluster = folded(case.before)
    assert touches_reservations(cluster, case.batch) == case.touches, case.why


@dataclass(frozen=True)
class AdmitCase:
    why: str
    before: list[AnyEvent]
    usage: int  # milli-CPU of ``a`` after ``w``'s admission at generation 2 (2 CPU)
    victim: bool  # whether ``w`` is still someone's victim after it


ADMIT_CASES = {
    "first_run": AdmitCase("Nothing ran before: no release to make.", [], 2000, False),
    "running_before": AdmitCase(
        "Its first run (1 CPU) is released first: it must not be counted twice.",
        [admit("w", "a", 1)],
        2000,
        False,
    ),
    "victim_before": AdmitCase(
        "A victim still running, admitted again, leaves its preemptor's flight (which held"
        " its 1 CPU as gone and the preemptor's 1 CPU as used).",
        [admit("w", "a", 1), ask("p", "a", 1), evict("w", "a", "p")],
        2000,
        False,
    ),
    "victim_gone_before": AdmitCase(
        "A victim whose eviction is done, admitted again: its first run and its place in"
        " the flight were released by the eviction; only the new run counts.",
        [admit("w", "a", 1), ask("p", "a", 1), evict("w", "a", "p"), evicted("w")],
        2000,
        False,
    ),
    "other_running": AdmitCase("Another workload's run stays.", [admit("x", "a", 1)], 3000, False),
}


@pytest.mark.parametrize("name", ADMIT_CASES)
def test_an_admission_releases_only_what_ran_before(name: str) -> None:
    """Cluster._admitted calls _release only when the workload runs (a victim always does:
    test_a_victim_is_always_running): the cases where it must, and where it has nothing
    to do. No flight is left for ``p``: its only victim runs again or is gone."""
    case = ADMIT_CASES[name]
    cluster = folded(case.before)
    cluster.apply(admit("w", "a", 2, generation=2))
    assert cluster.tree.usage("a").get(CPU, 0) == case.usage, case.why
    assert ("w" in cluster.victim_of) == case.victim, case.why
    assert set(cluster.running_in["a"]) == set(cluster.running), case.why
    assert not cluster.busy("p"), case.why


_VICTIM = [admit("v", "a", 1), ask("p", "a", 1), evict("v", "a", "p")]

# (why, events: after each, every victim is running)
VICTIM_RUNS: list[tuple[str, list[AnyEvent]]] = [
    ("a victim's eviction ends its run and its victimhood together", [*_VICTIM, evicted("v")]),
    ("so does its finish", [*_VICTIM, finished("v")]),
    ("and its deletion", [*_VICTIM, deleted("v")]),
    ("an eviction of an older run ends neither", [*_VICTIM, evicted("v", generation=0)]),
    (
        "a request to evict a workload no longer running makes no victim",
        [admit("v", "a", 1), evicted("v"), ask("p", "a", 1), evict("v", "a", "p")],
    ),
    ("a victim admitted again is no victim", [*_VICTIM, admit("v", "a", 1, generation=2)]),
]


@pytest.mark.parametrize(("why", "events"), VICTIM_RUNS, ids=[c[0] for c in VICTIM_RUNS])
def test_a_victim_is_always_running(why: str, events: list[AnyEvent]) -> None:
    """Cluster.victim_of names only running workloads, after every event: Cluster._admitted
    relies on it (it releases a re-admitted workload only if it runs)."""
    cluster = folded([])
    for event in events:
        cluster.apply(event)
        assert set(cluster.victim_of) <= set(cluster.running), why


@pytest.mark.parametrize("name", FOLD_CASES)
def test_the_live_fold_folds_as_apply(name: str) -> None:
    """PreemptionService._fold looks each event's fold up itself (Cluster.folds) instead of
    calling Cluster.apply: the same books, whatever the kind (one without a fold too)."""
    case = FOLD_CASES[name]
    service = PreemptionService(cast(Runtime, SimpleNamespace(bus=None)))
    service.cluster.set_config([cq("a", {"rf/cpu": 4})])
    service._fold(case.before, live=False)
    service._fold([case.event], live=True)
    assert books(service.cluster) == books(folded([*case.before, case.event])), case.why


def test_an_admission_folds_into_the_running_its_events_describe() -> None:
    """Cluster._admitted builds ``Running`` by position: two floats (queue_time,
    admitted_at) and two ints (priority, preemptions) mypy cannot tell apart. Every field
    here has its own value, so a swap of any two of them is caught."""
    admitted_at = CREATED + timedelta(minutes=10)
    preempted = [
        EvictionRequested(
            source="preemption",
            time=CREATED + timedelta(minutes=minute),
            workload=ref("w"),
            cluster_queue="a",
            generation=generation,
            reason="Preempted",
            preemptor=ref("p"),
        )
        for generation, minute in ((1, 2), (2, 5))
    ]
    cluster = folded(
        [
            submitted("w"),  # created at CREATED: its queue time
            *preempted,
            boost("w", granted=False),  # boost 5, its clock since CREATED: the run is aged
            WorkloadAdmitted(
                source="admission",
                time=admitted_at,
                workload=ref("w"),
                cluster_queue="a",
                local_queue="lq",
                priority=100,
                assignments=[FlavorAssignment("main", 1, {"cpu": "rf"}, {"cpu": 3000})],
                generation=3,
            ),
        ]
    )
    assert cluster.running["w"] == Running(
        ref=ref("w"),
        cluster_queue="a",
        priority=95,  # admitted at 100, a candidate at its base priority (boost 5 off)
        queue_time=CREATED.timestamp(),
        admitted_at=admitted_at.timestamp(),
        usage={CPU: 3000},
        evicting=False,
        preemptions=2,  # both requests fall in the hour before its admission
    )


# (its life, what the cluster still keeps of it, why)
LEFT_BEHIND: list[tuple[str, list[AnyEvent], set[str], str]] = [
    ("running", [submitted("w"), admit("w", "a", 1)], {"running", "generation", "queue time", "queue"},
     "an admitted run is kept whole"),
    ("finished", [submitted("w"), admit("w", "a", 1), finished("w")], {"generation"},
     "a finished run keeps only its generation: an echo of its admission is told apart"),
    ("deleted", [submitted("w"), admit("w", "a", 1), finished("w"), deleted("w")], set(),
     "a deleted workload leaves nothing: else every workload ever run stayed for good"),
    ("deleted_while_waiting", [submitted("w"), ask("w", "a", 1), deleted("w")], set(),
     "a workload deleted before it ran leaves nothing either"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("life", "events", "kept", "why"), LEFT_BEHIND, ids=[case[0] for case in LEFT_BEHIND]
)
def test_what_a_workload_leaves_behind(
    life: str, events: list[AnyEvent], kept: set[str], why: str
) -> None:
    cluster = folded(events)
    books_of_w = {
        "running": cluster.running,
        "generation": cluster.generations,
        "queue time": cluster.queue_times,
        "waiting": cluster.waiting,
        "queue": cluster.queue_of,
    }
    assert {name for name, book in books_of_w.items() if "w" in book} == kept, why
