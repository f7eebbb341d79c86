"""What the tests of batches on the bus share (shared/bus/batches.py, docs/events.md
"Batches"): the events they publish, a bus that batches, and a replay of what it stored."""

from __future__ import annotations

from typing import Any

from shared.bus import Bus
from shared.bus.settings import BusSettings
from shared.events import (
    AnyEvent,
    EvictionRequested,
    PodSet,
    WorkloadAdmitted,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
    now,
)
from tests.conftest import connect_open

BATCHES = BusSettings(batching=True)


def _ref(name: str) -> WorkloadRef:
    return WorkloadRef("default", name, f"uid-{name}")


def _about(name: str, source: str = "admission") -> dict[str, Any]:
    """What every test event carries: its source and workload, and the ClusterQueue."""
    return {"source": source, "workload": _ref(name), "cluster_queue": "cq"}


def _submitted(name: str) -> WorkloadSubmitted:
    return WorkloadSubmitted(
        id=f"submitted-{name}",
        source="watcher",
        workload=_ref(name),
        kind="Job",
        queue_name="lq",
        pod_sets=[PodSet("main", 1, {"cpu": 1000})],
        created=now(),
    )


def _admitted(name: str, generation: int = 1) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        id=f"admitted-{name}-{generation}",
        local_queue="lq",
        priority=0,
        generation=generation,
        assignments=[],
        **_about(name),
    )


def _pending(name: str) -> WorkloadPending:
    return WorkloadPending(id=f"pending-{name}", reason="Pending", message="-", **_about(name))


def _evict(name: str) -> EvictionRequested:
    return EvictionRequested(id=f"evict-{name}", generation=1, reason="Preempted", **_about(name))


async def _connect(url: str, source: str) -> Bus:
    bus = await connect_open(url, source, BATCHES)
    await bus.ensure_stream()
    return bus


async def _replayed(bus: Bus, subjects: list[str], count: int) -> list[AnyEvent]:
    """What a replay consumer of ``subjects`` is handed, once it has ``count`` events."""
    subscription = await bus.replay_subscription(subjects)
    events: list[AnyEvent] = []
    while len(events) < count:
        batch = await bus.next_batch(subscription, wait=5.0)
        assert batch, f"only {len(events)} of {count} events came"
        events += batch
    assert await bus.next_batch(subscription, wait=0.3) == [], "and nothing more"
    return events
