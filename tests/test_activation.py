"""Kueue's spec.active in admission's fold (services/admission/activation.py): each script
of stops, resumes, evictions and scheduling passes, with the reason it must end as it does.

The core runs for real (Scheduler with a 4-CPU ClusterQueue); the events are built as the
service would fold them. The end-to-end test through the CLI is tests/test_stopping.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.admission.activation import DEACTIVATED, INACTIVE, Activity, queued
from services.admission.scheduler import Admission, Scheduler
from services.admission.workload_objects import WorkloadRecord
from shared.events import (
    Event,
    EvictionRequested,
    PodSet,
    SetWorkloadActive,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from tests.test_scheduler import simple

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


class World:
    """Admission's books for the scripts: records, the core, the activity, what was said."""

    def __init__(self) -> None:
        self.scheduler = Scheduler()
        self.scheduler.set_config(simple(cpu=4))
        self.records: dict[str, WorkloadRecord] = {}
        self.activity = Activity()
        self.said: list[str] = []  # "<reason> <name>" of what due() published

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
                self.records[ref.uid] = WorkloadRecord(submitted=event)
                self.scheduler.submit(queued(event))
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
