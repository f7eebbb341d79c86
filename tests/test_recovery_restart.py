"""A restarted recovery keeps every waiting workload's ageing clock (docs/ageing.md): it reads
the waits back from the stream at start, with the clocks it had announced. Recovery runs in
process on a real nats-server; the facts are what the watcher and admission publish."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.js import JetStreamContext

from services.recovery.service import RecoveryService
from shared.bus import CONFIG_BUCKET, Bus
from shared.config import config_key
from shared.events import (
    AnyEvent,
    PodSet,
    PriorityBoosted,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPending,
    WorkloadRef,
    WorkloadSubmitted,
)
from shared.service import Runtime
from tests.conftest import bus_auth

V1 = "kueue.x-k8s.io/v1beta1"
REF = WorkloadRef("ns", "plain", "uid-plain")
CONFIG = [
    ("ClusterQueue", "cq", None, {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu"],
        "flavors": [{"name": "rf", "resources": [{"name": "cpu", "nominalQuota": 4}]}]}]}),
    ("LocalQueue", "lq", "ns", {"clusterQueue": "cq"}),
    ("ClusterQueuePolicy", "default", None, {"ageing": {
        "priorityPerMinute": 60, "reserveAfter": "1s", "maxReservedShare": 1}}),
]  # fmt: skip


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def start_recovery(nats_url: str, data_dir: Path) -> tuple[Runtime, asyncio.Task[None]]:
    _, runtime, task = await start_service(nats_url, data_dir)
    return runtime, task


async def start_service(
    nats_url: str, data_dir: Path
) -> tuple[RecoveryService, Runtime, asyncio.Task[None]]:
    """Recovery running in process, ready (its waits read back, its consumer made)."""
    bus = await Bus.connect(nats_url, source="recovery", auth=bus_auth(nats_url))
    runtime = Runtime(name="recovery", bus=bus, data_dir=str(data_dir))
    service = RecoveryService(runtime)
    task = asyncio.create_task(service.run())
    async with asyncio.timeout(10):
        await runtime.ready.wait()
    return service, runtime, task


async def configured(nats_url: str) -> Bus:
    """A connection (as admission) to the server, its stream made and ``CONFIG`` applied."""
    bus = await Bus.connect(nats_url, source="admission", auth=bus_auth(nats_url))
    await bus.ensure_stream()
    config = await bus.kv(CONFIG_BUCKET)
    for kind, name, namespace, spec in CONFIG:
        metadata = {"name": name} | ({"namespace": namespace} if namespace else {})
        document = {"apiVersion": "berth.dev/v1alpha1" if "Policy" in kind else V1,
                    "kind": kind, "metadata": metadata, "spec": spec}  # fmt: skip
        await config.put(config_key(kind, name, namespace), msgspec.json.encode(document))
    return bus


async def stop_recovery(runtime: Runtime, task: asyncio.Task[None]) -> None:
    runtime.stopping.set()
    async with asyncio.timeout(10):
        await task
    await runtime.cancel_tasks(grace=1)
    await runtime.bus.close()


Subscription = JetStreamContext.PullSubscription


def boosts_of(events: list[AnyEvent] | None) -> list[PriorityBoosted]:
    return [e for e in events or [] if isinstance(e, PriorityBoosted) and e.workload == REF]


async def next_boost(bus: Bus, subscription: Subscription, *, above: int) -> PriorityBoosted:
    """The first announcement for the workload with a boost above ``above``."""
    async with asyncio.timeout(15):
        while True:
            for event in boosts_of(await bus.next_batch(subscription, wait=1.0)):
                if event.boost > above:
                    return event


async def highest_left(bus: Bus, subscription: Subscription, boost: int) -> int:
    """The highest boost announced so far (what a stopped recovery published last)."""
    while events := await bus.next_batch(subscription, wait=1.0):
        boost = max([boost, *(e.boost for e in boosts_of(events))])
    return boost


async def test_a_restarted_recovery_keeps_a_plain_workloads_clock(
    nats_url: str, tmp_path: Path
) -> None:
    """A plain workload waits (its clock: its creation), runs, is evicted and waits again;
    recovery restarts during that second wait. The restarted recovery goes on boosting it from
    the clock it had (not from the eviction, where a clock counted from this wait alone would
    start, nor not at all, as a recovery that only knows what its durable consumer delivers
    after the restart)."""
    bus = await configured(nats_url)
    created = time.time() - 120
    pod_sets = [PodSet(name="main", count=1, requests={"cpu": 2000})]
    await bus.publish_many([
        WorkloadSubmitted(id="s", source="watcher", workload=REF, kind="Job", queue_name="lq",
                          pod_sets=pod_sets, created=at(created)),
        WorkloadPending(id="p", source="admission", workload=REF, cluster_queue="cq",
                        reason="Pending", message="waits"),
    ])  # fmt: skip
    boosts = await bus.replay_subscription(["berth.job.boost.>"])
    runtime, task = await start_recovery(nats_url, tmp_path / "first")
    first = await next_boost(bus, boosts, above=0)
    assert first.since is not None and abs(first.since.timestamp() - created) < 0.01, first
    # It runs, and is evicted: a new wait, under the clock it already has.
    await bus.publish_many([
        WorkloadAdmitted(id="a", source="admission", workload=REF, cluster_queue="cq",
                         local_queue="lq", priority=0, assignments=[], generation=1),
        WorkloadEvicted(id="e", source="watcher", workload=REF, generation=1, reason="Preempted"),
    ])  # fmt: skip
    last = await next_boost(bus, boosts, above=first.boost)  # boosted again while it waits
    await stop_recovery(runtime, task)
    highest = await highest_left(bus, boosts, last.boost)
    runtime, task = await start_recovery(nats_url, tmp_path / "second")
    try:
        again = await next_boost(bus, boosts, above=highest)
    finally:
        await stop_recovery(runtime, task)
        await bus.close()
    assert again.since == first.since, "the restarted recovery kept the workload's clock"
    assert again.boost >= 120, f"boosted for the whole wait since its creation: {again.boost}"
