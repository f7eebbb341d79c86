"""Micro-benchmark of the pure preemption victim search.

10,000 admitted workloads in one cohort of 10 ClusterQueues (some borrowing, some lending),
then 1,000 victim searches with preemptors of varied sizes, priorities and queues.
Prints p50/p99/max search time in ms (goal: p99 < 5 ms) and a digest of the decisions
(victims, reasons, messages), the same before and after a change that must not alter them. Run:

    .venv/bin/python bench/victim_search.py
"""

from __future__ import annotations

import hashlib
import random
import statistics
import time
from typing import Any

from services.preemption.borrowing import BorrowingTree
from services.preemption.victims import Preemptor, Running, find_victims
from shared.config import ClusterQueue, FairSharingSettings, parse_object
from shared.events import WorkloadRef

V1 = "kueue.x-k8s.io/v1beta1"
QUEUES = 10
WORKLOADS = 10_000
SEARCHES = 1_000  # a p99 needs at least 1,000 samples to mean what it says
CPU = ("default", "cpu")
MEM = ("default", "memory")
GPU = ("gpu", "nvidia.com/gpu")


def build_queues() -> list[ClusterQueue]:
    queues = []
    for i in range(QUEUES):
        doc: dict[str, Any] = {
            "apiVersion": V1,
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{i}"},
            "spec": {
                "cohort": "all",
                "preemption": {
                    "withinClusterQueue": "LowerPriority",
                    "reclaimWithinCohort": "Any" if i % 2 else "LowerPriority",
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 500}
                    if i % 3 == 0
                    else {"policy": "Never"},
                },
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": 2500},
                                    {"name": "memory", "nominalQuota": "9000Gi"},
                                ],
                            }
                        ],
                    },
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "gpu",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 100}],
                            }
                        ],
                    },
                ],
            },
        }
        obj = parse_object(doc)
        assert isinstance(obj, ClusterQueue)
        queues.append(obj)
    return queues


def main() -> None:
    rng = random.Random(42)
    queues = build_queues()
    tree = BorrowingTree.build(queues, [])  # preemption's own tree (services/preemption/cluster.py)
    running: list[Running] = []
    # Uneven load: low-numbered queues borrow from high-numbered ones.
    weights = [QUEUES - i for i in range(QUEUES)]
    attempts = 0
    while len(running) < WORKLOADS and attempts < 10 * WORKLOADS:
        attempts += 1
        queue = f"cq-{rng.choices(range(QUEUES), weights)[0]}"
        usage = {CPU: rng.randint(1, 4) * 1000, MEM: rng.randint(1, 16) * 1024**3 * 1000}
        if rng.random() < 0.1:
            usage[GPU] = rng.randint(1, 2) * 1000
        if not tree.fits(queue, usage):
            continue
        tree.add_usage(queue, usage)
        n = len(running)
        running.append(
            Running(
                ref=WorkloadRef("ns", f"w{n}", f"uid-{n:05d}"),
                cluster_queue=queue,
                priority=rng.choice([0, 100, 200, 500, 1000]),
                queue_time=float(n),
                admitted_at=float(n),
                usage=usage,
                evicting=rng.random() < 0.01,
            )
        )
    specs = {q.metadata.name: q for q in queues}
    # The service's form: one ClusterQueue's runs at a time (Cluster.choosable).
    by_queue: dict[str, list[Running]] = {}
    for w in running:
        by_queue.setdefault(w.cluster_queue, []).append(w)
    for label, fair in (("classical", None), ("fair sharing", FairSharingSettings(enable=True))):
        times: list[float] = []
        found = 0
        victims = 0
        outcomes: dict[str, int] = {}
        digest = hashlib.sha256()
        cpu = time.process_time()
        for s in range(SEARCHES):
            size = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256])
            needs = {CPU: size * 1000, MEM: size * 4 * 1024**3 * 1000}
            if rng.random() < 0.2:
                needs[GPU] = rng.randint(1, 8) * 1000
            preemptor = Preemptor(
                ref=WorkloadRef("ns", f"p{s}", f"p{s}"),
                cluster_queue=f"cq-{rng.randrange(QUEUES)}",
                priority=rng.choice([100, 200, 500, 1000, 2000]),
                queue_time=float(WORKLOADS + s),
                needs=needs,
            )
            start = time.perf_counter()
            result = find_victims(
                tree=tree,
                cluster_queues=specs,
                preemptor=preemptor,
                running=lambda q: by_queue.get(q, ()),
                fair_sharing=fair,
            )
            times.append((time.perf_counter() - start) * 1000)
            outcome = "victims" if result.victims else result.message
            chosen = [(v.workload.ref.uid, v.reason) for v in result.victims]
            digest.update(repr((chosen, result.message)).encode())
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if result.victims:
                found += 1
                victims += len(result.victims)
        cpu = time.process_time() - cpu
        times.sort()
        p50 = statistics.median(times)
        p99 = times[int(len(times) * 0.99) - 1]
        print(
            f"{label}: {len(running)} running, {SEARCHES} searches ({found} with victims,"
            f" {victims} victims): p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {times[-1]:.2f} ms;"
            f" {cpu:.2f} s CPU in all"
        )
        for outcome, count in sorted(outcomes.items()):
            print(f"    {count:4d}  {outcome}")
        print(f"    decisions digest: {digest.hexdigest()[:12]}")
    assert not tree.violations(), tree.violations()


if __name__ == "__main__":
    main()
