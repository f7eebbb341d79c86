"""Recovery's ageing tick (RecoveryService._publish_boosts) looks each ClusterQueue's policy,
reserveAfter and nominal quota up once and keeps them across ticks until the config mirror
reports a change (RecoveryService._tick_lookups), and ``ageing.boost_at`` reads a
``reserveAfter`` once per text: each plain workload must still be boosted and reserved by its
own ClusterQueue's policy, and a config change the mirror follows (a policy, a quota, a
deleted ClusterQueue) counts from the next tick."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from msgspec.structs import replace

from services.recovery.ageing import boost_at
from services.recovery.service import RecoveryService
from services.recovery.ticking import forget_announced
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import (
    AgeingPolicy,
    ConfigObject,
    config_key,
    encode_object,
    object_key,
    parse_object,
)
from shared.events import (
    AnyEvent,
    Event,
    PodSet,
    PriorityBoosted,
    WorkloadDeleted,
    WorkloadEvicted,
    WorkloadFinished,
    WorkloadPending,
    WorkloadRef,
)
from shared.service import Runtime
from tests.test_starvation_waits import at, submitted
from tests.victims_search import cq

# --- boost_at reads each reserveAfter by its own text ---------------------------------------------

BOOSTS = [
    # (why, reserveAfter, waited s, due a reservation)
    ("10s: due at 10s", "10s", 10.0, True),
    ("1m after 10s was read: not due at 10s (never 10s's answer)", "1m", 10.0, False),
    ("10s again: still due", "10s", 10.0, True),
    ("1m: due at 60s", "1m", 60.0, True),
    ("off (null): never due", None, 10_000.0, False),
    ("90s: not due at 60s (never 1m's answer)", "90s", 60.0, False),
]


@pytest.mark.parametrize(("why", "after", "waited", "due"), BOOSTS, ids=[b[0] for b in BOOSTS])
def test_boost_at_reads_each_reserve_after(
    why: str, after: str | None, waited: float, due: bool
) -> None:
    policy = AgeingPolicy(priority_per_minute=60, reserve_after=after)
    assert boost_at(policy, waited) == (int(waited), due), why


# --- the tick: per ClusterQueue, by its own policy ------------------------------------------------


def _policy(name: str, queues: list[str], reserve_after: str, share: float) -> ConfigObject:
    return parse_object({
        "apiVersion": "berth.dev/v1alpha1", "kind": "ClusterQueuePolicy",
        "metadata": {"name": name},
        "spec": {"clusterQueues": queues, "ageing": {
            "priorityPerMinute": 60, "reserveAfter": reserve_after, "maxReservedShare": share}},
    })  # fmt: skip


def _service(config: list[ConfigObject]) -> tuple[RecoveryService, list[Event]]:
    published: list[Event] = []

    async def publish_many(events: list[Event]) -> None:
        published.extend(events)

    async def put(key: str, value: bytes) -> int:
        return 0

    service = RecoveryService(
        cast(Runtime, SimpleNamespace(bus=SimpleNamespace(publish_many=publish_many)))
    )
    service.kv = cast(Any, SimpleNamespace(put=put))
    service.config.objects = {object_key(o): o for o in config}
    return service, published


def _waiting(service: RecoveryService, name: str, queue: str, cpus: int) -> None:
    """A plain workload created at t=0, queued in ``queue``."""
    ref = WorkloadRef("ns", name, name)
    pod_sets = [PodSet(name="main", count=1, requests={"cpu": cpus * 1000})]
    service.waits.apply(replace(submitted(0), workload=ref, pod_sets=pod_sets))
    service.waits.apply(WorkloadPending(source="admission", time=at(1), workload=ref,
                                        cluster_queue=queue, reason="Pending", message=""))  # fmt: skip


CONFIG = [
    cq("fast", {"rf/cpu": 4}),
    cq("slow", {"rf/cpu": 4}),
    cq("big", {"rf/cpu": 8}),
    _policy("fast", ["fast"], "10s", 1.0),
    _policy("slow", ["slow", "big"], "100s", 0.5),
]


@dataclass(frozen=True)
class Case:
    why: str
    name: str
    queue: str
    cpus: int
    # (boost, reserved) announced by the tick at 50 s, then by the one at 120 s (None: none)
    at_50: tuple[int, bool] | None
    at_120: tuple[int, bool] | None


CASES = [
    Case("its queue's 10s passed by 50s: boosted from its creation, reserved",
         "a", "fast", 4, (50, True), (120, True)),
    Case("read in the same ticks as 'fast': its own 100s (none at 50s), its own 50% share",
         "b", "slow", 2, None, (120, True)),
    Case("'slow's policy on a queue of 8: 4 is within 50% of its 8 (not of slow's 4)",
         "c", "big", 4, None, (120, True)),
    Case("over the share of its own queue: due, not reserved", "d", "slow", 3, None,
         (120, False)),
    Case("an unknown ClusterQueue: the built-in 10m, no clock by 120s", "e", "nowhere", 1,
         None, None),
]  # fmt: skip


async def test_each_workload_is_aged_by_its_own_queues_policy() -> None:
    service, published = _service(CONFIG)
    for case in CASES:
        _waiting(service, case.name, case.queue, case.cpus)
    for now, expected in ((50.0, {c.name: c.at_50 for c in CASES}),
                          (120.0, {c.name: c.at_120 for c in CASES})):  # fmt: skip
        published.clear()
        await service._publish_boosts(now)
        said = {e.workload.name: (e.boost, e.reserved) for e in published
                if isinstance(e, PriorityBoosted)}  # fmt: skip
        for case in CASES:
            assert said.get(case.name) == expected[case.name], f"at {now:g}s: {case.why}"


@dataclass(frozen=True)
class Change:
    why: str
    before: list[ConfigObject]  # in the config bucket when the mirror starts
    cpus: int  # the request of ``w``, waiting in ``cq`` since t=0
    first: tuple[float, tuple[int, bool] | None]  # (now, (boost, reserved) announced or None)
    put: ConfigObject | None  # stored in the bucket between the two ticks, or
    delete: str | None  # the key deleted from it
    second: tuple[float, tuple[int, bool] | None]


_SHARE_HALF = _policy("p", ["cq"], "10s", 0.5)

CHANGES = {
    "policy_added": Change(
        "a reserveAfter shortened from the built-in 10m to 30s: its clock and reservation"
        " at the next tick",
        [cq("cq", {"rf/cpu": 4})], 1,
        (60.0, None), _policy("p", ["cq"], "30s", 1.0), None, (61.0, (61, True)),
    ),
    "quota_raised": Change(
        "the nominal quota raised from 2 to 4 CPU: its 2 CPU now fit 50% of it (the nominal"
        " of 2 the first tick looked up would refuse them again)",
        [cq("cq", {"rf/cpu": 2}), _SHARE_HALF], 2,
        (50.0, (50, False)), cq("cq", {"rf/cpu": 4}), None, (51.0, (51, True)),
    ),
    "queue_deleted": Change(
        "its ClusterQueue deleted: due, but no quota to reserve in (the ClusterQueue the"
        " first tick looked up would grant it)",
        [cq("cq", {"rf/cpu": 4}), _SHARE_HALF], 2,
        (5.0, None), None, config_key("ClusterQueue", "cq"), (51.0, (51, False)),
    ),
}  # fmt: skip


@pytest.fixture
def bus(watcher_bus: Bus) -> Bus:
    return watcher_bus


@pytest.mark.parametrize("name", CHANGES)
async def test_a_config_change_the_mirror_follows_counts_from_the_next_tick(
    name: str, bus: Bus, tmp_path: Path
) -> None:
    """The change goes through the config bucket and the service's own mirror (real NATS),
    so the lookups kept across ticks are dropped only when the mirror reports it."""
    case = CHANGES[name]
    kv = await bus.kv(CONFIG_BUCKET)
    for obj in case.before:
        await kv.put(object_key(obj), encode_object(obj))
    service, published = _service([])
    runtime = Runtime(name="recovery", bus=bus, data_dir=str(tmp_path))
    await service.config.start(runtime)
    _waiting(service, "w", "cq", case.cpus)

    async def tick(now: float) -> tuple[int, bool] | None:
        published.clear()
        await service._publish_boosts(now)
        said = [(e.boost, e.reserved) for e in published if isinstance(e, PriorityBoosted)]
        assert len(said) <= 1, case.why
        return said[0] if said else None

    try:
        assert await tick(case.first[0]) == case.first[1], case.why
        if case.put is not None:
            key = object_key(case.put)
            await kv.put(key, encode_object(case.put))
        else:
            assert case.delete is not None
            key = case.delete
            await kv.delete(key)
        async with asyncio.timeout(10):
            while service.config.objects.get(key) != case.put:  # noqa: ASYNC110 - a poll is simplest
                await asyncio.sleep(0.01)
        assert await tick(case.second[0]) == case.second[1], case.why
    finally:
        runtime.stopping.set()
        await runtime.cancel_tasks(grace=2)


# --- what was announced is forgotten with the workload ----------------------------------------


def _ended(kind: type[Event], name: str) -> AnyEvent:
    ref = WorkloadRef("default", name, name)
    if kind is WorkloadFinished:
        return WorkloadFinished(source="watcher", workload=ref, generation=1, succeeded=True)
    if kind is WorkloadDeleted:
        return WorkloadDeleted(source="watcher", workload=ref)
    return WorkloadEvicted(source="watcher", workload=ref, generation=1, reason="Preempted")


# (the event, whether the announcement of its workload is forgotten, why)
FORGOTTEN: list[tuple[type[Event], bool, str]] = [
    (WorkloadFinished, True, "a finished workload waits no more: its boost is never sent again"),
    (WorkloadDeleted, True, "a deleted workload is gone"),
    (WorkloadEvicted, False, "an evicted workload waits again: what it was told still holds"),
]


@pytest.mark.parametrize(("kind", "forgotten", "why"), FORGOTTEN, ids=[f[2] for f in FORGOTTEN])
def test_an_announcement_is_forgotten_with_its_workload(
    kind: type[Event], forgotten: bool, why: str
) -> None:
    announced = {"w": (5, False), "other": (1, False)}
    forget_announced(announced, [_ended(kind, "w")])
    assert ("w" not in announced) == forgotten, why
    assert "other" in announced, "another workload's stays"
