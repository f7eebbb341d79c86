"""bench/failover.py's scenario: two ClusterQueues in one cohort that borrow and reclaim
from each other, a probe ClusterQueue outside it, two priority classes, and the stream of
simulated Jobs created in the objects bucket while the kills happen.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from nats.js.kv import KeyValue

from bench.objects import FLAVOR, V1, cpu_cluster_queue, queue_namespace, simulated_job
from shared.bus import OBJECTS_BUCKET, Bus, BusError, KeyExists
from shared.workloads import workload_key

REPO = Path(__file__).resolve().parent.parent
ROLES = ("watcher", "admission", "preemption", "recovery")
COHORT = "failover"
QUEUES = ("team-a", "team-b")  # ClusterQueue, Namespace and LocalQueue share the name
PROBE = "probe"  # a ClusterQueue outside the cohort: its quota is always free
NOMINAL_CPU = 4  # per ClusterQueue of the cohort; each may borrow the other's 4
PROBE_CPU = 2
PRIORITIES = {"high": 1000, "low": 100}
ROLE_TARGET_S = 5.0
NATS_TARGET_S = 1.0
# nats-server (server/raft.go): a Raft group whose leader stops sending heartbeats (every 1 s)
# elects a new one after a random election timeout of 4 to 9 s; these are compiled-in
# defaults (minElectionTimeout, maxElectionTimeout) that no configuration option changes.
RAFT_ELECTION_S = (4.0, 9.0)
PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


@dataclass(frozen=True)
class Scenario:
    rate: float = 4.0  # Jobs created per second
    high_share: float = 0.25  # of them in the high priority class
    runtime_ms: tuple[int, int] = (500, 2500)  # simulated run time, uniform
    settle_s: float = 3.0  # after a kill's takeover, before the next kill
    drain_limit_s: float = 120.0  # for every workload to finish once the stream stops
    nats_kills: int = 2  # 1: a follower of the event stream's Raft group; 2: then its leader
    seed: int = 15


DEFAULT_SCENARIO = Scenario()


def config_documents() -> list[dict[str, Any]]:
    """The cohort's two ClusterQueues, the probe's, their LocalQueues and the classes."""
    documents: list[dict[str, Any]] = [FLAVOR]
    for name, value in PRIORITIES.items():
        documents.append(
            {
                "apiVersion": V1,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    for name, cpu, cohort in [
        *((q, NOMINAL_CPU, COHORT) for q in QUEUES),
        (PROBE, PROBE_CPU, None),
    ]:
        documents.append(
            cpu_cluster_queue(
                name,
                cpu,
                cohort=cohort,
                borrowing_limit=cpu if cohort else None,
                preemption=PREEMPTION,
            )
        )
        documents += queue_namespace(name)
    return documents


def limits() -> tuple[dict[str, int], dict[str, str], dict[str, int]]:
    """(ClusterQueue limit, cohort of each, cohort limit) in milli-CPU, for the audit."""
    cq_limit = {q: 2 * NOMINAL_CPU * 1000 for q in QUEUES} | {PROBE: PROBE_CPU * 1000}
    cohort_of = dict.fromkeys(QUEUES, COHORT)
    cohort_limit = {COHORT: len(QUEUES) * NOMINAL_CPU * 1000, PROBE: PROBE_CPU * 1000}
    return cq_limit, cohort_of, cohort_limit


def job(
    name: str, namespace: str, priority_class: str, cpu: str, runtime_ms: int
) -> dict[str, Any]:
    return simulated_job(name, namespace, runtime_ms, cpu=cpu, priority_class=priority_class)


class Generator:
    """Creates the stream's Jobs in the objects bucket, as `berth submit` does."""

    def __init__(self, bus: Bus, scenario: Scenario) -> None:
        self.bus = bus
        self.scenario = scenario
        self.random = random.Random(scenario.seed)
        self.created: dict[str, str] = {}  # uid -> name
        self.stop = asyncio.Event()
        self.failed_creates = 0
        self.objects: KeyValue | None = None

    async def create(self, manifest: dict[str, Any]) -> str:
        metadata = manifest["metadata"]
        if self.objects is None:  # looked up once: a lookup is a request a NATS kill can lose
            self.objects = await self.bus.kv(OBJECTS_BUCKET)
        objects = self.objects
        key = workload_key(metadata["namespace"], metadata["name"])
        value = msgspec.json.encode(manifest)
        # A create times out while a NATS node is down and may still have landed (FIELD-NOTES):
        # retry the same create; a lost swap then means our first one was stored.
        for _ in range(40):
            try:
                await self.bus.update_key(objects, key, value, last=0)
                break
            except KeyExists:
                break
            except (BusError, TimeoutError, OSError):  # AckTimeout is a BusError
                # Unanswered, or "no stream for the subject" while the bucket's stream
                # elects a new leader (then nothing was stored).
                self.failed_creates += 1
                await asyncio.sleep(0.25)
        else:
            raise RuntimeError(f"could not create {key}")
        self.created[metadata["uid"]] = metadata["name"]
        return str(metadata["uid"])

    async def run(self) -> None:
        sequence = 0
        interval = 1.0 / self.scenario.rate
        started = time.monotonic()
        while not self.stop.is_set():
            klass = "high" if self.random.random() < self.scenario.high_share else "low"
            queue = self.random.choice(QUEUES)
            cpu = "2" if klass == "high" else "1"
            runtime = self.random.randint(*self.scenario.runtime_ms)
            await self.create(job(f"{klass}-{sequence}", queue, klass, cpu, runtime))
            sequence += 1
            # Paced on the clock, not on the creates: a slow create does not slow the stream.
            pause = started + sequence * interval - time.monotonic()
            if pause > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), pause)
                except TimeoutError:
                    pass
