"""Micro-benchmark of the pure admission core.

100,000 pending workloads across 1,000 ClusterQueues in 10 cohorts. Prints decisions per
second (flavor assignments attempted per second of ``schedule()``) and the memory held per
pending workload (tracemalloc, measured around submit). Run:

    .venv/bin/python bench/admission_core.py
"""

from __future__ import annotations

import gc
import hashlib
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec

from services.admission.scheduler import Admission, QueuedWorkload, Scheduler
from shared.config import ConfigObject, parse_object
from shared.events import PodSet, WorkloadRef

V1 = "kueue.x-k8s.io/v1beta1"
CLUSTER_QUEUES = 1_000
COHORTS = 10
WORKLOADS = 100_000
ENCODER = msgspec.json.Encoder()


def build_config(
    cluster_queues: int = CLUSTER_QUEUES,
    cohort_of: Callable[[int], int] = lambda index: index % COHORTS,
) -> list[ConfigObject]:
    """Two flavors of cpu and memory, StrictFIFO and BestEffortFIFO alternating, each
    ClusterQueue in cohort ``cohort_of(index)`` with one LocalQueue (also the world of
    bench/million_pending.py)."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
        {"apiVersion": V1, "kind": "ResourceFlavor", "metadata": {"name": "spot"}},
    ]
    for index in range(cluster_queues):
        resources = ["cpu", "memory"]
        documents.append(
            {
                "apiVersion": V1,
                "kind": "ClusterQueue",
                "metadata": {"name": f"cq-{index}"},
                "spec": {
                    "cohort": f"cohort-{cohort_of(index)}",
                    "namespaceSelector": {},
                    "queueingStrategy": "StrictFIFO" if index % 2 else "BestEffortFIFO",
                    "resourceGroups": [
                        {
                            "coveredResources": resources,
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 20},
                                        {"name": "memory", "nominalQuota": "64Gi"},
                                    ],
                                }
                                for flavor in ("default-flavor", "spot")
                            ],
                        }
                    ],
                },
            }
        )
        documents.append(
            {
                "apiVersion": V1,
                "kind": "LocalQueue",
                "metadata": {"name": f"lq-{index}", "namespace": f"ns-{index % 100}"},
                "spec": {"clusterQueue": f"cq-{index}"},
            }
        )
    return [parse_object(document) for document in documents]


def main() -> None:
    rng = random.Random(7)
    shapes = [
        PodSet(name="main", count=count, requests={"cpu": cpu * 1000, "memory": (2 << 30) * 1000})
        for count in (1, 2, 4)
        for cpu in (1, 2)
    ]
    scheduler = Scheduler()
    scheduler.set_config(build_config())

    gc.collect()
    tracemalloc.start()
    start_all = tracemalloc.get_traced_memory()[0]
    workloads: list[QueuedWorkload] = []
    for i in range(WORKLOADS):
        queue = rng.randrange(CLUSTER_QUEUES)
        workloads.append(
            QueuedWorkload(
                ref=WorkloadRef(namespace=f"ns-{queue % 100}", name=f"job-{i}", uid=f"uid-{i:06d}"),
                local_queue=f"lq-{queue}",
                pod_sets=[shapes[i % len(shapes)]],  # shared PodSet objects, as the service does
                queue_time=1_700_000_000.0 + i,
                priority=rng.randrange(4) * 100,
            )
        )

    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for workload in workloads:
        scheduler.submit(workload)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # Memory the scheduler adds per pending workload, and the same with the caller-built
    # QueuedWorkload, WorkloadRef and strings included.
    per_workload = (after - before) / WORKLOADS
    per_workload_all = (after - start_all) / WORKLOADS

    start = time.perf_counter()
    decisions = scheduler.schedule()
    first = time.perf_counter() - start
    # Every decision of every pass, in order: the same decisions give the same digest.
    digest = hashlib.sha256()
    for decision in decisions:
        digest.update(ENCODER.encode(decision))
    admitted = [d for d in decisions if isinstance(d, Admission)]
    attempted = scheduler.tried

    # Steady state: finish 1% of admitted workloads, one pass admits what fits again.
    steady_decisions = 0
    steady_time = 0.0
    for round_ in range(20):
        batch = admitted[round_ * 50 : (round_ + 1) * 50]
        for admission in batch:
            scheduler.finish(admission.ref)
        start = time.perf_counter()
        decisions = scheduler.schedule()
        steady_time += time.perf_counter() - start
        for decision in decisions:
            digest.update(ENCODER.encode(decision))
        steady_decisions += scheduler.tried

    violations = scheduler.quota.violations()
    print(
        f"pending workloads:            {WORKLOADS:,} in {CLUSTER_QUEUES:,} ClusterQueues,"
        f" {COHORTS} cohorts"
    )
    print(
        f"first pass:                   {first:.2f} s, {attempted:,} decisions,"
        f" {len(admitted):,} admitted"
    )
    print(f"first pass decisions/s:       {attempted / first:,.0f}")
    print(
        f"steady-state passes:          {steady_decisions:,} decisions in {steady_time:.3f} s"
        f" ({steady_decisions / max(steady_time, 1e-9):,.0f}/s, {steady_time / 20 * 1000:,.0f} ms"
        " per pass)"
    )
    print(f"memory per pending workload:  {per_workload:,.0f} bytes (scheduler state, tracemalloc)")
    print(f"  incl. QueuedWorkload + ref:  {per_workload_all:,.0f} bytes")
    print(f"limit violations:             {len(violations)}")
    print(f"decisions digest:             {digest.hexdigest()[:12]} (every pass, in order)")


if __name__ == "__main__":
    main()
