"""Kueue's spec.active in admission's fold (services/admission/activation.py): each script
of stops, resumes, evictions and scheduling passes, with the reason it must end as it does;
whoever deactivated a workload (a user, its maximum execution time, a Rejected check),
``berth resume workload`` brings it back.

The core runs for real (Scheduler with a 4-CPU ClusterQueue); the events are built as the
service would fold them. The end-to-end test through the CLI is tests/test_stopping.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.admission.activation import DEACTIVATED, INACTIVE, Activity
from services.admission.admission_checks import REASON as CHECK_REASON
from services.admission.deactivation import Deactivation, deactivating
from services.admission.exec_time import MESSAGE as EXEC_MESSAGE
from services.admission.exec_time import REASON as EXEC_REASON
from services.admission.scheduler import Admission, Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.events import (
    Event,
    EvictionRequested,
    PodSet,
    PriorityBoosted,
    SetWorkloadActive,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from tests.scheduler_world import simple

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


class World:
    """Admission's books for the scripts: records, the core, the activity, what was said."""

    def __init__(self) -> None:
        self.scheduler = Scheduler()
        self.scheduler.set_config(simple(cpu=4))
        self.records: dict[str, WorkloadRecord] = {}
        self.activity = Activity()
        self.said: list[str] = []  # "<reason> <name>" of what due() published
        self.folded: dict[str, EvictionRequested] = {}  # each one's last Kueue deactivation

    def ref(self, name: str) -> WorkloadRef:
        return WorkloadRef("default", name, f"uid-{name}")

    def step(self, action: str) -> None:
        verb, _, name = action.partition(" ")
        ref = self.ref(name)
        record = self.records.get(ref.uid)
        match verb:
            case "submit":  # 4 CPUs: one fills the queue
                event = WorkloadSubmitted(
                    source="watcher",
                    workload=ref,
                    kind="Job",
                    queue_name="user-queue",
                    pod_sets=[PodSet("main", 1, {"cpu": 4000})],
                    created=T0,
                )
                record = self.records[ref.uid] = WorkloadRecord.of(event)
                self.scheduler.submit(record)
            case "schedule":
                for decision in self.scheduler.schedule():
                    if isinstance(decision, Admission):
                        generation = self.scheduler.generation(decision.ref)
                        self.records[decision.ref.uid].on_admitted(
                            WorkloadAdmitted(
                                source="admission",
                                workload=decision.ref,
                                cluster_queue=decision.cluster_queue,
                                local_queue=decision.local_queue,
                                priority=0,
                                assignments=decision.assignments,
                                generation=generation,
                            )
                        )
                        self.said.append(f"admitted {decision.ref.name}")
            case "stop" | "resume":
                self.activity.apply(
                    SetWorkloadActive(source="cli", workload=ref, active=verb == "resume"),
                    record,
                    self.scheduler,
                    "cq",
                )
            case "evicted":  # the watcher stopped the current admission
                assert record is not None and record.admission is not None
                generation = record.admission.generation
                self.scheduler.evict(ref)
                self.activity.evicted(ref, generation, self.scheduler, "cq")
                record.on_evicted(
                    WorkloadEvicted(
                        source="watcher", workload=ref, generation=generation, reason="Deactivated"
                    )
                )
            case "exceed" | "reject":  # a Kueue-made deactivation of its admission, folded
                assert record is not None and record.admission is not None
                cause = (
                    Deactivation(EXEC_REASON, EXEC_MESSAGE)
                    if verb == "exceed"
                    else Deactivation(CHECK_REASON, "AdmissionCheck in Rejected state")
                )
                eviction = EvictionRequested(
                    source="admission",
                    workload=ref,
                    cluster_queue="cq",
                    generation=record.admission.generation,
                    reason=cause.cause,
                )
                self.folded[name] = deactivating(eviction, cause)
                self.activity.apply(self.folded[name], record, self.scheduler, "cq")
            case "redeliver":  # the stream hands the same deactivation over again
                self.activity.apply(self.folded[name], record, self.scheduler, "cq")
            case "finish":  # it ran to completion: its quota is free
                self.scheduler.finish(ref)
            case "due":
                for said in self.activity.due(self.records, self.scheduler):
                    self.said.append(_said(said))
                    self.activity.echoed(said)
            case _:
                raise AssertionError(f"unknown step {action!r}")


def _said(event: Event) -> str:
    if isinstance(event, EvictionRequested):
        return f"evict:{event.reason} {event.workload.name} g{event.generation}"
    assert isinstance(event, WorkloadPending) and not event.preemption_may_help
    return f"pending:{event.reason} {event.workload.name}"


# (why, script, what was said, in order)
CASES = [
    (
        "a pending workload stopped leaves its queue at once, is shown Inactive and is not"
        " admitted with room for it; resumed, it is",
        [
            "submit a",
            "submit b",
            "schedule",
            "stop b",
            "due",
            "finish a",
            "schedule",
            "resume b",
            "schedule",
        ],
        ["admitted a", f"pending:{INACTIVE} b", "admitted b"],
    ),
    (
        "an admitted workload stopped keeps its quota until the watcher stops it: its eviction"
        " (Deactivated) is asked once; then its quota goes to the next and it stays out",
        [
            "submit a",
            "schedule",
            "submit b",
            "stop a",
            "due",
            "due",
            "schedule",
            "evicted a",
            "due",
            "schedule",
        ],
        ["admitted a", f"evict:{DEACTIVATED} a g1", f"pending:{INACTIVE} a", "admitted b"],
    ),
    (
        "resumed after its eviction, it is queued again and its next admission is a new"
        " generation (a new event id, not dropped as a duplicate)",
        [
            "submit a",
            "schedule",
            "stop a",
            "due",
            "evicted a",
            "due",
            "resume a",
            "schedule",
            "stop a",
            "due",
        ],
        [
            "admitted a",
            f"evict:{DEACTIVATED} a g1",
            f"pending:{INACTIVE} a",
            "admitted a",
            f"evict:{DEACTIVATED} a g2",
        ],
    ),
    (
        "resumed while its eviction is in flight: the eviction lands and it waits as any"
        " evicted workload, then is admitted again; nothing is announced Inactive",
        ["submit a", "schedule", "stop a", "due", "resume a", "evicted a", "due", "schedule"],
        ["admitted a", f"evict:{DEACTIVATED} a g1", "admitted a"],
    ),
    (
        "stopping twice is stopping once; resuming an active workload changes nothing",
        ["submit a", "resume a", "stop a", "stop a", "due", "due", "schedule"],
        [f"pending:{INACTIVE} a"],
    ),
    (
        "its maximum execution time deactivated it: no second eviction is asked; evicted, it"
        " is announced Inactive and stays out with room for it; resumed, it is admitted again",
        [
            "submit a",
            "schedule",
            "exceed a",
            "due",
            "evicted a",
            "due",
            "schedule",
            "resume a",
            "schedule",
        ],
        ["admitted a", f"pending:{INACTIVE} a", "admitted a"],
    ),
    (
        "a Rejected check deactivated it and a resume came before the eviction landed: the"
        " eviction lands, it waits as any evicted workload and is admitted again",
        ["submit a", "schedule", "reject a", "resume a", "evicted a", "due", "schedule"],
        ["admitted a", "admitted a"],
    ),
    (
        "a deactivation handed over again after the resume deactivates nothing",
        ["submit a", "schedule", "exceed a", "evicted a", "resume a", "redeliver a", "due"],
        ["admitted a"],
    ),
    (
        "a user's stop of a workload its limit deactivated changes nothing; resume brings it back",
        ["submit a", "schedule", "exceed a", "stop a", "due", "evicted a", "resume a", "schedule"],
        ["admitted a", "admitted a"],
    ),
    (
        "an unknown workload (deleted meanwhile) is ignored",
        ["stop ghost", "due", "submit a", "schedule"],
        ["admitted a"],
    ),
]


@pytest.mark.parametrize(("why", "script", "said"), CASES, ids=[c[0][:60] for c in CASES])
def test_activation_scripts(why: str, script: list[str], said: list[str]) -> None:
    world = World()
    for action in script:
        world.step(action)
    assert world.said == said, why


def test_a_replayed_eviction_is_not_asked_again() -> None:
    """After a restart the fold sees the stored Deactivated eviction: the new leader does
    not ask for it a second time (its echo marks it asked)."""
    world = World()
    for action in ("submit a", "schedule", "stop a"):
        world.step(action)
    world.activity.echoed(
        EvictionRequested(
            source="admission",
            workload=world.ref("a"),
            cluster_queue="cq",
            generation=1,
            reason=DEACTIVATED,
        )
    )
    world.step("due")
    assert world.said == ["admitted a"]


def test_the_inactive_reason_is_shown() -> None:
    """-o json/wide: spec.active false, the Kueue reason, and a pending message with the cause."""
    world = World()
    for action in ("submit a", "schedule", "exceed a", "evicted a", "due"):
        world.step(action)
    item: dict[str, Any] = {"spec": {}, "status": {}}
    world.activity.show("uid-a", item)
    assert item["spec"]["active"] is False
    assert item["status"]["berth"]["deactivation"] == {
        "reason": "DeactivatedDueToMaximumExecutionTimeExceeded",
        "message": "The workload is deactivated due to exceeding the maximum execution time",
    }
    reserved = world.records["uid-a"].conditions["QuotaReserved"]
    assert (reserved.reason, reserved.status) == (INACTIVE, "False")
    assert "due to exceeding the maximum execution time" in reserved.message


def test_resume_resets_the_requeue_state() -> None:
    """Kueue clears requeueState: a workload stopped while its backoff held it, with one
    pods-ready requeue counted, is queued at once on resume, its count back to 0, Requeued
    Reactivated, and its next admission numbered after the one the backoff kept."""
    world = World()
    for action in ("submit a", "schedule"):
        world.step(action)
    ref = world.ref("a")
    record = world.records[ref.uid]
    # The service's hold after a pods-ready timeout of admission 1 (gates.after_eviction).
    world.scheduler.evict(ref)
    world.scheduler.delete(ref)
    record.on_evicted(
        WorkloadEvicted(source="watcher", workload=ref, generation=1, reason="PodsReadyTimeout")
    )
    world.activity.gates.held[ref.uid] = (ref, 1e12, 1)
    world.activity.gates.pods_ready.requeued[ref.uid] = {1}
    for action in ("stop a", "due", "schedule", "resume a", "schedule"):
        world.step(action)
    assert world.said == ["admitted a", f"pending:{INACTIVE} a", "admitted a"]
    assert record.admission is not None and record.admission.generation == 2
    assert ref.uid not in world.activity.gates.held, "no backoff left"
    assert ref.uid not in world.activity.gates.pods_ready.requeued, "requeue count 0"
    assert record.requeue_count == 0
    requeued = record.conditions["Requeued"]
    assert (requeued.status, requeued.reason) == ("True", "Reactivated")


def test_resume_gives_a_fresh_execution_budget() -> None:
    """Kueue clears accumulatedPastExecutionTimeSeconds when the limit deactivates: resumed,
    the workload has its whole limit again, also when a user had stopped it first; one only
    a user stopped keeps what it used."""
    cases = [
        (["exceed a"], False, "its limit deactivated it: a fresh budget"),
        (["stop a"], True, "a user stopped it: 9 of its 10 s stay used"),
        (["stop a", "exceed a"], False, "stopped, then its limit's eviction: a fresh budget"),
    ]
    for steps, due, why in cases:
        world = World()
        limits = world.activity.limits
        limits.submitted("uid-a", {"kueue.x-k8s.io/max-exec-time-seconds": "10"})
        for action in ("submit a", "schedule"):
            world.step(action)
        limits.admitted("uid-a", 0.0)
        limits.stopped("uid-a", 9.0)  # 9 of its 10 s used
        for action in [*steps, "resume a"]:
            world.step(action)
        limits.admitted("uid-a", 100.0)
        assert limits.due(101.0) == (["uid-a"] if due else []), why


_REF = WorkloadRef("default", "e", "uid-e")


def _pending(source: str) -> WorkloadPending:
    return WorkloadPending(
        source=source, workload=_REF, cluster_queue="cq", reason=INACTIVE, message="m"
    )


# (event folded, what echoed keeps of it afterwards, why): only the three kinds it reads
ECHO_CASES: list[tuple[Event, tuple[bool, bool, bool], str]] = [
    (
        PriorityBoosted(source="recovery", workload=_REF, boost=5),
        (True, False, True),
        "a boost is kept for the next queueing",
    ),
    (
        EvictionRequested(
            source="admission", workload=_REF, cluster_queue="cq", generation=2, reason=DEACTIVATED
        ),
        (False, True, True),
        "its own Deactivated eviction: asked, not asked again",
    ),
    (
        EvictionRequested(
            source="preemption", workload=_REF, cluster_queue="cq", generation=2, reason="Preempted"
        ),
        (False, False, True),
        "another eviction: nothing",
    ),
    (
        _pending("admission"),
        (False, False, False),
        "its own Inactive announcement: announced",
    ),
    (
        _pending("preemption"),
        (False, False, True),
        "preemption's pending report: not admission's announcement",
    ),
    (
        WorkloadAdmitted(
            source="admission",
            workload=_REF,
            cluster_queue="cq",
            local_queue="lq",
            priority=0,
            assignments=[],
            generation=2,
        ),
        (False, False, True),
        "any other kind: nothing read",
    ),
]


@pytest.mark.parametrize(("event", "kept", "why"), ECHO_CASES, ids=[c[2] for c in ECHO_CASES])
def test_echoed(event: Event, kept: tuple[bool, bool, bool], why: str) -> None:
    """(boost kept, eviction marked asked, announcement still owed) after one echo."""
    activity = Activity()
    activity.unannounced[_REF.uid] = ("inactive-uid-e-2", "cq")
    activity.echoed(event)
    assert (
        _REF.uid in activity.boosts,
        (_REF.uid, 2) in activity.evictions_asked,
        _REF.uid in activity.unannounced,
    ) == kept, why
