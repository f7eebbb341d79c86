"""Micro-benchmark: preemption's searches and folds with many preemptions in flight.

The Kueue large-scale shape (1,000 ClusterQueues of 20 CPU in 10 cohorts of 100, every
ClusterQueue full of 1-CPU workloads at priority 50), ``--flights`` preemptors each with
``--victims`` victims still leaving, then ``--searches`` victim searches (``decide``, what the
service runs per waiting preemptor) and the fold of one whole preemption (its requests, its
victims' evictions, its admission). Prints microseconds per search and per preemption folded.
Before holds were kept incrementally (services/preemption/holds.py), every search applied and
undid every flight's reservations, so its cost grew with the flights in flight.

    .venv/bin/python bench/preemption_holds.py [--flights 200] [--victims 5] [--searches 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `services`, `shared` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.objects import FLAVOR, cpu_cluster_queue
from services.preemption.cluster import Cluster
from services.preemption.deciding import decide
from shared.config import ConfigObject, parse_object
from shared.events import (
    ContestedResource,
    EvictionRequested,
    FlavorAssignment,
    WorkloadAdmitted,
    WorkloadEvicted,
    WorkloadPending,
    WorkloadRef,
)

COHORTS, PER_COHORT, NOMINAL = 10, 100, 20


def config() -> list[ConfigObject]:
    objects = [parse_object(FLAVOR)]
    for c in range(COHORTS):
        for q in range(PER_COHORT):
            queue = cpu_cluster_queue(
                f"cq-{c}-{q}",
                NOMINAL,
                cohort=f"cohort-{c}",
                borrowing_limit=100,
                preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            )
            objects.append(parse_object(queue))
    return objects


def admitted(
    name: str, queue: str, cpus: int, priority: int, generation: int = 1
) -> WorkloadAdmitted:
    return WorkloadAdmitted(
        source="admission",
        workload=WorkloadRef(queue, name, name),
        cluster_queue=queue,
        local_queue=queue,
        priority=priority,
        assignments=[FlavorAssignment("main", 1, {"cpu": "rf"}, {"cpu": cpus * 1000})],
        generation=generation,
    )


def pending(name: str, queue: str, cpus: int) -> WorkloadPending:
    return WorkloadPending(
        source="admission",
        workload=WorkloadRef(queue, name, name),
        cluster_queue=queue,
        reason="Pending",
        message="insufficient unused quota",
        priority=200,
        preemption_may_help=True,
        contested=[ContestedResource("rf", "cpu", cpus * 1000)],
    )


def order(cluster: Cluster, preemptor: str, queue: str, victims: int) -> list[str]:
    """Fold ``victims`` eviction requests of ``queue``'s running workloads for ``preemptor``."""
    chosen = [uid for uid in cluster.running_in[queue] if uid not in cluster.victim_of][:victims]
    for uid in chosen:
        cluster.apply(
            EvictionRequested(
                source="preemption",
                workload=cluster.running[uid].ref,
                cluster_queue=queue,
                generation=cluster.generations[uid],
                reason="Preempted",
                preemptor=WorkloadRef(queue, preemptor, preemptor),
            )
        )
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flights", type=int, default=200, help="preemptions in flight")
    parser.add_argument("--victims", type=int, default=5, help="victims per flight")
    parser.add_argument("--searches", type=int, default=2_000)
    args = parser.parse_args(argv)
    rng = random.Random(20)
    cluster = Cluster()
    cluster.set_config(config())
    queues = [f"cq-{c}-{q}" for c in range(COHORTS) for q in range(PER_COHORT)]
    for queue in queues:
        for i in range(NOMINAL):
            cluster.apply(admitted(f"{queue}-w{i}", queue, 1, 50))
    for f in range(args.flights):
        queue = rng.choice(queues)
        cluster.apply(pending(f"flight-{f}", queue, args.victims))
        order(cluster, f"flight-{f}", queue, args.victims)
    searchers = []
    for s in range(args.searches):
        queue = rng.choice(queues)
        cluster.apply(pending(f"search-{s}", queue, rng.choice([1, 5, 20])))
        searchers.append(f"search-{s}")
    started = time.process_time()
    decisions = [decide(cluster, uid, wall=2e9) for uid in searchers]
    search_us = (time.process_time() - started) / args.searches * 1e6
    # One whole preemption folded, many times: ordered, its victims evicted, it admitted.
    rounds = 500
    started = time.process_time()
    for r in range(rounds):
        queue = rng.choice(queues)
        name = f"round-{r}"
        cluster.apply(pending(name, queue, 2))
        for uid in order(cluster, name, queue, 2):
            generation = cluster.generations[uid]
            ref = cluster.running[uid].ref
            cluster.apply(
                WorkloadEvicted(
                    source="watcher", workload=ref, generation=generation, reason="Preempted"
                )
            )
            cluster.apply(admitted(uid, queue, 1, 50, generation=generation + 1))
        cluster.apply(admitted(name, queue, 2, 200))
    fold_us = (time.process_time() - started) / rounds * 1e6
    found = sum(1 for decision in decisions if decision.victims)
    # The same victims in the same order give the same digest: compare code versions by it.
    digest = hashlib.sha256(
        repr([[v.workload.ref.uid for v in d.victims] for d in decisions]).encode()
    ).hexdigest()[:12]
    print(
        f"{len(cluster.running):,} running in {len(queues):,} ClusterQueues;"
        f" {len(cluster.in_flight):,} preemptions in flight x {args.victims} victims"
    )
    print(
        f"search (decide): {search_us:,.0f} us CPU each ({found:,} of {args.searches:,} found victims)"
    )
    print(f"decisions digest: {digest} (the same victims, in order, give the same digest)")
    print(f"one preemption folded (order, evictions, admissions): {fold_us:,.0f} us CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
